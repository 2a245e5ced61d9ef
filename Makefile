# Thin wrappers around the npm scripts; `make ci` is exactly what CI runs.
.PHONY: install codegen run test check ci

# npm ci only when node_modules is missing or older than the lock file.
install: node_modules/.package-lock.json
node_modules/.package-lock.json: package-lock.json
	npm ci
	@touch $@

codegen: install
	npm run codegen

# The service applies its migrations itself at start-up.
run: install codegen
	npm start

test: install
	npm test

check: install
	npm run codegen:check
	npm run typecheck
	npm run lint:openapi
	npm run check:containers

ci:
	bash .ci/run
