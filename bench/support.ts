/**
 * What the benchmark scripts share (bench/bench.ts, bench/transfer.ts, bench/carddav.ts): building dist/,
 * throw-away databases and Redis keys, child processes, a verified user, and a clean-up that undoes
 * every step however the run ends.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import net, { type AddressInfo } from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import pg from 'pg';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const SERVER_ENTRY = 'dist/src/server.js';
const BUILD_INPUTS = ['src', 'plugins', 'openapi.yaml', 'tsconfig.json', 'tsconfig.build.json'];
const POSTGRES_URL = 'postgres://postgres@127.0.0.1:5432';
export const REDIS_URL = 'redis://127.0.0.1:6379';
/** The service's per-client limits, lifted: a benchmark seeds, syncs and exports far faster than any client. */
export const LIMITS_LIFTED = {
  RATE_LIMIT_ANON_PER_MIN: '1000000',
  RATE_LIMIT_PASSWORD_PER_MIN: '1000000',
  PASSWORD_QUEUE_PER_CLIENT: '64',
  RATE_LIMIT_IMPORT_PER_MIN: '1000000',
  RATE_LIMIT_EXPORT_PER_MIN: '1000000',
  RATE_LIMIT_SYNC_PER_MIN: '1000000',
  RATE_LIMIT_AVATAR_PER_MIN: '1000000',
  RATE_LIMIT_MULTIGET_PER_MIN: '1000000',
  RATE_LIMIT_CARD_PUT_PER_MIN: '1000000',
  // bench:carddav adds its changes to a book of 100,000 cards, the quota's size.
  CONTACTS_MAX_PER_USER: '10000000',
  // One user's 50 connections measure the service, not the per-user database share
  // (docs/limits.md "Database time"), which would answer most of them 429 at once.
  DB_USER_CONNECTIONS: '10',
  DB_USER_WAITING: '100000',
} as const;

export const log = (message: string) => console.error(`bench: ${message}`);

// Clean-up: every step that starts something registers how to undo it, so a failure or Ctrl-C
// leaves no process, database or Redis key behind.

export const undo: Array<{ what: string; run: () => Promise<void> }> = [];
let cleaning: Promise<void> | undefined;

export function cleanUp(): Promise<void> {
  cleaning ??= (async () => {
    for (const step of undo.reverse()) {
      await step.run().catch((error: unknown) => log(`could not ${step.what}: ${String(error)}`));
    }
  })();
  return cleaning;
}

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    log(`${signal}: cleaning up`);
    void cleanUp().finally(() => process.exit(130));
  });
}

// ---------------------------------------------------------------------------------------------
// Build, database, Redis, processes.

function newestMtime(entry: string): number {
  const full = path.join(ROOT, entry);
  if (!statSync(full).isDirectory()) return statSync(full).mtimeMs;
  const files = readdirSync(full, { recursive: true, encoding: 'utf8' });
  return Math.max(...files.map((file) => statSync(path.join(full, file)).mtimeMs));
}

/** Runs `npm run build` when one of `entries` (in dist/) is missing or older than what it is compiled from. */
export function ensureBuilt(entries: string[]): void {
  const outputs = entries.map((file) => path.join(ROOT, file));
  const oldestOutput = Math.min(...outputs.map((file) => (existsSync(file) ? statSync(file).mtimeMs : -Infinity)));
  if (oldestOutput >= Math.max(...BUILD_INPUTS.map(newestMtime))) return;
  log('dist/ is missing or older than the sources: npm run build');
  const build = spawnSync('npm', ['run', 'build'], { cwd: ROOT, stdio: ['ignore', 2, 2] });
  if (build.status !== 0) throw new Error('npm run build failed');
}

async function adminQuery(sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: `${POSTGRES_URL}/postgres` });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/** A fresh database for this run; dropped at clean-up unless `keep`. */
export async function createDatabase(name: string, keep: boolean): Promise<string> {
  await adminQuery(`CREATE DATABASE "${name}"`);
  const url = `${POSTGRES_URL}/${name}`;
  if (keep) undo.push({ what: 'report the kept database', run: async () => log(`kept database ${url}`) });
  else undo.push({ what: `drop database ${name}`, run: () => adminQuery(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`) });
  return url;
}

export async function deleteRedisKeys(prefix: string): Promise<void> {
  const redis = new Redis(REDIS_URL, { lazyConnect: true });
  await redis.connect();
  try {
    for await (const keys of redis.scanStream({ match: `${prefix}*`, count: 500 }) as AsyncIterable<string[]>) {
      if (keys.length > 0) await redis.unlink(...keys);
    }
  } finally {
    redis.disconnect();
  }
}

/** A TCP port on 127.0.0.1 that nothing listens on right now. */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Stops `child`: SIGTERM, then SIGKILL if it has not exited 10 s later (a server still busy with a request may not). */
export async function stopChild(child: ChildProcess, exited: Promise<unknown>): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  const stopped = await Promise.race([exited.then(() => true), sleep(10_000).then(() => false)]);
  if (!stopped) child.kill('SIGKILL');
}

export interface Started {
  base: string;
  pid: number;
  /** Stops the process now (clean-up would otherwise stop it at the end). */
  stop(): Promise<void>;
  /** Lines the process has written to stdout so far (with LOG_LEVEL=warn, each is a warning or an error). */
  logLines(): number;
}

/**
 * Starts `node <entry>` with only `env` (plus PATH), so nothing from the caller's shell changes the
 * run; its output goes to stderr. Resolves once `ready.path` answers (with `ready.status`, if given).
 */
export async function startNode(
  name: string,
  entry: string,
  args: string[],
  env: Record<string, string>,
  ready: { path: string; status?: number },
): Promise<Started> {
  const port = await freePort();
  const child = spawn(process.execPath, [entry, ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', ...env, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout.pipe(process.stderr);
  let lines = 0;
  child.stdout.on('data', (chunk: Buffer) => {
    for (const byte of chunk) if (byte === 0x0a) lines++;
  });
  child.stderr.pipe(process.stderr);
  const exited = new Promise((resolve) => child.once('exit', resolve));
  undo.push({ what: `stop the ${name}`, run: () => stopChild(child, exited) });
  let stopping = false;
  void exited.then(() => {
    if (!cleaning && !stopping) log(`the ${name} exited (code ${child.exitCode}, signal ${child.signalCode})`);
  });
  const stop = () => {
    stopping = true;
    return stopChild(child, exited);
  };

  const base = `http://127.0.0.1:${port}`;
  for (const deadline = Date.now() + 60_000; Date.now() < deadline; await sleep(200)) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`the ${name} exited during start-up`);
    const response = await fetch(base + ready.path).catch(() => null);
    if (response && (ready.status === undefined || response.status === ready.status))
      return { base, pid: child.pid!, stop, logLines: () => lines };
  }
  throw new Error(`the ${name} did not become ready within 60 s`);
}

export async function expectStatus(response: Response, status: number, what: string): Promise<Response> {
  if (response.status !== status) throw new Error(`${what}: expected ${status}, got ${response.status} ${await response.text()}`);
  return response;
}

function decodeQuotedPrintable(text: string): string {
  return text.replace(/=\r?\n/g, '').replace(/=([0-9A-F]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)));
}

/** The verification link of the mail the service wrote to `address` in the outbox (mail is sent in the background). */
async function verificationLink(outbox: string, address: string): Promise<string> {
  for (const deadline = Date.now() + 15_000; Date.now() < deadline; await sleep(100)) {
    const files = (await readdir(outbox).catch(() => [])).filter((file) => file.endsWith('.eml'));
    for (const file of files) {
      const mail = decodeQuotedPrintable(await readFile(path.join(outbox, file), 'utf8'));
      const link = /https?:\/\/[^\s"<>]+\/verify-email\?token=[\w.-]+/.exec(mail)?.[0];
      if (link && /^To: .*$/m.exec(mail)?.[0].includes(address)) return link;
    }
  }
  throw new Error(`no verification mail to ${address} in ${outbox}`);
}

/** Registers, verifies (through the outbox) and logs in a user; returns its access token. */
export async function verifiedUser(
  service: string,
  outbox: string,
  username = 'bench_user',
  password = randomBytes(18).toString('base64url'),
): Promise<string> {
  const user = { username, email: `${username.replaceAll('_', '-')}@bench.example`, password };
  const json = { 'content-type': 'application/json' };
  await expectStatus(
    await fetch(`${service}/api/auth/register`, { method: 'POST', headers: json, body: JSON.stringify(user) }),
    201,
    'register',
  );
  await expectStatus(await fetch(await verificationLink(outbox, user.email)), 200, 'verify e-mail');
  const form = new URLSearchParams({ username: user.username, password: user.password });
  const login = await expectStatus(await fetch(`${service}/api/auth/login`, { method: 'POST', body: form }), 200, 'log in');
  return ((await login.json()) as { access_token: string }).access_token;
}
