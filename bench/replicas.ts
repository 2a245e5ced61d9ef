/**
 * `npm run bench:replicas -- [--contacts N] [--requests N] [--concurrency C] [--rounds R]`
 *
 * Read replicas (DATABASE_READ_URLS) on this machine: a private primary with one streaming standby
 * (test/faults/processes.ts, test/standby.ts), a private Redis, and two compiled services on that
 * primary, one without and one with the standby. Prints, in R alternating rounds:
 *   - uncached reads/s: list pages and filters of one user's N contacts (default 2,000), each request
 *     with a filter value and page of its own so that none is a cache hit, C at a time;
 *   - a create's median latency, one at a time: the cost of storing the WAL position (a
 *     pg_current_wal_lsn() on the primary and a Redis script) after each write.
 * The reader never writes during the reads, so with the standby every read runs there. Both sides
 * share this machine's two cores, so the standby adds no CPU: the numbers show what the routing and
 * the checks cost, not the capacity another machine would add.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import type { Test } from 'tap';
import { privatePostgres, privateRedis } from '../test/faults/processes.js';
import { privateStandby } from '../test/standby.js';
import {
  cleanUp,
  ensureBuilt,
  expectStatus,
  LIMITS_LIFTED,
  log,
  SERVER_ENTRY,
  type Started,
  startNode,
  undo,
  verifiedUser,
} from './support.js';

const { values } = parseArgs({
  options: {
    contacts: { type: 'string', default: '2000' },
    requests: { type: 'string', default: '400' },
    creates: { type: 'string', default: '100' },
    concurrency: { type: 'string', default: '8' },
    rounds: { type: 'string', default: '3' },
  },
});
const [CONTACTS, REQUESTS, CREATES, CONCURRENCY, ROUNDS] = (['contacts', 'requests', 'creates', 'concurrency', 'rounds'] as const).map(
  (name) => {
    const value = Number(values[name]);
    if (Number.isInteger(value) && value >= 1) return value;
    console.error(`--${name} must be a whole number of at least 1, not ${JSON.stringify(values[name])}.`);
    process.exit(2);
  },
) as [number, number, number, number, number];

/** The test helpers' teardown, run by the benchmark's clean-up. */
const teardowns = { teardown: (run: () => unknown) => undo.push({ what: 'stop a private server', run: async () => void (await run()) }) };

/** One secret for both services: a user signed in on one is signed in on the other. */
const JWT_SECRET = randomBytes(48).toString('base64url');
const METRICS_TOKEN = randomBytes(24).toString('hex');

async function startService(name: string, env: Record<string, string>): Promise<Started> {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'contacts-bench-replicas-'));
  undo.push({ what: `remove ${dataDir}`, run: () => rm(dataDir, { recursive: true, force: true }) });
  return startNode(
    name,
    SERVER_ENTRY,
    [],
    {
      NODE_ENV: 'production',
      JWT_SECRET,
      METRICS_TOKEN,
      LOG_LEVEL: 'warn',
      DATA_DIR: dataDir,
      ...LIMITS_LIFTED,
      ...env,
    },
    { path: '/readyz', status: 200 },
  ).then((started) => Object.assign(started, { dataDir }));
}

/** Numbers the reads of the whole run, each of which asks for something no other did. */
let serial = 0;

/** `count` requests by `concurrency` workers; returns requests per second. */
async function readsPerSecond(service: string, token: string): Promise<number> {
  let next = 0;
  const started = performance.now();
  const worker = async () => {
    for (let i = next++; i < REQUESTS; i = next++) {
      // A page, or a filter value and page size, of its own in the whole run: never a cache hit.
      const n = serial++;
      const query =
        n % 2 === 0
          ? `skip=${n % CONTACTS}&limit=${10 + (Math.floor(n / CONTACTS) % 50)}`
          : `query=${encodeURIComponent(`first_name ~ "n${n % 97}x"`)}&limit=${1 + (Math.floor(n / 97) % 100)}`;
      const response = await fetch(`${service}/api/contacts/?${query}`, { headers: { authorization: `Bearer ${token}` } });
      await expectStatus(response, 200, 'list');
      if (response.headers.get('x-cache') !== 'MISS') throw new Error('a read the benchmark meant to miss the cache was a hit');
      await response.arrayBuffer();
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  return REQUESTS / ((performance.now() - started) / 1000);
}

/** Median ms of `CREATES` creates one after another (the median: this shared machine's stalls fall outside it). */
async function createMs(service: string, token: string, tag: string): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < CREATES; i++) {
    const body = JSON.stringify({
      first_name: 'Bench',
      last_name: tag,
      email: `${tag}-${i}@bench.example`,
      phone: '+14155550123',
      birthday: '1990-01-01',
    });
    const started = performance.now();
    const response = await fetch(`${service}/api/contacts/`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body,
    });
    await expectStatus(response, 201, 'create');
    await response.arrayBuffer();
    times.push(performance.now() - started);
  }
  return times.sort((x, y) => x - y)[Math.floor(times.length / 2)]!;
}

async function main(): Promise<void> {
  ensureBuilt([SERVER_ENTRY]);
  const primary = await privatePostgres(teardowns as unknown as Test);
  const standby = await privateStandby(teardowns as unknown as Test, primary.url, 0);
  const redis = await privateRedis(teardowns as unknown as Test);
  const common = { DATABASE_URL: primary.url, REDIS_URL: redis.url };
  const without = await startService('service without standbys', common);
  const withStandby = await startService('service with a standby', { ...common, DATABASE_READ_URLS: standby.url });
  const outbox = (service: Started) => path.join((service as Started & { dataDir: string }).dataDir, 'outbox');
  const reader = await verifiedUser(without.base, outbox(without), 'bench_reader');
  const writerWithout = await verifiedUser(without.base, outbox(without), 'bench_writer_a');
  const writerWith = await verifiedUser(withStandby.base, outbox(withStandby), 'bench_writer_b');

  const csv =
    'first_name,last_name,email,phone,birthday,additional_data\r\n' +
    Array.from({ length: CONTACTS }, (_, i) => `n${i % 97}x${i},Reader,r${i}@bench.example,+14155550123,1990-01-01,\r\n`).join('');
  await expectStatus(
    await fetch(`${without.base}/api/contacts/import`, {
      method: 'POST',
      headers: { authorization: `Bearer ${reader}`, 'content-type': 'text/csv' },
      body: csv,
    }),
    200,
    'import',
  );
  // Imported through the service without standbys, which stores no write position: the reads are
  // those of a user with no recent write, which a standby serves without the replay check.
  log(`${CONTACTS} contacts imported; ${ROUNDS} rounds of ${REQUESTS} reads (${CONCURRENCY} at a time) and ${CREATES} creates`);

  const rows: string[] = [];
  for (let round = 1; round <= ROUNDS; round++) {
    const sides = round % 2 === 1 ? (['without', 'with'] as const) : (['with', 'without'] as const);
    const result: Record<string, { reads: number; create: number }> = {};
    for (const side of sides) {
      const service = side === 'with' ? withStandby.base : without.base;
      const reads = await readsPerSecond(service, reader);
      const create = await createMs(service, side === 'with' ? writerWith : writerWithout, `r${round}${side}`);
      result[side] = { reads, create };
    }
    rows.push(
      `| ${round} | ${result.without!.reads.toFixed(0)} | ${result.with!.reads.toFixed(0)} | ${(result.with!.reads / result.without!.reads).toFixed(2)} | ${result.without!.create.toFixed(2)} | ${result.with!.create.toFixed(2)} | ${(result.with!.create - result.without!.create).toFixed(2)} |`,
    );
  }
  const metrics = await (await fetch(`${withStandby.base}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })).text();
  const standbyReads = /^contacts_db_reads_total\{node="standby"\} (\d+)/m.exec(metrics)?.[1];
  console.log(
    `Uncached list/filter reads of ${CONTACTS} contacts (${CONCURRENCY} concurrent) and creates one at a time, without and with one standby:\n`,
  );
  console.log(
    '| round | reads/s, primary only | reads/s, 1 standby | ratio | create p50 ms, without | create p50 ms, with | difference, ms |',
  );
  console.log('|---|---|---|---|---|---|---|');
  for (const row of rows) console.log(row);
  console.log(`\nReads the service with the standby ran there: ${standbyReads} of ${REQUESTS * ROUNDS}.`);
}

let exitCode = 1;
try {
  await main();
  exitCode = 0;
} catch (error) {
  console.error(error);
} finally {
  await cleanUp();
}
process.exit(exitCode);
