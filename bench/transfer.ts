/**
 * `npm run bench:transfer -- [--counts 10000,100000] [--import 10000] [--node-options '--max-old-space-size=96']`
 *
 * Export and import at size. For each count, starts the compiled service as production runs it
 * (its own PostgreSQL database, the in-process cache), gives one user that many contacts (written
 * with SQL, so seeding costs no service memory), then downloads the vCard and the CSV export and
 * reports the time, the bytes and the service's resident memory: before the export, the highest
 * sample during it (every 10 ms from /proc), and the process's peak so far (VmHWM). The export is
 * spooled to a temporary file first, so the time includes writing it and sending it. Then one import of `--import` CSV rows into another user,
 * in one request, timed. Prints a Markdown table to stdout; progress goes to stderr.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import pg from 'pg';
import {
  cleanUp,
  createDatabase,
  ensureBuilt,
  expectStatus,
  log,
  SERVER_ENTRY,
  type Started,
  startNode,
  undo,
  verifiedUser,
  LIMITS_LIFTED,
} from './support.js';

const { values } = parseArgs({
  options: {
    counts: { type: 'string', default: '10000,100000' },
    import: { type: 'string', default: '10000' },
    'node-options': { type: 'string', default: '' },
  },
});
const COUNTS = values.counts.split(',').map(Number);
const IMPORT_ROWS = Number(values.import);
const MIB = 1024 * 1024;

/** VmRSS and VmHWM of process `pid`, in MiB. */
function memoryOf(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)![1]) / 1024;
  return { rss: kib('VmRSS'), peak: kib('VmHWM') };
}

async function startService(databaseUrl: string, dataDir: string): Promise<Started> {
  return startNode(
    'service',
    SERVER_ENTRY,
    [],
    {
      NODE_ENV: 'production',
      JWT_SECRET: randomBytes(48).toString('base64url'),
      DATABASE_URL: databaseUrl,
      LOG_LEVEL: 'warn',
      DATA_DIR: dataDir,
      ...LIMITS_LIFTED,
      // e.g. --max-old-space-size=96: an export that held its rows would run out of heap.
      NODE_OPTIONS: values['node-options'],
    },
    { path: '/readyz', status: 200 },
  );
}

/** `count` contacts for the user of `token`, written straight to the database. */
async function seedContacts(databaseUrl: string, service: string, token: string, count: number): Promise<void> {
  const me = await expectStatus(await fetch(`${service}/api/users/me`, { headers: { authorization: `Bearer ${token}` } }), 200, 'me');
  const { id } = (await me.json()) as { id: number };
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    await client.query(
      `insert into contacts (owner_id, first_name, last_name, email, phone, birthday, additional_data)
       select $1, 'First' || n, 'Last, ' || n, 'contact' || n || '@bench.example', '+1555' || lpad(n::text, 7, '0'),
              date '1950-01-01' + (n % 18000), case when n % 3 = 0 then jsonb_build_object('company', 'Acme; Inc.', 'n', n) end
       from generate_series(1, $2::int) n`,
      [id, count],
    );
    await client.query('analyze contacts');
  } finally {
    await client.end();
  }
}

/** Downloads an export, sampling the service's RSS meanwhile. */
async function timedExport(service: Started, token: string, format: string) {
  const before = memoryOf(service.pid).rss;
  let highest = before;
  const sampler = setInterval(() => {
    try {
      highest = Math.max(highest, memoryOf(service.pid).rss);
    } catch {
      // The service is gone (out of memory?): the download fails and says so.
    }
  }, 10);
  try {
    const started = performance.now();
    const res = await expectStatus(
      await fetch(`${service.base}/api/contacts/export?format=${format}`, { headers: { authorization: `Bearer ${token}` } }),
      200,
      'export',
    );
    let bytes = 0;
    for await (const chunk of res.body!) bytes += (chunk as Uint8Array).byteLength;
    const seconds = (performance.now() - started) / 1000;
    return { seconds, bytes, before, highest: Math.max(highest, memoryOf(service.pid).rss), peak: memoryOf(service.pid).peak };
  } finally {
    clearInterval(sampler);
  }
}

async function main(): Promise<void> {
  ensureBuilt([SERVER_ENTRY]);
  const stamp = `${new Date().toISOString().replace(/\D/g, '').slice(0, 14)}_${randomBytes(3).toString('hex')}`;
  const rows: string[] = [];
  for (const count of COUNTS) {
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'contacts-bench-transfer-'));
    undo.push({ what: `remove ${dataDir}`, run: () => rm(dataDir, { recursive: true, force: true }) });
    const databaseUrl = await createDatabase(`contacts_bench_transfer_${stamp}_${count}`, false);
    const service = await startService(databaseUrl, dataDir);
    const token = await verifiedUser(service.base, path.join(dataDir, 'outbox'));
    await seedContacts(databaseUrl, service.base, token, count);
    log(`${count} contacts seeded; exporting`);
    for (const format of ['vcard', 'csv']) {
      const run = await timedExport(service, token, format);
      rows.push(
        `| export ${format} | ${count.toLocaleString('en-US')} | ${run.seconds.toFixed(2)} s | ${(run.bytes / MIB).toFixed(1)} MiB | ` +
          `${run.before.toFixed(0)} | ${run.highest.toFixed(0)} | ${run.peak.toFixed(0)} |`,
      );
    }
    if (count === COUNTS.at(-1)) rows.push(await timedImport(service, dataDir));
    await service.stop();
  }
  console.log('| run | contacts | time | body | RSS before (MiB) | RSS highest during (MiB) | VmHWM after (MiB) |');
  console.log('|---|---:|---:|---:|---:|---:|---:|');
  for (const row of rows) console.log(row);
  console.log(
    `\nnode ${process.version}, ${os.cpus().length} CPUs, service NODE_OPTIONS='${values['node-options']}'; export read in batches of 500 rows into a temporary file, then sent; import: one request of ${IMPORT_ROWS} CSV rows.`,
  );
}

/** Imports IMPORT_ROWS CSV rows for a new user in one request. */
async function timedImport(service: Started, dataDir: string): Promise<string> {
  const token = await verifiedUser(service.base, path.join(dataDir, 'outbox'), 'bench_importer');
  const csv =
    'first_name,last_name,email,phone,birthday,additional_data\r\n' +
    Array.from(
      { length: IMPORT_ROWS },
      (_, n) => `First${n},"Last, ${n}",imported${n}@bench.example,+1555${String(n).padStart(7, '0')},1980-01-01,\r\n`,
    ).join('');
  const before = memoryOf(service.pid).rss;
  const started = performance.now();
  const res = await fetch(`${service.base}/api/contacts/import`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'text/csv' },
    body: csv,
  });
  const seconds = (performance.now() - started) / 1000;
  const report = (await res.json()) as { created: number; errors: unknown[] };
  if (res.status !== 200 || report.created !== IMPORT_ROWS)
    throw new Error(`import: ${res.status} ${JSON.stringify(report).slice(0, 300)}`);
  const { rss, peak } = memoryOf(service.pid);
  return `| import csv | ${IMPORT_ROWS.toLocaleString('en-US')} | ${seconds.toFixed(2)} s | ${(Buffer.byteLength(csv) / MIB).toFixed(1)} MiB | ${before.toFixed(0)} | ${rss.toFixed(0)} (after) | ${peak.toFixed(0)} |`;
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
