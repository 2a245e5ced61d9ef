/**
 * `npm run bench:sync-commit -- [--duration S] [--rounds N] [--connections C]`: what the synchronous
 * standby costs a create (docs/operations.md). A private primary and a streaming standby
 * (pg_basebackup -R), fsync on as in production, the service (src/server.ts) on the primary, and
 * autocannon creating contacts; rounds alternate between `synchronous_standby_names` naming the
 * standby (sync) and empty (async), switched with ALTER SYSTEM and checked in pg_stat_replication
 * before each round. Prints each round and the median of the per-round sync/async ratios of creates/s.
 *
 * `npm run bench:sync-commit -- --backup`: backup and restore of 1,000,000 contacts instead. A
 * private PostgreSQL archiving its WAL to a pgBackRest repository of its own (the settings of
 * deploy/ha/pgbackrest.conf), `npm run seed -- --users 500 --contacts-per-user 2000`, a full backup,
 * then scripts/restore-to-time.sh to the moment after it and PostgreSQL started until it has
 * replayed and promoted. Prints sizes and times. Progress goes to stderr.
 */
import { execFile, execFileSync } from 'node:child_process';
import { chown, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs, promisify } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import autocannon from 'autocannon';
import pg from 'pg';
import { smtpCapture, type Teardown } from '../test/helper.js';
import { type Cleanup, postgresBinDir, scratchDir, serviceEnv, signUp, startService } from '../test/faults/processes.js';
import { freePort, log } from './support.js';

const { values } = parseArgs({
  options: {
    duration: { type: 'string', default: '10' },
    rounds: { type: 'string', default: '3' },
    connections: { type: 'string', default: '10' },
    backup: { type: 'boolean', default: false },
  },
});
const run = promisify(execFile);
const BIN = postgresBinDir();
if (!BIN) throw new Error('no PostgreSQL server binaries');
const postgresUser = { uid: Number(execFileSync('id', ['-u', 'postgres'])), gid: Number(execFileSync('id', ['-g', 'postgres'])) };
const asRoot = process.getuid?.() === 0;
const cleanups: (() => unknown)[] = [];
const loadAverage = () =>
  os
    .loadavg()
    .map((n) => n.toFixed(1))
    .join(' / ');
const median = (list: number[]) => [...list].sort((a, b) => a - b)[Math.floor(list.length / 2)]!;

/** A tool run as the postgres OS user (initdb refuses root), with its temporary files in `dir`. */
function asPostgres(dir: string, command: string, args: string[], env: Record<string, string> = {}) {
  return run(asRoot ? 'runuser' : command, asRoot ? ['-u', 'postgres', '--', command, ...args] : args, {
    timeout: 3_600_000,
    maxBuffer: 64 << 20,
    env: { ...process.env, TMPDIR: dir, ...env },
  });
}

/** A folder owned by the postgres user, removed at the end. */
async function folder(prefix: string): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix));
  if (asRoot) await chown(dir, postgresUser.uid, postgresUser.gid);
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

interface Server {
  dir: string;
  data: string;
  port: number;
  url: (database: string) => string;
  start(): Promise<void>;
}

/** A PostgreSQL server in `dir`/data on a free port, socket in `dir`; stopped (immediate) at the end. */
async function server(dir: string, settings: Record<string, string>): Promise<Server> {
  const data = path.join(dir, 'data');
  const port = await freePort();
  const options = [
    `-p ${port}`,
    `-k ${dir}`,
    '-c listen_addresses=127.0.0.1',
    ...Object.entries(settings).map(([k, v]) => `-c ${k}='${v}'`),
  ];
  const start = async () => {
    await asPostgres(dir, path.join(BIN!, 'pg_ctl'), [
      '-D',
      data,
      '-l',
      path.join(dir, 'server.log'),
      '-o',
      options.join(' '),
      '-w',
      '-t',
      '600',
      'start',
    ]);
  };
  cleanups.push(() => asPostgres(dir, path.join(BIN!, 'pg_ctl'), ['-D', data, '-m', 'immediate', 'stop']).catch(() => undefined));
  return { dir, data, port, url: (database) => `postgres://postgres@127.0.0.1:${port}/${database}`, start };
}

async function initdb(dir: string): Promise<void> {
  await asPostgres(dir, path.join(BIN!, 'initdb'), ['-D', path.join(dir, 'data'), '-A', 'trust', '-U', 'postgres', '-E', 'UTF8']);
}

async function query<R extends pg.QueryResultRow>(url: string, text: string): Promise<R[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<R>(text)).rows;
  } finally {
    await client.end();
  }
}

const teardown: Cleanup & Teardown = {
  teardown: (fn) => void cleanups.push(fn),
  fail: (message) => {
    throw new Error(message);
  },
};

async function syncCommit(): Promise<void> {
  const duration = Number(values.duration);
  const rounds = Number(values.rounds);
  const connections = Number(values.connections);
  const primary = await server(await folder('contacts-sync-primary-'), {});
  await initdb(primary.dir);
  await primary.start();
  await query(primary.url('postgres'), 'create database contacts');
  const standby = await server(await folder('contacts-sync-standby-'), { cluster_name: 'standby' });
  // -R writes primary_conninfo and standby.signal; cluster_name is its application_name on the primary.
  await asPostgres(standby.dir, path.join(BIN!, 'pg_basebackup'), [
    '-h',
    '127.0.0.1',
    '-p',
    String(primary.port),
    '-U',
    'postgres',
    '-D',
    standby.data,
    '-R',
    '-X',
    'stream',
  ]);
  await standby.start();

  const mailbox = await smtpCapture(teardown);
  const service = await startService(teardown, serviceEnv(primary.url('contacts'), mailbox.url, await scratchDir(teardown)));
  const token = await signUp(service.url, mailbox, 'bench');

  const setMode = async (mode: 'sync' | 'async') => {
    await query(primary.url('postgres'), `alter system set synchronous_standby_names = '${mode === 'sync' ? 'standby' : ''}'`);
    await query(primary.url('postgres'), 'select pg_reload_conf()');
    for (let i = 0; ; i++) {
      const rows = await query<{ sync_state: string }>(
        primary.url('postgres'),
        `select sync_state from pg_stat_replication where application_name = 'standby'`,
      );
      if (rows[0]?.sync_state === mode) return;
      if (i > 200) throw new Error(`standby is ${rows[0]?.sync_state ?? 'not streaming'}, not ${mode}`);
      await sleep(50);
    }
  };
  let created = 0;
  const round = async (mode: 'sync' | 'async') => {
    await setMode(mode);
    const result = await autocannon({
      url: service.url,
      connections,
      duration,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      requests: [
        {
          method: 'POST',
          path: '/api/contacts/',
          setupRequest: (request: autocannon.Request) => {
            const n = created++;
            return {
              ...request,
              body: JSON.stringify({
                first_name: 'Bench',
                last_name: `Sync${n}`,
                email: `sync-${n}@example.com`,
                phone: '+14155550123',
                birthday: '1990-05-17',
              }),
            };
          },
        },
      ],
    });
    if (result.non2xx > 0 || result.errors > 0)
      throw new Error(
        `${mode}: ${result.non2xx} non-2xx (${Object.keys(result.statusCodeStats ?? {}).join(', ')}), ${result.errors} errors`,
      );
    return { mode, reqPerSec: result.requests.average, p50: result.latency.p50, p99: result.latency.p99, load: loadAverage() };
  };

  const results: Awaited<ReturnType<typeof round>>[] = [];
  for (let i = 0; i < rounds; i++) {
    // async, sync, then sync, async: each side goes first equally often.
    for (const mode of i % 2 === 0 ? (['async', 'sync'] as const) : (['sync', 'async'] as const)) {
      log(`round ${i + 1} of ${rounds}: ${mode}`);
      results.push(await round(mode));
    }
  }
  console.log(`## Create with and without the synchronous standby (${connections} connections, ${duration} s rounds, fsync on)\n`);
  console.log('| round | standby | creates/s | p50 | p99 | load average (1/5/15 min) |');
  console.log('|---|---|---|---|---|---|');
  results.forEach((r, i) =>
    console.log(`| ${Math.floor(i / 2) + 1} | ${r.mode} | ${r.reqPerSec.toFixed(0)} | ${r.p50} ms | ${r.p99} ms | ${r.load} |`),
  );
  const ratios = Array.from({ length: rounds }, (_, i) => {
    const pair = results.slice(2 * i, 2 * i + 2);
    return pair.find((r) => r.mode === 'sync')!.reqPerSec / pair.find((r) => r.mode === 'async')!.reqPerSec;
  });
  console.log(`\nsync/async creates/s per round: ${ratios.map((r) => r.toFixed(2)).join(', ')}; median ${median(ratios).toFixed(2)}`);
}

async function backupAndRestore(): Promise<void> {
  const root = await folder('contacts-backup-');
  const config = path.join(root, 'pgbackrest.conf');
  const db = await server(await folder('contacts-backup-pg-'), {
    wal_level: 'replica',
    archive_mode: 'on',
    archive_command: `pgbackrest --config=${config} --stanza=bench archive-push %p`,
    max_wal_size: '4GB',
  });
  for (const dir of ['repo', 'log', 'lock', 'spool']) {
    await mkdir(path.join(root, dir));
    if (asRoot) await chown(path.join(root, dir), postgresUser.uid, postgresUser.gid);
  }
  // deploy/ha/pgbackrest.conf, with the paths in the temporary folder.
  await writeFile(
    config,
    [
      '[global]',
      `repo1-path=${root}/repo`,
      'repo1-retention-full=2',
      'repo1-cipher-type=aes-256-cbc',
      'repo1-cipher-pass=bench-only-passphrase',
      'compress-type=zst',
      'process-max=2',
      'start-fast=y',
      'archive-async=y',
      `spool-path=${root}/spool`,
      `log-path=${root}/log`,
      `lock-path=${root}/lock`,
      'log-level-console=warn',
      'log-level-file=off',
      '[bench]',
      `pg1-path=${db.data}`,
      `pg1-port=${db.port}`,
      `pg1-socket-path=${db.dir}`,
      'pg1-user=postgres',
      '',
    ].join('\n'),
  );
  if (asRoot) await chown(config, postgresUser.uid, postgresUser.gid);
  const pgbackrest = (...args: string[]) => asPostgres(root, 'pgbackrest', [`--config=${config}`, '--stanza=bench', ...args]);
  const timed = async (what: string, work: () => Promise<unknown>) => {
    log(what);
    const started = Date.now();
    await work();
    return { seconds: (Date.now() - started) / 1000, load: loadAverage() };
  };

  await initdb(db.dir);
  await db.start();
  await query(db.url('postgres'), 'create database contacts');
  await pgbackrest('stanza-create');
  const seed = await timed('seeding 1,000,000 contacts', () =>
    run('npm', ['run', 'seed', '--', '--users', '500', '--contacts-per-user', '2000'], {
      env: { ...process.env, DATABASE_URL: db.url('contacts') },
      timeout: 3_600_000,
      maxBuffer: 64 << 20,
    }),
  );
  const [sizes] = await query<{ database: string; contacts: string; count: string }>(
    db.url('contacts'),
    `select pg_size_pretty(pg_database_size('contacts')) as database, pg_size_pretty(pg_total_relation_size('contacts')) as contacts, (select count(*) from contacts) as count`,
  );
  const full = await timed('full backup', () => pgbackrest('--type=full', 'backup'));
  const info = JSON.parse((await pgbackrest('--output=json', 'info')).stdout) as {
    backup: { info: { size: number; repository: { size: number } } }[];
  }[];
  const backupInfo = info[0]!.backup.at(-1)!.info;
  // pgBackRest picks a backup that stopped before the target, comparing whole seconds.
  await sleep(2_000);
  const [targetRow] = await query<{ at: string }>(
    db.url('postgres'),
    `select to_char(clock_timestamp() at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') || '+00' as at`,
  );
  // Recovery stops at the first commit after the target: without one it would end short of it, and PostgreSQL refuses that.
  await query(db.url('postgres'), 'create table after_target ()');
  // The target's WAL segment archived, as the runbook's restore needs.
  await pgbackrest('check');
  await asPostgres(db.dir, path.join(BIN!, 'pg_ctl'), ['-D', db.data, '-m', 'fast', '-w', 'stop']);
  await rm(db.data, { recursive: true, force: true });
  const restore = await timed('restore into an empty data directory', () =>
    asPostgres(root, path.resolve('scripts/restore-to-time.sh'), ['--stanza', 'bench', '--config', config, '--target', targetRow!.at]),
  );
  const replay = await timed('start, replay to the target and promote', async () => {
    await db.start();
    while ((await query<{ r: boolean }>(db.url('postgres'), 'select pg_is_in_recovery() as r'))[0]!.r) await sleep(100);
  });
  const [restored] = await query<{ count: string }>(db.url('contacts'), 'select count(*) from contacts');
  const mb = (bytes: number) => `${(bytes / 1048576).toFixed(0)} MB`;
  console.log('## Backup and restore of 1,000,000 contacts (pgBackRest, deploy/ha settings: zst, aes-256-cbc, process-max=2)\n');
  console.log(`contacts ${sizes!.count}, database ${sizes!.database} (contacts table with indexes ${sizes!.contacts})`);
  console.log(
    `backup: ${mb(backupInfo.size)} of files, ${mb(backupInfo.repository.size)} in the repository; restored contacts ${restored!.count}\n`,
  );
  console.log('| step | time | load average (1/5/15 min) after it |');
  console.log('|---|---|---|');
  for (const [step, r] of [
    ['`npm run seed -- --users 500 --contacts-per-user 2000` (WAL archived meanwhile)', seed],
    ['full backup (`pgbackrest --type=full backup`)', full],
    ['restore (`scripts/restore-to-time.sh`) into an empty data directory', restore],
    ['start until replayed to the target and promoted', replay],
  ] as const)
    console.log(`| ${step} | ${r.seconds.toFixed(1)} s | ${r.load} |`);
}

try {
  log(`load average ${loadAverage()}`);
  await (values.backup ? backupAndRestore() : syncCommit());
} finally {
  for (const cleanup of cleanups.reverse()) await cleanup();
}
