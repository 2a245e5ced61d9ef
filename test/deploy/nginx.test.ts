/** deploy/nginx.conf lets through every body the service takes: its body limit is at least the largest of openapi.yaml's. */
import { readFile } from 'node:fs/promises';
import t from 'tap';
import { operationTable } from '../../src/generated/operations.js';

/** nginx's size units: none is bytes, k and m are binary (1024) multiples, case-insensitive. */
const UNITS: Record<string, number> = { '': 1, k: 1024, m: 1024 * 1024, g: 1024 * 1024 * 1024 };

t.test('client_max_body_size is at least the largest body an operation takes (an import, 10 MiB)', async (t) => {
  const conf = await readFile('deploy/nginx.conf', 'utf8');
  const sizes = [...conf.matchAll(/^\s*client_max_body_size\s+(\d+)([kmg]?)\s*;/gim)].map(
    ([, n, unit]) => Number(n) * UNITS[unit!.toLowerCase()]!,
  );
  t.equal(sizes.length, 1, 'one client_max_body_size');
  const largest = Math.max(...Object.values(operationTable).map((operation) => operation.bodyLimit ?? 0));
  t.equal(largest, 10 * 1024 * 1024, "the import's 10 MiB");
  t.ok(sizes[0]! >= largest, `client_max_body_size ${sizes[0]} ≥ ${largest}`);
});
