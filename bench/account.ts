/**
 * `npx tsx bench/account.ts [--counts 10000,100000] [--node-options=--max-old-space-size=96]`
 *
 * The account archive and the account deletion at size. For each count, starts the compiled
 * service as production runs it (its own PostgreSQL database, the in-process cache), gives one user
 * that many contacts (written with SQL), downloads `GET /api/users/me/export` while sampling the
 * service's resident memory (every 10 ms from /proc), then times `DELETE /api/users/me` (one
 * transaction: the contacts, their tombstones, every other row of the user). Prints a Markdown
 * table to stdout; progress goes to stderr.
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
  LIMITS_LIFTED,
  log,
  SERVER_ENTRY,
  startNode,
  undo,
  verifiedUser,
} from './support.js';

const { values } = parseArgs({
  options: { counts: { type: 'string', default: '10000,100000' }, 'node-options': { type: 'string', default: '' } },
});
const COUNTS = values.counts.split(',').map(Number);
const MIB = 1024 * 1024;
const PASSWORD = randomBytes(18).toString('base64url');

const rssOf = (pid: number) => Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;

async function main(): Promise<void> {
  ensureBuilt([SERVER_ENTRY]);
  const stamp = `${new Date().toISOString().replace(/\D/g, '').slice(0, 14)}_${randomBytes(3).toString('hex')}`;
  const rows: string[] = [];
  for (const count of COUNTS) {
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'contacts-bench-account-'));
    undo.push({ what: `remove ${dataDir}`, run: () => rm(dataDir, { recursive: true, force: true }) });
    const databaseUrl = await createDatabase(`contacts_bench_account_${stamp}_${count}`, false);
    const service = await startNode(
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
        // e.g. --max-old-space-size=96: an archive that held its contacts would run out of heap.
        NODE_OPTIONS: values['node-options'],
      },
      { path: '/readyz', status: 200 },
    );
    const token = await verifiedUser(service.base, path.join(dataDir, 'outbox'), 'bench_user', PASSWORD);
    const auth = { authorization: `Bearer ${token}` };
    const me = (await (await fetch(`${service.base}/api/users/me`, { headers: auth })).json()) as { id: number };
    const client = new pg.Client({ connectionString: databaseUrl });
    await client.connect();
    await client.query(
      `insert into contacts (owner_id, first_name, last_name, email, phone, birthday, additional_data)
       select $1, 'First' || n, 'Last, ' || n, 'contact' || n || '@bench.example', '+1555' || lpad(n::text, 7, '0'),
              date '1950-01-01' + (n % 18000), case when n % 3 = 0 then jsonb_build_object('company', 'Acme; Inc.', 'n', n) end
       from generate_series(1, $2::int) n`,
      [me.id, count],
    );
    await client.query('analyze contacts');
    log(`${count} contacts seeded; exporting the account`);

    const before = rssOf(service.pid);
    let highest = before;
    const sampler = setInterval(() => (highest = Math.max(highest, rssOf(service.pid))), 10);
    let started = performance.now();
    const archive = await expectStatus(await fetch(`${service.base}/api/users/me/export`, { headers: auth }), 200, 'export');
    let bytes = 0;
    for await (const chunk of archive.body!) bytes += (chunk as Uint8Array).byteLength;
    const exportSeconds = (performance.now() - started) / 1000;
    clearInterval(sampler);

    log('deleting the account');
    started = performance.now();
    await expectStatus(
      await fetch(`${service.base}/api/users/me`, {
        method: 'DELETE',
        headers: { ...auth, 'content-type': 'application/json' },
        body: JSON.stringify({ password: PASSWORD }),
      }),
      204,
      'delete',
    );
    const deleteSeconds = (performance.now() - started) / 1000;
    const left = await client.query<{ n: string }>(
      'select (select count(*) from contacts where owner_id = $1) + (select count(*) from contact_tombstones where owner_id = $1) as n',
      [me.id],
    );
    await client.end();
    rows.push(
      `| ${count.toLocaleString('en-US')} | ${exportSeconds.toFixed(2)} s | ${(bytes / MIB).toFixed(1)} MiB | ${before.toFixed(0)} | ` +
        `${highest.toFixed(0)} | ${deleteSeconds.toFixed(2)} s | ${left.rows[0]!.n} |`,
    );
    await service.stop();
  }
  console.log('| contacts | export time | archive | RSS before (MiB) | RSS highest during (MiB) | delete time | rows left |');
  console.log('|---:|---:|---:|---:|---:|---:|---:|');
  for (const row of rows) console.log(row);
  console.log(
    `\nnode ${process.version}, ${os.cpus().length} CPUs, service NODE_OPTIONS='${values['node-options']}'; the delete includes its password check (bcrypt at cost 12).`,
  );
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
