/**
 * The restore drill of docs/operations.md, against real processes: the service on a private
 * PostgreSQL whose WAL pgBackRest archives into a repository of its own. Contacts are written, a
 * full backup taken, more written, an incremental backup taken, more written, a point in time
 * noted, then every contact deleted. scripts/restore-to-time.sh restores to that point; once
 * PostgreSQL has replayed up to it, the database holds exactly the contacts of that moment, and the
 * service, started again as the runbook says, lists exactly those. Prints how long the backups and
 * the restore took.
 */
import { execFile, execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chown, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import pg from 'pg';
import t from 'tap';
import { backend, smtpCapture } from '../helper.js';
import { privatePostgres, processTestsUnavailable, scratchDir, serviceEnv, signUp, startService } from './processes.js';

const run = promisify(execFile);
const STANZA = 'drill';

function pgbackrestUnavailable(): string | false {
  const found = (process.env.PATH ?? '').split(':').some((dir) => dir && existsSync(path.join(dir, 'pgbackrest')));
  return found ? false : 'pgbackrest not installed (Debian: apt-get install pgbackrest)';
}

t.test(
  'a restore to a point in time brings back exactly the contacts of that moment',
  { skip: processTestsUnavailable(backend) || pgbackrestUnavailable() },
  async (t) => {
    const asRoot = process.getuid?.() === 0;
    // The repository and pgBackRest's configuration, readable by the postgres user that archives.
    const root = await mkdtemp(path.join(tmpdir(), 'contacts-restore-'));
    t.teardown(() => rm(root, { recursive: true, force: true }));
    const config = path.join(root, 'pgbackrest.conf');
    const db = await privatePostgres(t, {
      wal_level: 'replica',
      archive_mode: 'on',
      archive_command: `pgbackrest --config=${config} --stanza=${STANZA} archive-push %p`,
    });
    for (const dir of ['repo', 'log', 'lock']) await mkdir(path.join(root, dir));
    await writeFile(
      config,
      [
        '[global]',
        `repo1-path=${root}/repo`,
        'repo1-retention-full=2',
        `log-path=${root}/log`,
        `lock-path=${root}/lock`,
        'log-level-console=warn',
        'log-level-file=off',
        'start-fast=y',
        'archive-timeout=30',
        `[${STANZA}]`,
        `pg1-path=${db.data}`,
        `pg1-port=${db.port}`,
        `pg1-socket-path=${db.dir}`,
        'pg1-user=postgres',
        '',
      ].join('\n'),
    );
    if (asRoot) {
      const uid = Number(execFileSync('id', ['-u', 'postgres']).toString());
      const gid = Number(execFileSync('id', ['-g', 'postgres']).toString());
      for (const entry of ['', 'repo', 'log', 'lock', 'pgbackrest.conf']) await chown(path.join(root, entry), uid, gid);
    }
    const asPostgres = (command: string, args: string[]) =>
      run(asRoot ? 'runuser' : command, asRoot ? ['-u', 'postgres', '--', command, ...args] : args, {
        timeout: 120_000,
        env: { ...process.env, TMPDIR: root },
      });
    const pgbackrest = (...args: string[]) => asPostgres('pgbackrest', [`--config=${config}`, `--stanza=${STANZA}`, ...args]);
    const timed = async (work: () => Promise<unknown>) => {
      const started = Date.now();
      await work();
      return Date.now() - started;
    };

    await pgbackrest('stanza-create');
    await pgbackrest('check');

    const mailbox = await smtpCapture(t);
    const service = await startService(t, serviceEnv(db.url, mailbox.url, await scratchDir(t)));
    let serviceUrl = service.url;
    const token = await signUp(service.url, mailbox, 'restore');
    const auth = { authorization: `Bearer ${token}` };
    const written: { id: number; last_name: string }[] = [];
    const write = async (batch: string, n: number) => {
      for (let i = 0; i < n; i++) {
        const response = await fetch(`${service.url}/api/contacts/`, {
          method: 'POST',
          headers: { ...auth, 'content-type': 'application/json' },
          body: JSON.stringify({
            first_name: 'Drill',
            last_name: `${batch}${i}`,
            email: `${batch}-${i}@example.com`,
            phone: '+14155550123',
            birthday: '1990-05-17',
          }),
        });
        if (response.status !== 201) throw new Error(`create: ${response.status} ${await response.text()}`);
        written.push((await response.json()) as { id: number; last_name: string });
      }
    };
    const listed = async () => {
      const response = await fetch(`${serviceUrl}/api/contacts/?limit=1000`, { headers: auth });
      if (response.status !== 200) throw new Error(`list: ${response.status} ${await response.text()}`);
      return ((await response.json()) as { id: number; last_name: string }[]).map((c) => `${c.id} ${c.last_name}`).sort();
    };

    await write('Before', 5);
    const fullMs = await timed(() => pgbackrest('--type=full', 'backup'));
    await write('AfterFull', 5);
    const incrementalMs = await timed(() => pgbackrest('--type=incr', 'backup'));
    await write('AfterIncremental', 5);
    const expected = written.map((c) => `${c.id} ${c.last_name}`).sort();
    t.same(await listed(), expected, 'every contact written is listed before the drill');

    // The point in time, from the database's clock, between the last write and the first deletion.
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    await sleep(100);
    const { rows } = await admin.query<{ at: string }>(
      `select to_char(clock_timestamp() at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') || '+00' as at`,
    );
    await admin.end();
    const target = rows[0]!.at;
    await sleep(100);

    for (const contact of written) {
      const response = await fetch(`${service.url}/api/contacts/${contact.id}`, { method: 'DELETE', headers: auth });
      t.equal(response.status, 200, `contact ${contact.id} deleted`);
    }
    t.same(await listed(), [], 'everything is gone');
    // Switches to a new WAL segment and waits for it to be archived: the deletions are in the repository.
    await pgbackrest('check');

    await db.stop();
    const restoreMs = await timed(() =>
      asPostgres(path.resolve('scripts/restore-to-time.sh'), ['--stanza', STANZA, '--config', config, '--target', target]),
    );
    const replayStarted = Date.now();
    await db.start();
    const probe = new pg.Client({ connectionString: db.url });
    await probe.connect();
    for (let i = 0; (await probe.query<{ r: boolean }>('select pg_is_in_recovery() as r')).rows[0]!.r; i++) {
      if (i > 600) throw new Error('PostgreSQL did not finish its recovery');
      await sleep(50);
    }
    await probe.end();
    const replayMs = Date.now() - replayStarted;

    const check = new pg.Client({ connectionString: db.url });
    await check.connect();
    const restored = await check.query<{ id: number; last_name: string }>('select id, last_name from contacts');
    await check.end();
    t.same(
      restored.rows.map((c) => `${c.id} ${c.last_name}`).sort(),
      expected,
      `the database holds exactly the ${expected.length} contacts of ${target}: none of the deletions after it`,
    );
    // The runbook restarts every instance after a restore: their caches hold answers from after the target.
    service.child.kill('SIGTERM');
    await service.exit;
    const restarted = await startService(t, serviceEnv(db.url, mailbox.url, await scratchDir(t)));
    serviceUrl = restarted.url;
    t.same(await listed(), expected, 'and the service, started again, lists exactly those');
    const create = await fetch(`${serviceUrl}/api/contacts/`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({
        first_name: 'Drill',
        last_name: 'Restored',
        email: 'restored@example.com',
        phone: '+14155550123',
        birthday: '1990-05-17',
      }),
    });
    t.equal(create.status, 201, 'the restored database takes writes (promoted, on a new timeline)');
    t.comment(
      `full backup ${fullMs} ms, incremental ${incrementalMs} ms, restore (scripts/restore-to-time.sh) ${restoreMs} ms, replay to the target and promotion ${replayMs} ms`,
    );
  },
);
