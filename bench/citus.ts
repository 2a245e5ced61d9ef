/**
 * `npm run bench:citus -- [--duration S] [--rounds N] [--connections C] [--contacts N]`: the service
 * on Citus against plain PostgreSQL, in one run (docs/performance.md#citus). A throwaway Citus
 * coordinator and two workers (scripts/citus-cluster.sh) and the local PostgreSQL (127.0.0.1:5432)
 * each get a fresh database and a service (src/server.ts, no Redis, so every read reaches the
 * database); one user with `--contacts` contacts on each. Rounds alternate the sides and measure
 * creates, list pages and delta syncs with autocannon; it prints each round and the median
 * Citus/PostgreSQL ratio of each. Then the time `citus_move_shard_placement(…, 'force_logical')`
 * takes to move the user's shard group to the other worker under that user's creates and reads,
 * and what those requests were answered. Progress goes to stderr.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import autocannon from 'autocannon';
import pg from 'pg';
import { smtpCapture, type Teardown } from '../test/helper.js';
import { scratchDir, serviceEnv, signUp, startLoad, startService, type Service } from '../test/faults/processes.js';
import { cleanUp, createDatabase, log, ROOT, undo } from './support.js';

const { values } = parseArgs({
  options: {
    duration: { type: 'string', default: '10' },
    rounds: { type: 'string', default: '3' },
    connections: { type: 'string', default: '10' },
    contacts: { type: 'string', default: '2000' },
  },
});
const duration = Number(values.duration);
const rounds = Number(values.rounds);
const connections = Number(values.connections);
const seedCount = Number(values.contacts);
const median = (list: number[]) => [...list].sort((a, b) => a - b)[Math.floor(list.length / 2)]!;
const loadAverage = () =>
  os
    .loadavg()
    .map((n) => n.toFixed(1))
    .join(' / ');

const teardown: Teardown = {
  teardown: (fn) => void undo.push({ what: 'clean up', run: async () => void (await fn()) }),
  fail: (message) => {
    throw new Error(message);
  },
};

/** scripts/citus-cluster.sh with the cluster's folder; its output goes to stderr. */
function cluster(root: string, ...args: string[]): string {
  return execFileSync('bash', [path.join(ROOT, 'scripts/citus-cluster.sh'), ...args], {
    env: { ...process.env, ROOT: root },
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 2],
  });
}

async function query<R extends pg.QueryResultRow>(url: string, text: string, params: unknown[] = []): Promise<R[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<R>(text, params)).rows;
  } finally {
    await client.end();
  }
}

interface Side {
  name: 'citus' | 'postgres';
  databaseUrl: string;
  service: Service;
  token: string;
  userId: number;
}

async function side(name: Side['name'], databaseUrl: string): Promise<Side> {
  const mailbox = await smtpCapture(teardown);
  const service = await startService(
    teardown,
    serviceEnv(databaseUrl, mailbox.url, await scratchDir(teardown), {
      RATE_LIMIT_IMPORT_PER_MIN: '1000000',
      RATE_LIMIT_SYNC_PER_MIN: '1000000',
    }),
  );
  const token = await signUp(service.url, mailbox, `bench_${name}`);
  const auth = { authorization: `Bearer ${token}` };
  const me = (await (await fetch(`${service.url}/api/users/me`, { headers: auth })).json()) as { id: number };
  const csv = [
    'first_name,last_name,email,phone,birthday',
    ...Array.from({ length: seedCount }, (_, i) => `Seed,Contact${i},seed-${i}@example.com,+14155550123,1990-05-17`),
  ].join('\n');
  const imported = await fetch(`${service.url}/api/contacts/import`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'text/csv' },
    body: csv,
  });
  if (imported.status !== 200) throw new Error(`${name}: import ${imported.status} ${await imported.text()}`);
  log(`${name}: user ${me.id} with ${seedCount} contacts`);
  return { name, databaseUrl, service, token, userId: me.id };
}

/** A delta-sync token as of now: a full sync read to its end. */
async function freshSyncToken(s: Side): Promise<string> {
  let token: string | undefined;
  for (let more = true; more;) {
    const res = await fetch(`${s.service.url}/api/contacts/sync?limit=1000${token ? `&token=${encodeURIComponent(token)}` : ''}`, {
      headers: { authorization: `Bearer ${s.token}` },
    });
    const page = (await res.json()) as { next_token: string; has_more: boolean };
    token = page.next_token;
    more = page.has_more;
  }
  return token!;
}

type Operation = 'create' | 'list' | 'sync';
let created = 0;

async function measure(s: Side, op: Operation) {
  const json = { authorization: `Bearer ${s.token}`, 'content-type': 'application/json' };
  const requests: autocannon.Request[] =
    op === 'create'
      ? [
          {
            method: 'POST',
            path: '/api/contacts/',
            setupRequest: (request: autocannon.Request) => {
              const n = created++;
              const body = {
                first_name: 'Bench',
                last_name: `Citus${n}`,
                email: `citus-${n}@example.com`,
                phone: '+14155550123',
                birthday: '1990-05-17',
              };
              return { ...request, body: JSON.stringify(body) };
            },
          },
        ]
      : op === 'list'
        ? [{ method: 'GET', path: '/api/contacts/?limit=50&sort=last_name' }]
        : [{ method: 'GET', path: `/api/contacts/sync?token=${encodeURIComponent(await freshSyncToken(s))}` }];
  const result = await autocannon({ url: s.service.url, connections, duration, headers: json, requests });
  if (result.non2xx > 0 || result.errors > 0)
    throw new Error(
      `${s.name} ${op}: ${result.non2xx} non-2xx (${Object.keys(result.statusCodeStats ?? {}).join(', ')}), ${result.errors} errors`,
    );
  return { reqPerSec: result.requests.average, p50: result.latency.p50, p99: result.latency.p99 };
}

async function moveUnderLoad(citus: Side, nodes: string[]): Promise<void> {
  const coordinator = citus.databaseUrl;
  const distributed = await query<{ n: number }>(
    coordinator,
    "select count(*)::int as n from pg_dist_partition where logicalrelid = 'users'::regclass",
  );
  if (distributed[0]!.n === 0) {
    console.log('\n## Shard move\n\n`users` is not distributed (no migration distributed the tables): no shard group to move.');
    return;
  }
  const [{ shard }] = (await query<{ shard: string }>(
    coordinator,
    "select get_shard_id_for_distribution_column('users', $1::bigint)::text as shard",
    [citus.userId],
  )) as [{ shard: string }];
  const [{ port: from }] = (await query<{ port: number }>(
    coordinator,
    'select nodeport as port from pg_dist_shard_placement where shardid = $1',
    [shard],
  )) as [{ port: number }];
  const to = nodes
    .slice(1)
    .map((url) => Number(new URL(url).port))
    .find((port) => port !== from)!;
  const [{ n: groupSize }] = (await query<{ n: number }>(
    coordinator,
    `select count(*)::int as n from pg_dist_shard s join pg_dist_partition p using (logicalrelid)
      where p.colocationid = (select colocationid from pg_dist_partition where logicalrelid = 'users'::regclass)
        and s.shardminvalue::int <= hashint8($1::bigint) and s.shardmaxvalue::int >= hashint8($1::bigint)`,
    [citus.userId],
  )) as [{ n: number }];
  const load = startLoad({ baseUrl: citus.service.url, token: citus.token, clients: connections, tag: 'move' });
  await new Promise((resolve) => setTimeout(resolve, 2000));
  log(`moving shard ${shard} (a group of ${groupSize} shards) from ${from} to ${to} under ${connections} clients`);
  const started = process.hrtime.bigint();
  await query(coordinator, "select citus_move_shard_placement($1, '127.0.0.1', $2, '127.0.0.1', $3, 'force_logical')", [shard, from, to]);
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  await new Promise((resolve) => setTimeout(resolve, 2000));
  await load.stop();
  const statuses = new Map<string, number>();
  let slowest = 0;
  for (const o of load.outcomes) {
    const key = `${o.op} ${o.status ?? o.error}`;
    statuses.set(key, (statuses.get(key) ?? 0) + 1);
    slowest = Math.max(slowest, o.end - o.start);
  }
  console.log(
    `\n## Moving one owner's shard group (${groupSize} shards, ${seedCount}+ contacts) under ${connections} clients' creates and reads\n`,
  );
  console.log(`citus_move_shard_placement(…, 'force_logical'): ${seconds.toFixed(2)} s; the slowest request meanwhile: ${slowest} ms`);
  console.log(
    `answers: ${[...statuses]
      .sort()
      .map(([k, v]) => `${k}: ${v}`)
      .join(', ')}`,
  );
}

try {
  log(`load average ${loadAverage()}`);
  const clusterRoot = await mkdtemp(path.join(os.tmpdir(), 'contacts-bench-citus-'));
  undo.push({ what: 'destroy the Citus cluster', run: async () => void cluster(clusterRoot, 'destroy') });
  cluster(clusterRoot, 'start');
  cluster(clusterRoot, 'setup', 'contacts');
  const nodes = cluster(clusterRoot, 'ports')
    .trim()
    .split(/\s+/)
    .map((port) => `postgres://postgres@127.0.0.1:${port}/contacts`);
  const citus = await side('citus', nodes[0]!);
  const plain = await side('postgres', await createDatabase(`contacts_bench_citus_${Date.now()}`, false));

  const results: { round: number; op: Operation; side: Side['name']; reqPerSec: number; p50: number; p99: number; load: string }[] = [];
  for (let i = 0; i < rounds; i++) {
    for (const op of ['create', 'list', 'sync'] as const) {
      for (const s of i % 2 === 0 ? [citus, plain] : [plain, citus]) {
        log(`round ${i + 1} of ${rounds}: ${op} on ${s.name}`);
        results.push({ round: i + 1, op, side: s.name, ...(await measure(s, op)), load: loadAverage() });
      }
    }
  }
  console.log(
    `## Citus (coordinator + 2 workers) against plain PostgreSQL (${connections} connections, ${duration} s rounds, one user with ${seedCount}+ contacts, no Redis)\n`,
  );
  console.log('| round | request | side | req/s | p50 | p99 | load average (1/5/15 min) |');
  console.log('|---|---|---|---|---|---|---|');
  for (const r of results)
    console.log(`| ${r.round} | ${r.op} | ${r.side} | ${r.reqPerSec.toFixed(0)} | ${r.p50} ms | ${r.p99} ms | ${r.load} |`);
  console.log('\n| request | Citus/PostgreSQL req/s per round | median |');
  console.log('|---|---|---|');
  for (const op of ['create', 'list', 'sync'] as const) {
    const ratios = Array.from({ length: rounds }, (_, i) => {
      const of = (name: Side['name']) => results.find((r) => r.round === i + 1 && r.op === op && r.side === name)!.reqPerSec;
      return of('citus') / of('postgres');
    });
    console.log(`| ${op} | ${ratios.map((r) => r.toFixed(2)).join(', ')} | ${median(ratios).toFixed(2)} |`);
  }
  await moveUnderLoad(citus, nodes);
} finally {
  await cleanUp();
}
