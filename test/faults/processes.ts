/**
 * Real processes for the fault tests: a private PostgreSQL cluster (initdb/pg_ctl), a private
 * redis-server, the service itself (`src/server.ts`), and a load generator that records every
 * answer with its timestamps. Nothing here touches the shared PostgreSQL or Redis.
 */
import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readdirSync } from 'node:fs';
import { chown, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import pg from 'pg';
import type { Test } from 'tap';
import { freePort, smtpCapture, TEST_JWT_SECRET } from '../helper.js';
import { parseExposition } from '../plugins/exposition.js';

const run = promisify(execFile);

/** Where a process or folder registers its clean-up: a tap test, or a benchmark's list. */
export type Cleanup = Pick<Test, 'teardown'>;

/** The newest PostgreSQL server binaries on this machine (PG_BIN overrides); null when there are none. */
export function postgresBinDir(): string | null {
  if (process.env.PG_BIN) return process.env.PG_BIN;
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return null;
  const versions = readdirSync(root)
    .filter((v) => existsSync(path.join(root, v, 'bin', 'initdb')))
    .sort((a, b) => Number(b) - Number(a));
  return versions[0] ? path.join(root, versions[0], 'bin') : null;
}

/** Why the process tests cannot run here, or false when they can (the `skip` option of t.test). */
export function processTestsUnavailable(backend: string): string | false {
  if (backend !== 'postgres') return 'fault tests run the service against real PostgreSQL and Redis processes';
  if (!postgresBinDir()) return 'no PostgreSQL server binaries (initdb, pg_ctl) on this machine';
  return false;
}

export interface PrivatePostgres {
  /** `postgres://…/contacts` on the private cluster. */
  url: string;
  port: number;
  /** The cluster's folder (its socket is there) and its data directory inside it. */
  dir: string;
  data: string;
  /** `pg_ctl restart -m fast`; resolves once the server accepts connections again. */
  restart(): Promise<void>;
  /** `pg_ctl stop -m fast`; resolves once the server is gone. */
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Resolves once a new connection runs `select 1`: the moment the database counts as back. */
  waitUntilAnswering(timeoutMs?: number): Promise<void>;
}

/**
 * A PostgreSQL cluster of its own, on a free port, with its socket in its own folder; removed at
 * teardown. initdb refuses to run as root, so as root the cluster belongs to the `postgres` user.
 * fsync is off: a restart of the server (not of the machine) loses nothing committed without it.
 * `settings` are more server settings (`-c name=value`).
 */
export async function privatePostgres(t: Test, settings: Record<string, string> = {}): Promise<PrivatePostgres> {
  const bin = postgresBinDir();
  if (!bin) throw new Error('no PostgreSQL server binaries');
  const dir = await mkdtemp(path.join(tmpdir(), 'contacts-faults-pg-'));
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString());
    await chown(dir, uid, gid);
  }
  const pgCommand = (tool: string, args: string[]) => {
    const command = asRoot ? 'runuser' : path.join(bin, tool);
    return run(command, asRoot ? ['-u', 'postgres', '--', path.join(bin, tool), ...args] : args, { timeout: 60_000 });
  };
  const data = path.join(dir, 'data');
  const port = await freePort();
  t.teardown(async () => {
    await pgCommand('pg_ctl', ['-D', data, '-m', 'immediate', 'stop']).catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
  });
  await pgCommand('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '-E', 'UTF8', '--no-sync']);
  const more = Object.entries(settings).map(([name, value]) => ` -c ${name}='${value}'`);
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off${more.join('')}`;
  // Always with -l: a server started without it keeps pg_ctl's stdout, and execFile waits for that to close.
  const log = path.join(dir, 'server.log');
  const start = async () => {
    await pgCommand('pg_ctl', ['-D', data, '-l', log, '-o', options, '-w', 'start']);
  };
  await start();

  const adminUrl = `postgres://postgres@127.0.0.1:${port}/postgres`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query('create database contacts');
  await admin.end();

  const waitUntilAnswering = async (timeoutMs = 30_000) => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const client = new pg.Client({ connectionString: adminUrl });
      client.on('error', () => undefined);
      const ok = await client
        .connect()
        .then(() => client.query('select 1'))
        .then(
          () => true,
          () => false,
        );
      await client.end().catch(() => undefined);
      if (ok) return;
      if (Date.now() > deadline) throw new Error('PostgreSQL did not come back');
      await sleep(25);
    }
  };
  return {
    url: `postgres://postgres@127.0.0.1:${port}/contacts`,
    port,
    dir,
    data,
    restart: async () => {
      await pgCommand('pg_ctl', ['-D', data, '-l', log, '-m', 'fast', '-w', 'restart']);
    },
    stop: async () => {
      await pgCommand('pg_ctl', ['-D', data, '-m', 'fast', '-w', 'stop']);
    },
    start,
    waitUntilAnswering,
  };
}

export interface PrivateRedis {
  url: string;
  /** SIGKILL: no goodbye to clients. */
  kill(): Promise<void>;
  /** Sends `signal` to the running server (SIGSTOP hangs it, SIGCONT resumes it); waits for the exit of one that ends it. */
  signal(signal: NodeJS.Signals): Promise<void>;
  /** A new redis-server on the same port; resolves once it answers PING. */
  start(): Promise<void>;
}

/** A redis-server of its own (no persistence) on a free port; killed at teardown. */
export async function privateRedis(t: Test): Promise<PrivateRedis> {
  const port = await freePort();
  const url = `redis://127.0.0.1:${port}`;
  let server: ChildProcess | null = null;
  const alive = (p: ChildProcess | null): p is ChildProcess => p !== null && p.exitCode === null && p.signalCode === null;
  t.teardown(() => {
    if (alive(server)) server.kill('SIGKILL');
  });
  const start = async () => {
    server = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
      stdio: 'ignore',
    });
    for (let attempt = 0; ; attempt++) {
      const probe = new Redis(url, { lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
      probe.on('error', () => undefined);
      const up = await probe
        .connect()
        .then(() => probe.ping())
        .then(
          () => true,
          () => false,
        );
      probe.disconnect();
      if (up) return;
      if (attempt === 100) throw new Error('redis-server did not start');
      await sleep(50);
    }
  };
  const signal = async (name: NodeJS.Signals) => {
    const current = server;
    if (!alive(current)) return;
    current.kill(name);
    if (name !== 'SIGSTOP' && name !== 'SIGCONT') await once(current, 'exit');
  };
  await start();
  return { url, start, signal, kill: () => signal('SIGKILL') };
}

export interface LogLine {
  level: number;
  time: number;
  msg?: string;
  [key: string]: unknown;
}

export interface Service {
  url: string;
  child: ChildProcess;
  /** stdout, one parsed JSON (pino) line each; lines that are not JSON are kept as `{ msg }`. */
  logs: LogLine[];
  stderr(): string;
  /** Resolves when the process exits. */
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>;
}

/** Starts `src/server.ts` as its own process and resolves once /healthz answers; SIGKILLed at teardown. */
export async function startService(t: Cleanup, env: Record<string, string>): Promise<Service> {
  const port = await freePort();
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
    env: { ...process.env, ...env, PORT: String(port), HOST: '127.0.0.1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const logs: LogLine[] = [];
  let partial = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    const lines = (partial + chunk).split('\n');
    partial = lines.pop()!;
    for (const line of lines) {
      if (!line.trim()) continue;
      try {
        logs.push(JSON.parse(line) as LogLine);
      } catch {
        logs.push({ level: 0, time: Date.now(), msg: line });
      }
    }
  });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>((resolve) => {
    child.once('exit', (code, signal) => resolve({ code, signal, at: Date.now() }));
  });
  t.teardown(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  const url = `http://127.0.0.1:${port}`;
  for (let attempt = 0; attempt < 600; attempt++) {
    if (child.exitCode !== null) throw new Error(`service exited early (${child.exitCode}): ${stderr}`);
    if (
      await fetch(`${url}/healthz`).then(
        (r) => r.ok,
        () => false,
      )
    )
      return { url, child, logs, stderr: () => stderr, exit };
    await sleep(100);
  }
  throw new Error(`service did not start: ${stderr}`);
}

/** Environment for a service on a private database (and Redis, when given), mailing to a capture. */
export function serviceEnv(
  databaseUrl: string,
  mailUrl: string,
  dataDir: string,
  extra: Record<string, string> = {},
): Record<string, string> {
  return {
    NODE_ENV: 'test',
    LOG_LEVEL: 'warn',
    JWT_SECRET: TEST_JWT_SECRET,
    BCRYPT_COST: '4',
    DATA_DIR: dataDir,
    PUBLIC_BASE_URL: 'http://contacts.test',
    DATABASE_URL: databaseUrl,
    SMTP_URL: mailUrl,
    REDIS_URL: '',
    // The load is one user at full speed; limits are not what these tests are about.
    RATE_LIMIT_ANON_PER_MIN: '1000000',
    RATE_LIMIT_ME_PER_MIN: '1000000',
    RATE_LIMIT_PASSWORD_PER_MIN: '1000000',
    PASSWORD_QUEUE_PER_CLIENT: '64',
    DB_USER_CONNECTIONS: '10',
    DB_USER_WAITING: '1000',
    ...extra,
  };
}

/** A scratch DATA_DIR, removed at teardown. */
export async function scratchDir(t: Cleanup): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), 'contacts-faults-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** Registers, verifies from the mailed link and logs in; resolves with an access token. */
export async function signUp(baseUrl: string, mailbox: Awaited<ReturnType<typeof smtpCapture>>, name: string): Promise<string> {
  const password = 'correct-horse-battery';
  const registered = await fetch(`${baseUrl}/api/auth/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: name, email: `${name}@example.com`, password }),
  });
  if (registered.status !== 201) throw new Error(`register: ${registered.status} ${await registered.text()}`);
  const link = new URL((await mailbox.next()).link ?? '');
  const verified = await fetch(`${baseUrl}${link.pathname}${link.search}`);
  if (verified.status !== 200) throw new Error(`verify: ${verified.status}`);
  const login = await fetch(`${baseUrl}/api/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ username: name, password }).toString(),
  });
  if (login.status !== 200) throw new Error(`login: ${login.status}`);
  return ((await login.json()) as { access_token: string }).access_token;
}

export type Operation = 'create' | 'list' | 'get' | 'me' | 'ready';

/** One request of the load: when it left, when its answer (or failure) came, and what it was. */
export interface Outcome {
  op: Operation;
  start: number;
  end: number;
  /** HTTP status, or null when there was no answer. */
  status: number | null;
  /** Why there was no answer: ECONNREFUSED, ECONNRESET, UND_ERR_SOCKET, timeout, ... */
  error?: string;
  /** The contact a create answered 201 with. */
  id?: number;
  email?: string;
  detail?: string;
  retryAfter?: string | null;
  /** A /readyz answer's `checks.cache`. */
  cache?: string;
}

export interface Load {
  outcomes: Outcome[];
  /** Stops the clients and resolves once every request has its outcome. */
  stop(): Promise<void>;
}

export interface LoadOptions {
  baseUrl: string;
  token: string;
  /** Concurrent clients, each sending its next request as soon as it has the last answer (after `pauseMs`). */
  clients: number;
  pauseMs?: number;
  /** A request without an answer after this long counts as failed ('timeout'). */
  timeoutMs?: number;
  /** Also poll /readyz every this many ms (0: no polling). */
  readyEveryMs?: number;
  /** Prefix of created e-mail addresses; unique per load. */
  tag: string;
}

function failureCode(error: unknown): string {
  const e = error as { name?: string; cause?: { code?: string; name?: string }; code?: string; message?: string };
  if (e.name === 'TimeoutError' || e.cause?.name === 'TimeoutError') return 'timeout';
  return e.cause?.code ?? e.code ?? e.message ?? String(error);
}

/**
 * Concurrent reads (GET list, GET by id, GET /me) and writes (POST creates with unique e-mails) from
 * `clients` clients; every request is recorded. Creates that answered 201 feed the reads by id.
 */
export function startLoad(options: LoadOptions): Load {
  const { baseUrl, token, clients, pauseMs = 10, timeoutMs = 15_000, readyEveryMs = 0, tag } = options;
  const outcomes: Outcome[] = [];
  const ids: number[] = [];
  let stopped = false;
  let sequence = 0;

  /** Resolves with whether an HTTP answer came. */
  async function request(op: Operation, path: string, init: RequestInit = {}): Promise<boolean> {
    const start = Date.now();
    const outcome: Outcome = { op, start, end: start, status: null };
    try {
      const response = await fetch(`${baseUrl}${path}`, {
        ...init,
        headers: { authorization: `Bearer ${token}`, ...(init.body ? { 'content-type': 'application/json' } : {}) },
        signal: AbortSignal.timeout(timeoutMs),
      });
      const text = await response.text();
      outcome.end = Date.now();
      outcome.status = response.status;
      outcome.retryAfter = response.headers.get('retry-after');
      const body = text ? (JSON.parse(text) as { id?: number; email?: string; detail?: string; checks?: { cache: string } }) : {};
      if (response.status >= 400) outcome.detail = body.detail;
      if (op === 'ready' && body.checks) outcome.cache = body.checks.cache;
      if (op === 'create' && response.status === 201) {
        outcome.id = body.id;
        outcome.email = body.email;
        ids.push(body.id!);
      }
    } catch (error) {
      outcome.end = Date.now();
      outcome.error = failureCode(error);
    }
    outcomes.push(outcome);
    return outcome.status !== null;
  }

  async function client(): Promise<void> {
    while (!stopped) {
      const dice = Math.random();
      let answered: boolean;
      if (dice < 0.35 || ids.length === 0) {
        const n = sequence++;
        answered = await request('create', '/api/contacts/', {
          method: 'POST',
          body: JSON.stringify({
            first_name: 'Load',
            last_name: `Client${n}`,
            email: `${tag}-${n}@example.com`,
            phone: `+1415${String(1_000_000 + n).slice(-7)}`,
            birthday: '1990-05-17',
          }),
        });
      } else if (dice < 0.6) {
        answered = await request('list', '/api/contacts/?limit=20');
      } else if (dice < 0.9) {
        answered = await request('get', `/api/contacts/${ids[Math.floor(Math.random() * ids.length)]}`);
      } else {
        // Per-user rate limited: its counter lives in Redis when there is one.
        answered = await request('me', '/api/users/me');
      }
      // A service that is gone refuses at once: back off rather than spin.
      await sleep(answered ? pauseMs : 100);
    }
  }

  async function readiness(): Promise<void> {
    while (!stopped) {
      await request('ready', '/readyz');
      await sleep(readyEveryMs);
    }
  }

  const running = [...Array.from({ length: clients }, client), ...(readyEveryMs > 0 ? [readiness()] : [])];
  return {
    outcomes,
    stop: async () => {
      stopped = true;
      await Promise.all(running);
    },
  };
}

/** Every contact id the user can list, page by page. */
export async function listAllIds(baseUrl: string, token: string): Promise<Set<number>> {
  const ids = new Set<number>();
  for (let skip = 0; ; skip += 1000) {
    const response = await fetch(`${baseUrl}/api/contacts/?limit=1000&skip=${skip}`, { headers: { authorization: `Bearer ${token}` } });
    if (response.status !== 200) throw new Error(`list: ${response.status} ${await response.text()}`);
    const page = (await response.json()) as { id: number }[];
    for (const contact of page) ids.add(contact.id);
    if (page.length < 1000) return ids;
  }
}

/** A stretch of time when a dependency was away: from the fault until it answered again. */
export interface Window {
  from: number;
  to: number;
}

export interface Summary {
  total: number;
  byStatus: Record<string, number>;
  /** Answers 500–599 other than 503. */
  other5xx: Outcome[];
  /** 503s answered outside every window (plus grace). */
  stray503: Outcome[];
  count503: number;
  /** Requests that got no HTTP answer at all. */
  unanswered: Outcome[];
  /** Per window: ms from the dependency being back to the first 2xx of a request sent after it. */
  recoveryMs: (number | null)[];
}

const inside = (at: number, windows: Window[], graceMs: number) => windows.some((w) => at >= w.from && at <= w.to + graceMs);

/** Sorts the API outcomes (readiness probes excluded) against the outage windows. */
export function summarise(outcomes: Outcome[], windows: Window[], graceMs: number): Summary {
  const api = outcomes.filter((o) => o.op !== 'ready');
  const byStatus: Record<string, number> = {};
  for (const o of api) {
    const key = o.status === null ? (o.error ?? 'no answer') : String(o.status);
    byStatus[key] = (byStatus[key] ?? 0) + 1;
  }
  return {
    total: api.length,
    byStatus,
    other5xx: api.filter((o) => o.status !== null && o.status >= 500 && o.status !== 503),
    stray503: api.filter((o) => o.status === 503 && !inside(o.end, windows, graceMs)),
    count503: api.filter((o) => o.status === 503).length,
    unanswered: api.filter((o) => o.status === null),
    recoveryMs: windows.map((w) => {
      const first = api
        .filter((o) => o.start >= w.to && o.status !== null && o.status >= 200 && o.status < 300)
        .sort((a, b) => a.end - b.end)[0];
      return first ? first.end - w.to : null;
    }),
  };
}

/** `contacts_dependency_up` of each dependency, from the service's /metrics. */
export async function dependencies(baseUrl: string): Promise<Record<string, number>> {
  const samples = parseExposition(await (await fetch(`${baseUrl}/metrics`)).text());
  return Object.fromEntries(samples.filter((s) => s.name === 'contacts_dependency_up').map((s) => [s.labels.dependency, s.value]));
}

/** Compact text for t.comment and assertion messages. */
export function describe(outcomes: Outcome[], limit = 5): string {
  return outcomes
    .slice(0, limit)
    .map((o) => `${o.op} ${o.status ?? o.error} ${o.detail ?? ''} @${o.start}→${o.end}`)
    .join('; ');
}
