/**
 * A streaming-replication standby of a private PostgreSQL (test/faults/processes.ts privatePostgres):
 * `pg_basebackup -R` into a folder of its own, started on a free port, removed at teardown. As root,
 * it belongs to the `postgres` user, as its primary does.
 */
import { execFile, execFileSync } from 'node:child_process';
import { chown, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Test } from 'tap';
import { postgresBinDir } from './faults/processes.js';
import { freePort } from './helper.js';

const run = promisify(execFile);

export interface PrivateStandby {
  /** `postgres://…/contacts` on the standby. */
  url: string;
  /** `pg_ctl stop -m immediate`: the server is gone at once, its connections cut. */
  kill(): Promise<void>;
}

/** A standby of the primary at `primaryUrl` that applies each commit `applyDelayMs` after the primary made it (recovery_min_apply_delay). */
export async function privateStandby(t: Test, primaryUrl: string, applyDelayMs: number): Promise<PrivateStandby> {
  const bin = postgresBinDir();
  if (!bin) throw new Error('no PostgreSQL server binaries');
  const dir = await mkdtemp(path.join(tmpdir(), 'contacts-standby-'));
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString());
    await chown(dir, uid, gid);
  }
  // initdb and pg_basebackup may write temporary files under TMPDIR: keep them in the folder.
  const pgCommand = (tool: string, args: string[]) =>
    run(asRoot ? 'runuser' : path.join(bin, tool), asRoot ? ['-u', 'postgres', '--', path.join(bin, tool), ...args] : args, {
      timeout: 60_000,
      env: { ...process.env, TMPDIR: dir },
    });
  const data = path.join(dir, 'data');
  const primary = new URL(primaryUrl);
  const port = await freePort();
  t.teardown(async () => {
    await pgCommand('pg_ctl', ['-D', data, '-m', 'immediate', 'stop']).catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
  });
  await pgCommand('pg_basebackup', [
    '-h',
    primary.hostname,
    '-p',
    primary.port,
    '-U',
    'postgres',
    '-D',
    data,
    '-R',
    '-X',
    'stream',
    '--checkpoint=fast',
    '--no-sync',
  ]);
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c hot_standby=on -c recovery_min_apply_delay=${applyDelayMs}ms`;
  await pgCommand('pg_ctl', ['-D', data, '-l', path.join(dir, 'server.log'), '-o', options, '-w', 'start']);
  return {
    url: `postgres://postgres@127.0.0.1:${port}/contacts`,
    kill: async () => {
      await pgCommand('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']);
    },
  };
}
