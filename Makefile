# Thin wrappers around the npm scripts; `make ci` is exactly what CI runs. `make help` lists them.
.PHONY: help install codegen build run dev test check bench ci

# A machine whose Node is older than package.json's engines (or has none) runs every target on the
# Dockerfile's pinned Node instead, fetched once from the npm registry (scripts/pinned-node).
node_floor := $(shell sed -n 's/.*"node": ">=\([0-9]*\).*/\1/p' package.json)
node_major := $(shell node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
ifeq ($(shell [ $(node_major) -lt $(node_floor) ] && echo old),old)
pinned_bin := $(shell scripts/pinned-node)
export PATH := $(pinned_bin):$(PATH)
$(info Node $(node_major) is older than engines (>=$(node_floor)): using $(shell $(pinned_bin)/node --version) from scripts/pinned-node)
endif

help: ## this list
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

# npm ci only when node_modules is missing or older than the lock file.
install: node_modules/.package-lock.json ## install dependencies (npm ci) when the lock file changed
node_modules/.package-lock.json: package-lock.json
	npm ci
	@touch $@

codegen: install ## regenerate src/generated/ from openapi.yaml
	npm run codegen

build: codegen ## compile to dist/ (what production runs)
	npm run build

# The service applies its migrations itself at start-up.
run: build ## run the service as production does (embedded database unless DATABASE_URL is set)
	npm start

dev: install ## run from source, restarting on every change, with readable logs
	npm run dev

# BACKEND=postgres (or embedded, or citus) runs it on that backend alone.
test: install ## the whole test suite, on PostgreSQL + Redis, on the embedded default and on Citus (where installed)
	npm test $(if $(BACKEND),-- --backend $(BACKEND))

check: install ## codegen and configuration-docs drift, formatting, types, lint, OpenAPI lint, container files
	npm run codegen:check
	npm run config:check
	npm run format:check
	npm run typecheck
	npm run lint
	npm run lint:openapi
	npm run check:containers

bench: install ## cached reads beside a bare-Fastify ceiling (needs local PostgreSQL and Redis)
	npm run bench

ci: ## exactly what CI runs
	bash .ci/run
