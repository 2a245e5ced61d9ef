/**
 * `npm run bench -- [--duration S] [--rounds N] [--connections C] [--keep]`
 *
 * Starts the compiled service the way production does, against a fresh PostgreSQL database and its
 * own Redis key prefix, seeds one user with 10,000 contacts through the API, then measures each
 * operation with autocannon beside a bare-Fastify ceiling (bench/ceiling.ts) in alternating
 * rounds. Then the cached GET by id once more, on two fresh services over the same database and
 * Redis, one with metrics on (the default) and one with METRICS_ENABLED=false, in alternating
 * rounds: what recording metrics costs (`--metrics-only` runs just that pair). Writes are measured
 * beside the insert ceiling (a bare INSERT, bench/ceiling.ts): the create, and imports of
 * IMPORT_SIZES contacts, each a fresh CSV, timed one at a time in alternating rounds (`--writes-only`
 * runs just those). `--redis-cluster` runs only the Redis pair instead: the cached reads on two
 * fresh services over the same database, one on a redis-server of its own and one on a Redis Cluster
 * of its own (three masters, a replica each), in alternating rounds, with their throughput ratio and
 * the CPU their Redis processes spent per answer. Each round also reads the CPU time its side's process and the local
 * PostgreSQL server spent per answer (from /proc), which says where a gap to the ceiling goes and
 * varies less than throughput on a shared machine. Prints Markdown tables to stdout (progress goes to stderr). Exits 1
 * when any measured request was not answered 2xx; the ratio targets are reported, not enforced.
 */
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import autocannon from 'autocannon';
import { Redis } from 'ioredis';
import { startRedisCluster } from '../test/redis-cluster.js';
import type { CannedResponse } from './ceiling.js';
import {
  cleanUp,
  createDatabase,
  deleteRedisKeys,
  ensureBuilt,
  expectStatus,
  freePort,
  log,
  REDIS_URL,
  ROOT,
  SERVER_ENTRY,
  type Started,
  startNode,
  stopChild,
  undo,
  verifiedUser,
  LIMITS_LIFTED,
} from './support.js';

const USAGE = `Usage: npm run bench -- [options]
  --duration S      seconds per round (default 10)
  --rounds N        rounds per side and operation (default 3)
  --connections C   autocannon connections (default 50)
  --keep            keep the benchmark database (it is dropped otherwise)
  --metrics-only    only the metrics row pair (GET by id with metrics on and off), not the table beside the ceiling
  --writes-only     only the writes beside the insert ceiling: the create and the imports
  --redis-cluster   only the cached reads on one Redis beside a three-master Redis Cluster (private redis-servers)`;

// Node runs the ceiling's TypeScript itself (type stripping): no build step, no tsx loader in the process.
const CEILING_ENTRY = 'bench/ceiling.ts';
/** Cached reads with metrics on keep at least this share of their throughput with metrics off. */
const METRICS_TARGET = 0.95;
const CONTACTS = 10_000;
/** Contacts per measured import: the largest import the contract takes, and a common one. */
const IMPORT_SIZES = [10_000, 1_000];
/** A create's share of the insert ceiling's rate that the service aims for. */
const WRITE_TARGET = 0.5;
/** The longest an import of this many contacts should take, in seconds; its ratio to the ceiling is reported. */
const IMPORT_TARGET_SECONDS: Record<number, number> = { 10_000: 1.5 };
const SEED_CONCURRENCY = 16;
const WARM_REQUESTS = 5;
const UPCOMING_ITEMS = 100;
/** Headers Fastify sets on every answer by itself; the ceiling must not copy them. */
const FRAMEWORK_HEADERS = new Set(['date', 'connection', 'keep-alive', 'content-length', 'transfer-encoding']);

function parseOptions() {
  const { values } = parseArgs({
    options: {
      duration: { type: 'string', default: '10' },
      rounds: { type: 'string', default: '3' },
      connections: { type: 'string', default: '50' },
      keep: { type: 'boolean', default: false },
      'metrics-only': { type: 'boolean', default: false },
      'writes-only': { type: 'boolean', default: false },
      'redis-cluster': { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  });
  const positive = (raw: string) => (/^[1-9]\d*$/.test(raw) ? Number(raw) : NaN);
  const options = {
    duration: positive(values.duration),
    rounds: positive(values.rounds),
    connections: positive(values.connections),
    keep: values.keep,
    metricsOnly: values['metrics-only'],
    writesOnly: values['writes-only'],
    redisCluster: values['redis-cluster'],
  };
  if (
    values.help ||
    [options.metricsOnly, options.writesOnly, options.redisCluster].filter(Boolean).length > 1 ||
    [options.duration, options.rounds, options.connections].some(Number.isNaN)
  ) {
    console.error(USAGE);
    process.exit(values.help ? 0 : 2);
  }
  return options;
}

type Options = ReturnType<typeof parseOptions>;

// ---------------------------------------------------------------------------------------------
// Seeding through the API.

const FIRST_NAMES = ['Ada', 'Ben', 'Chloe', 'Dev', 'Emma', 'Farid', 'Grace', 'Hiro', 'Ines', 'Jonas'];
/** Four in ten start with "Sm", interleaved with others so the filtered first page is not the unfiltered one. */
const LAST_NAMES = ['Jones', 'Smith', 'Garcia', 'Smythe', 'Nguyen', 'Smart', 'Okafor', 'Small', 'Kowalski', 'Brown'];

/** Contact number `n`: deterministic names, a unique e-mail, birthdays spread evenly over the year. */
function contactBody(n: number, emailTag: string): string {
  // Day of a non-leap year (no 29 February), stepped by 37 (coprime with 365) so days and names do not correlate.
  const day = new Date(Date.UTC(2001, 0, 1 + ((n * 37) % 365)));
  const year = 1950 + (n % 50);
  return JSON.stringify({
    first_name: FIRST_NAMES[n % FIRST_NAMES.length],
    last_name: LAST_NAMES[Math.floor(n / FIRST_NAMES.length) % LAST_NAMES.length],
    email: `${emailTag}-${n}@bench.example`,
    phone: `+1555${String(n).padStart(7, '0')}`,
    birthday: `${year}-${day.toISOString().slice(5, 10)}`,
  });
}

/** Runs `task(0..count-1)` with at most `concurrency` in flight. */
async function inParallel(count: number, concurrency: number, task: (index: number) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < count) await task(next++);
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

/** Registers, verifies and logs in one user, then creates CONTACTS contacts; returns the token and their ids. */
async function seed(service: string, outbox: string): Promise<{ token: string; ids: number[] }> {
  const token = await verifiedUser(service, outbox);
  const json = { 'content-type': 'application/json' };

  const started = Date.now();
  const ids: number[] = [];
  await inParallel(CONTACTS, SEED_CONCURRENCY, async (n) => {
    const init = { method: 'POST', headers: { ...json, authorization: `Bearer ${token}` }, body: contactBody(n, 'seed') };
    const created = await expectStatus(await fetch(`${service}/api/contacts/`, init), 201, 'create contact');
    ids[n] = ((await created.json()) as { id: number }).id;
  });
  log(`seeded ${CONTACTS} contacts in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return { token, ids };
}

// ---------------------------------------------------------------------------------------------
// Operations and the answers the ceiling replays.

interface Operation {
  /** Short name for progress lines and the targets line. */
  label: string;
  /** The operation as the issue names it, for the table. */
  name: string;
  method: 'GET' | 'POST';
  /** The service's route pattern; the ceiling registers the same one. */
  route: string;
  url: string;
  /** The share of the ceiling's req/s the service team aims for; null when there is none. */
  target: number | null;
  /** POST: a fresh body per request (each create needs a unique e-mail). */
  body?: () => string;
  /** POST: each request with an Idempotency-Key of its own, as the SDK sends it. */
  keyed?: boolean;
  note?: string;
}

function send(base: string, op: Operation, token: string): Promise<Response> {
  const headers: Record<string, string> = { authorization: `Bearer ${token}` };
  if (op.body) headers['content-type'] = 'application/json';
  if (op.keyed) headers['idempotency-key'] = randomUUID();
  return fetch(base + op.url, { method: op.method, headers, ...(op.body ? { body: op.body() } : {}) });
}

/** A few requests so the cache is filled and the JIT warm; returns the last answer's X-Cache. */
async function warm(base: string, op: Operation, token: string): Promise<string | null> {
  let xCache: string | null = null;
  for (let i = 0; i < WARM_REQUESTS; i++) {
    const response = await send(base, op, token);
    if (!response.ok) throw new Error(`${op.label} warm-up: ${response.status} ${await response.text()}`);
    await response.arrayBuffer();
    xCache = response.headers.get('x-cache');
  }
  return xCache;
}

/** The service's answer to `op` with the headers Fastify adds by itself removed; a cached GET must be a HIT. */
async function capture(service: string, op: Operation, token: string): Promise<CannedResponse> {
  if (op.method === 'GET') await warm(service, op, token);
  const response = await send(service, op, token);
  if (!response.ok) throw new Error(`${op.label}: ${response.status} ${await response.text()}`);
  if (op.method === 'GET' && response.headers.get('x-cache') !== 'HIT') throw new Error(`${op.label}: no cache HIT after warm-up`);
  const headers = Object.fromEntries([...response.headers].filter(([name]) => !FRAMEWORK_HEADERS.has(name)));
  const body = await response.text();
  log(`${op.label}: captured ${response.status}, ${Buffer.byteLength(body)} bytes, headers ${Object.keys(headers).join(', ')}`);
  return { method: op.method, route: op.route, url: op.url, status: response.status, headers, body };
}

/** The time_range whose upcoming-birthday count is nearest UPCOMING_ITEMS (the count grows with the range). */
async function chooseTimeRange(service: string, token: string): Promise<{ timeRange: number; total: number }> {
  const total = async (timeRange: number) => {
    const url = `${service}/api/contacts/get-upcoming-birthday?time_range=${timeRange}&limit=1`;
    const response = await expectStatus(await fetch(url, { headers: { authorization: `Bearer ${token}` } }), 200, 'upcoming birthdays');
    return Number(response.headers.get('x-total-count'));
  };
  let [low, high] = [0, 366];
  while (low < high) {
    const middle = Math.floor((low + high) / 2);
    if ((await total(middle)) >= UPCOMING_ITEMS) high = middle;
    else low = middle + 1;
  }
  const candidates = await Promise.all([low - 1, low].filter((t) => t >= 0).map(async (t) => ({ timeRange: t, total: await total(t) })));
  return candidates.reduce((best, c) => (Math.abs(c.total - UPCOMING_ITEMS) < Math.abs(best.total - UPCOMING_ITEMS) ? c : best));
}

// ---------------------------------------------------------------------------------------------
// Rounds.

type Side = 'service' | 'ceiling';

interface Round {
  reqPerSec: number;
  p50: number;
  p99: number;
  responses: number;
  /** Answers outside 2xx. */
  non2xx: number;
  /** Requests with no answer (connection errors, timeouts): failures as much as a non-2xx. */
  errors: number;
  statusCodes: string[];
  hits: number;
  /** Answers whose body differs from the captured one. */
  mismatches: number;
  /** CPU µs per answer of the side's own process and of the local PostgreSQL server (NaN where /proc is missing). */
  cpu: { node: number; database: number };
}

/** a, b, b, a, a, b, …: each side goes first equally often. */
function roundOrder<S extends string>(rounds: number, [a, b]: [S, S]): S[] {
  return Array.from({ length: rounds }, (_, i): S[] => (i % 2 === 0 ? [a, b] : [b, a])).flat();
}

async function runRound(base: string, op: Operation, canned: CannedResponse, token: string, options: Options): Promise<Round> {
  let hits = 0;
  let mismatches = 0;
  const result = await autocannon({
    url: base,
    connections: options.connections,
    duration: options.duration,
    headers: { authorization: `Bearer ${token}`, ...(op.body ? { 'content-type': 'application/json' } : {}) },
    requests: [
      {
        method: op.method,
        path: op.url,
        ...(op.body
          ? {
              setupRequest: (request: autocannon.Request) => ({
                ...request,
                body: op.body!(),
                ...(op.keyed ? { headers: { ...request.headers, 'idempotency-key': randomUUID() } } : {}),
              }),
            }
          : {}),
        onResponse: (_status, body, _context, headers) => {
          if ((headers?.['x-cache'] ?? headers?.['X-Cache']) === 'HIT') hits++;
          // Each create answers a new contact; a GET must answer the very bytes the ceiling replays.
          if (op.method === 'GET' && body !== canned.body) mismatches++;
        },
      },
    ],
  });
  return {
    reqPerSec: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    responses: result['2xx'] + result.non2xx,
    non2xx: result.non2xx,
    errors: result.errors,
    statusCodes: Object.keys(result.statusCodeStats ?? {}).filter((code) => !code.startsWith('2')),
    hits,
    mismatches,
    cpu: { node: NaN, database: NaN },
  };
}

interface Measured {
  op: Operation;
  rounds: Record<Side, Round[]>;
  /** X-Cache of the sample requests right before and after each service round. */
  samples: Array<string | null>;
}

async function measure(
  op: Operation,
  sides: Record<Side, Started>,
  canned: CannedResponse,
  token: string,
  options: Options,
): Promise<Measured> {
  const bases = { service: sides.service.base, ceiling: sides.ceiling.base };
  const measured: Measured = { op, rounds: { service: [], ceiling: [] }, samples: [] };
  for (const side of roundOrder<Side>(options.rounds, ['service', 'ceiling'])) {
    const before = await warm(bases[side], op, token);
    const cpuBefore = { node: cpuSeconds(sides[side].pid), database: databaseCpuSeconds() };
    const round = await runRound(bases[side], op, canned, token, options);
    round.cpu = {
      node: ((cpuSeconds(sides[side].pid) - cpuBefore.node) * 1e6) / round.responses,
      database: (databaseCpuSince(cpuBefore.database) * 1e6) / round.responses,
    };
    if (side === 'service' && op.method === 'GET') {
      const after = await send(bases.service, op, token);
      await after.arrayBuffer();
      measured.samples.push(before, after.headers.get('x-cache'));
    }
    measured.rounds[side].push(round);
    log(
      `${op.label} ${side}: ${format(round.reqPerSec)} req/s, p50 ${round.p50} ms, p99 ${round.p99} ms, non-2xx ${round.non2xx + round.errors}, CPU µs/answer ${cpuCell(round)}`,
    );
  }
  return measured;
}

/** One import's time, in seconds, on each side, in alternating rounds. */
interface ImportRounds {
  size: number;
  seconds: Record<Side, number[]>;
  failed: number;
}

/** A CSV of `size` new contacts (unique e-mails under `tag`), as the insert ceiling reads it too. */
function importCsv(size: number, tag: string): string {
  const rows = Array.from({ length: size }, (_, n) => {
    const contact = JSON.parse(contactBody(n, tag)) as Record<string, string>;
    return ['first_name', 'last_name', 'email', 'phone', 'birthday'].map((column) => contact[column]).join(',');
  });
  return ['first_name,last_name,email,phone,birthday', ...rows, ''].join('\r\n');
}

async function measureImport(
  size: number,
  bases: Record<Side, string>,
  token: string,
  options: Options,
  stamp: string,
): Promise<ImportRounds> {
  const measured: ImportRounds = { size, seconds: { service: [], ceiling: [] }, failed: 0 };
  let round = 0;
  for (const side of roundOrder<Side>(options.rounds, ['service', 'ceiling'])) {
    const csv = importCsv(size, `import-${stamp}-${size}-${round++}`);
    const started = performance.now();
    const response = await fetch(`${bases[side]}/api/contacts/import`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'text/csv' },
      body: csv,
    });
    const report = (await response.json()) as { created?: number };
    const seconds = (performance.now() - started) / 1000;
    if (response.status !== 200 || report.created !== size) measured.failed++;
    measured.seconds[side].push(seconds);
    log(`import ${size} ${side}: ${seconds.toFixed(3)} s, status ${response.status}, created ${report.created}`);
  }
  return measured;
}

const importRatio = (m: ImportRounds) => median(m.seconds.ceiling) / median(m.seconds.service);

function importTable(results: ImportRounds[]): string {
  const lines = [
    '| Import (one request, CSV) | Service s | Service contacts/s | Ceiling s | Ceiling contacts/s | Ratio | Target | failed |',
    '|---|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const m of results) {
    const [service, ceiling] = [median(m.seconds.service), median(m.seconds.ceiling)];
    const cells = [
      `${format(m.size)} contacts`,
      service.toFixed(3),
      format(m.size / service),
      ceiling.toFixed(3),
      format(m.size / ceiling),
      importRatio(m).toFixed(2),
      m.size in IMPORT_TARGET_SECONDS ? `< ${IMPORT_TARGET_SECONDS[m.size]} s` : '–',
      String(m.failed),
    ];
    lines.push(`| ${cells.join(' | ')} |`);
  }
  return lines.join('\n');
}

type MetricsSide = 'on' | 'off';
type RedisSide = 'one Redis' | 'cluster';

/** One operation on two twin services, in alternating rounds. */
interface Pair<S extends string> {
  op: Operation;
  rounds: Record<S, Round[]>;
  /** CPU time the service process spent per answer in each round, in µs (NaN where /proc is missing). */
  cpuPerRequest: Record<S, number[]>;
  /** The same for the side's Redis processes, when they are this benchmark's own. */
  redisCpuPerRequest: Record<S, number[]>;
}

type MetricsPair = Pair<MetricsSide>;
/**
 * CPU seconds (user + system) process `pid` has used so far, from /proc (Linux); NaN elsewhere.
 * Less sensitive than throughput to what else runs on a shared machine.
 */
function cpuSeconds(pid: number): number {
  if (!existsSync('/proc/self/stat')) return NaN;
  const stat = readFileSync(`/proc/${pid}/stat`, { encoding: 'utf8', flag: 'r' });
  // Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th, in clock ticks of 1/100 s.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** CPU seconds each process of the local PostgreSQL server (named `postgres`) has used so far, by pid; empty without /proc. */
function databaseCpuSeconds(): Map<number, number> {
  const used = new Map<number, number>();
  if (!existsSync('/proc/self/stat')) return used;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === 'postgres') used.set(Number(entry), cpuSeconds(Number(entry)));
    } catch {
      // The process ended between the listing and the read.
    }
  }
  return used;
}

/**
 * The PostgreSQL CPU seconds used between two readings: by the processes alive at the second (a
 * process that started in between counts whole). Both sides write to the same server, one at a
 * time, so each round's difference is its own. NaN without /proc.
 */
function databaseCpuSince(before: Map<number, number>): number {
  const after = databaseCpuSeconds();
  if (after.size === 0) return NaN;
  return [...after].reduce((total, [pid, seconds]) => total + seconds - (before.get(pid) ?? 0), 0);
}

/** `node + database` CPU µs per answer, as the table shows it. */
function cpuCell(round: Pick<Round, 'cpu'>): string {
  return `${Math.round(round.cpu.node)} + ${Math.round(round.cpu.database)}`;
}

/**
 * `op` on two twin services in alternating rounds (metrics on and off; one Redis and a cluster),
 * with the CPU each service, and each side's Redis processes in `redisPids`, spent per answer.
 */
async function measurePair<S extends string>(
  op: Operation,
  services: Record<S, Started>,
  sides: [S, S],
  canned: CannedResponse,
  token: string,
  options: Options,
  /** Names the pair in progress lines: `metrics ` gives `get by id metrics on: …`. */
  title: string,
  redisPids?: Record<S, number[]>,
): Promise<Pair<S>> {
  const empty = () => Object.fromEntries(sides.map((side) => [side, []])) as unknown as Record<S, never[]>;
  const pair: Pair<S> = { op, rounds: empty(), cpuPerRequest: empty(), redisCpuPerRequest: empty() };
  const cpu = (side: S) => cpuSeconds(services[side].pid);
  const redisCpu = (side: S) => (redisPids?.[side] ?? []).reduce((total, pid) => total + cpuSeconds(pid), 0);
  for (const side of roundOrder<S>(options.rounds, sides)) {
    const xCache = await warm(services[side].base, op, token);
    if (xCache !== 'HIT') throw new Error(`${op.label} ${side}: no cache HIT after warm-up`);
    const [before, redisBefore] = [cpu(side), redisCpu(side)];
    const round = await runRound(services[side].base, op, canned, token, options);
    const cpuPerRequest = ((cpu(side) - before) * 1e6) / round.responses;
    const redisCpuPerRequest = redisPids ? ((redisCpu(side) - redisBefore) * 1e6) / round.responses : NaN;
    pair.rounds[side].push(round);
    pair.cpuPerRequest[side].push(cpuPerRequest);
    pair.redisCpuPerRequest[side].push(redisCpuPerRequest);
    const failed = round.non2xx + round.errors;
    const redisPart = redisPids ? ` + ${Math.round(redisCpuPerRequest)} Redis` : '';
    log(
      `${op.label} ${title}${side}: ${format(round.reqPerSec)} req/s, ${Math.round(cpuPerRequest)}${redisPart} CPU µs/request, p50 ${round.p50} ms, p99 ${round.p99} ms, non-2xx ${failed}`,
    );
  }
  return pair;
}

/** A redis-server of this run's own on a free port, without persistence; stopped at clean-up. */
async function privateRedis(): Promise<{ url: string; pid: number }> {
  const port = await freePort();
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
    stdio: 'ignore',
  });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  undo.push({ what: 'stop the redis-server', run: () => stopChild(child, exited) });
  const url = `redis://127.0.0.1:${port}`;
  for (let attempt = 0; attempt < 100; attempt++, await sleep(50)) {
    const probe = new Redis(url, { lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
    probe.on('error', () => undefined);
    const up = await probe.connect().then(
      () => true,
      () => false,
    );
    probe.disconnect();
    if (up) return { url, pid: child.pid! };
  }
  throw new Error('redis-server did not start');
}

/**
 * The cached reads by id and of a list page on a service over one redis-server and on its twin over
 * a Redis Cluster of three masters with a replica each, every Redis process this run's own, so
 * nothing else on the machine shares them.
 */
async function measureRedisCluster(
  canned: Map<Operation, CannedResponse>,
  deployment: Deployment,
  token: string,
  options: Options,
): Promise<{ pairs: Pair<RedisSide>[]; logLines: () => number }> {
  const single = await privateRedis();
  // A node unreachable for 5 s is failed over: the rounds load both cores, and a slow node is no failure here.
  const cluster = await startRedisCluster({ masters: 3, replicas: 1, nodeTimeoutMs: 5_000 });
  undo.push({ what: 'stop the Redis Cluster', run: () => cluster.stop() });
  log(`one Redis at ${single.url}; a Redis Cluster of ${cluster.nodes.length} nodes at ${cluster.urls.join(',')}`);
  const services: Record<RedisSide, Started> = {
    'one Redis': await startService('service on one Redis', deployment, { REDIS_URL: single.url }),
    cluster: await startService('service on the Redis Cluster', deployment, { REDIS_URL: '', REDIS_CLUSTER_URLS: cluster.urls.join(',') }),
  };
  const pids = { 'one Redis': [single.pid], cluster: cluster.nodes.map((node) => node.pid) };
  const pairs: Pair<RedisSide>[] = [];
  for (const [op, answer] of canned) {
    if (op.label === 'get by id' || op.label === 'list') {
      pairs.push(await measurePair(op, services, ['one Redis', 'cluster'], answer, token, options, 'on ', pids));
    }
  }
  return { pairs, logLines: () => services['one Redis'].logLines() + services.cluster.logLines() };
}

// ---------------------------------------------------------------------------------------------
// Report.

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

const format = (value: number) => Math.round(value).toLocaleString('en-US');
const sum = (rounds: Round[], field: 'responses' | 'non2xx' | 'errors' | 'hits' | 'mismatches') =>
  rounds.reduce((total, r) => total + r[field], 0);
const ratioOf = (m: Measured) => median(m.rounds.service.map((r) => r.reqPerSec)) / median(m.rounds.ceiling.map((r) => r.reqPerSec));
const failedRequests = (m: Measured) => [...m.rounds.service, ...m.rounds.ceiling].reduce((total, r) => total + r.non2xx + r.errors, 0);

/** The rounds' median CPU per answer, process and PostgreSQL. */
function medianCpu(rounds: Round[]): string {
  return cpuCell({ cpu: { node: median(rounds.map((r) => r.cpu.node)), database: median(rounds.map((r) => r.cpu.database)) } });
}

function sideCells(rounds: Round[]): string[] {
  return [format(median(rounds.map((r) => r.reqPerSec))), `${median(rounds.map((r) => r.p50))} / ${median(rounds.map((r) => r.p99))}`];
}

function table(results: Measured[]): string {
  const lines = [
    '| Operation | Service req/s | Service p50 / p99 ms | Ceiling req/s | Ceiling p50 / p99 ms | Ratio | Target | CPU µs/answer, process + PostgreSQL: service / ceiling | X-Cache HIT | non-2xx |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const m of results) {
    const service = m.rounds.service;
    // Rounded down, so a handful of misses among tens of thousands never reads as 100.00%.
    const hitShare =
      m.op.method === 'GET' ? `${(Math.floor((10_000 * sum(service, 'hits')) / sum(service, 'responses')) / 100).toFixed(2)}%` : '–';
    const label = `\`${m.op.name}\`${m.op.note ? ` (${m.op.note})` : ''}`;
    const target = m.op.target === null ? '–' : `≥ ${m.op.target.toFixed(2)}`;
    lines.push(
      `| ${[label, ...sideCells(service), ...sideCells(m.rounds.ceiling), ratioOf(m).toFixed(2), target, `${medianCpu(service)} / ${medianCpu(m.rounds.ceiling)}`, hitShare, format(failedRequests(m))].join(' | ')} |`,
    );
  }
  return lines.join('\n');
}

/** Things a reader of the table should know: failed requests, misses, bodies that were not the captured ones. */
function notes(results: Measured[]): string[] {
  const found: string[] = [];
  for (const m of results) {
    for (const side of ['service', 'ceiling'] as const) {
      const rounds = m.rounds[side];
      const codes = [...new Set(rounds.flatMap((r) => r.statusCodes))];
      if (sum(rounds, 'non2xx') + sum(rounds, 'errors') > 0) {
        found.push(
          `${m.op.label} ${side}: ${sum(rounds, 'non2xx')} non-2xx answers (status ${codes.join(', ') || '–'}), ${sum(rounds, 'errors')} connection errors/timeouts`,
        );
      }
      if (sum(rounds, 'mismatches') > 0)
        found.push(`${m.op.label} ${side}: ${sum(rounds, 'mismatches')} answers differ from the captured body`);
    }
    const misses = m.samples.filter((xCache) => xCache !== 'HIT').length;
    if (misses > 0)
      found.push(`${m.op.label}: ${misses} of ${m.samples.length} sample requests around service rounds were not X-Cache: HIT`);
  }
  return found;
}

function targetLine(results: Measured[], imports: ImportRounds[]): string {
  const checked = results.filter((m) => m.op.target !== null);
  const timed = imports.filter((m) => m.size in IMPORT_TARGET_SECONDS);
  const inTime = (m: ImportRounds) => median(m.seconds.service) < IMPORT_TARGET_SECONDS[m.size]!;
  const pass = checked.every((m) => ratioOf(m) >= m.op.target!) && timed.every(inTime);
  const parts = [
    ...checked.map((m) => `${m.op.label} ${ratioOf(m).toFixed(2)} ${ratioOf(m) >= m.op.target! ? '≥' : '<'} ${m.op.target!.toFixed(2)}`),
    ...timed.map(
      (m) => `import ${m.size} ${median(m.seconds.service).toFixed(3)} s ${inTime(m) ? '<' : '≥'} ${IMPORT_TARGET_SECONDS[m.size]} s`,
    ),
  ];
  return `Targets: ${pass ? 'PASS' : 'FAIL'} (reported, not enforced): ${parts.join('; ')}`;
}

function packageVersion(name: string): string {
  return (JSON.parse(readFileSync(path.join(ROOT, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version;
}

function commit(): string {
  const git = (...args: string[]) => execFileSync('git', args, { cwd: ROOT, encoding: 'utf8' }).trim();
  return `${git('rev-parse', '--short', 'HEAD')}${git('status', '--porcelain') ? ' (with uncommitted changes)' : ''}`;
}

function settingsLine(options: Options): string {
  return [
    `Settings: node ${process.version}`,
    `fastify ${packageVersion('fastify')}, @fastify/jwt ${packageVersion('@fastify/jwt')}, autocannon ${packageVersion('autocannon')}`,
    `rounds ${options.rounds} per side and operation, ${options.duration} s each, ${options.connections} connections`,
    `${CONTACTS.toLocaleString('en-US')} contacts`,
    `${os.cpus().length} CPUs`,
    `commit ${commit()}`,
    new Date().toISOString(),
  ].join('; ');
}

// ---------------------------------------------------------------------------------------------

interface Deployment {
  databaseUrl: string;
  redisPrefix: string;
  dataDir: string;
  jwtSecret: string;
}

/** The compiled service as production runs it, on the deployment's database, Redis prefix and data folder. */
async function startService(name: string, deployment: Deployment, extraEnv: Record<string, string> = {}): Promise<Started> {
  const { databaseUrl, redisPrefix, dataDir, jwtSecret } = deployment;
  const service = await startNode(
    name,
    SERVER_ENTRY,
    [],
    {
      NODE_ENV: 'production',
      JWT_SECRET: jwtSecret,
      DATABASE_URL: databaseUrl,
      REDIS_URL,
      REDIS_KEY_PREFIX: redisPrefix,
      LOG_LEVEL: 'warn',
      DATA_DIR: dataDir,
      ...LIMITS_LIFTED,
      // One token serves the whole run, which can outlast the default 15 minutes.
      ACCESS_TOKEN_TTL: '86400',
      // The create rounds add tens of thousands of contacts to one user, who would become a large
      // owner midway (docs/performance.md) and pay for the grams from then on: the create measured
      // is an ordinary owner's, as nearly every owner is.
      LARGE_OWNER_CONTACTS: '1000000000',
      ...extraEnv,
    },
    { path: '/readyz', status: 200 },
  );
  const settings = ['NODE_ENV=production', ...Object.entries(extraEnv).map(([key, value]) => `${key}=${value}`)];
  log(`${name} at ${service.base} (${SERVER_ENTRY}, ${settings.join(', ')})`);
  return service;
}

/** The measured operations in the order they run, each with the service's answer for the ceiling to replay. */
async function prepareOperations(
  service: string,
  token: string,
  ids: number[],
  stamp: string,
  writesOnly: boolean,
): Promise<Map<Operation, CannedResponse>> {
  let created = 0;
  const create: Operation = {
    label: 'create',
    name: 'POST /api/contacts/',
    method: 'POST',
    route: '/api/contacts/',
    url: '/api/contacts/',
    target: WRITE_TARGET,
    note: 'ceiling: one INSERT',
    body: () => contactBody(created++, `post-${stamp}`),
  };
  const keyedCreate: Operation = {
    ...create,
    label: 'create with key',
    name: 'POST /api/contacts/ with Idempotency-Key',
    keyed: true,
    // Its transaction (the key's lock, its lookup, the insert, the stored answer) has no target of its own.
    target: null,
    note: 'a new key each; ceiling: one INSERT',
  };
  // Captured first: a create makes every cached read of the user miss, so it must precede the reads' captures.
  const cannedCreate = await capture(service, create, token);
  const cannedKeyedCreate = await capture(service, keyedCreate, token);
  if (writesOnly)
    return new Map([
      [create, cannedCreate],
      [keyedCreate, cannedKeyedCreate],
    ]);

  const { timeRange, total } = await chooseTimeRange(service, token);
  const id = ids[CONTACTS / 2]!;
  const reads: Operation[] = [
    {
      label: 'get by id',
      name: 'GET /api/contacts/{id}',
      method: 'GET',
      route: '/api/contacts/:contact_id',
      url: `/api/contacts/${id}`,
      target: 0.7,
      note: `id ${id}`,
    },
    {
      label: 'list',
      name: 'GET /api/contacts/?limit=20',
      method: 'GET',
      route: '/api/contacts/',
      url: '/api/contacts/?limit=20',
      target: 0.6,
    },
    {
      label: 'filter',
      name: 'GET /api/contacts/?query=last_name:startswith:Sm&limit=20',
      method: 'GET',
      route: '/api/contacts/',
      url: '/api/contacts/?query=last_name:startswith:Sm&limit=20',
      target: 0.6,
    },
    {
      label: 'upcoming',
      name: `GET /api/contacts/get-upcoming-birthday?time_range=${timeRange}`,
      method: 'GET',
      route: '/api/contacts/get-upcoming-birthday',
      url: `/api/contacts/get-upcoming-birthday?time_range=${timeRange}`,
      target: 0.6,
    },
  ];
  const canned = new Map<Operation, CannedResponse>();
  for (const op of reads) canned.set(op, await capture(service, op, token));
  const upcoming = reads.at(-1)!;
  const items = (JSON.parse(canned.get(upcoming)!.body) as unknown[]).length;
  // The captures of the two creates made two contacts more than were seeded.
  upcoming.note = `${items} items; ${total} of ${format(CONTACTS + 2)} contacts match`;
  // Creates go last: each one makes the user's cached reads miss.
  return canned.set(create, cannedCreate).set(keyedCreate, cannedKeyedCreate);
}

const medianRate = (rounds: Round[]) => median(rounds.map((r) => r.reqPerSec));
const metricsRatio = (pair: MetricsPair) => medianRate(pair.rounds.on) / medianRate(pair.rounds.off);

/** The metrics row pair: the same cached read with metrics on and off (METRICS_ENABLED=false). */
function metricsTable(pair: MetricsPair): string {
  const failed = [...pair.rounds.on, ...pair.rounds.off].reduce((total, r) => total + r.non2xx + r.errors + r.mismatches, 0);
  const cpu = (side: MetricsSide) => Math.round(median(pair.cpuPerRequest[side]));
  const cells = [
    `\`${pair.op.name}\` (${pair.op.note})`,
    ...sideCells(pair.rounds.on),
    ...sideCells(pair.rounds.off),
    metricsRatio(pair).toFixed(2),
    `≥ ${METRICS_TARGET.toFixed(2)}`,
    `${cpu('on')} / ${cpu('off')}`,
    format(failed),
  ];
  return [
    '| Operation | Metrics on req/s | On p50 / p99 ms | Metrics off req/s | Off p50 / p99 ms | Ratio (on ÷ off) | Target | CPU µs/request on / off | non-2xx or other body |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
    `| ${cells.join(' | ')} |`,
  ].join('\n');
}

const clusterRatio = (pair: Pair<RedisSide>) => medianRate(pair.rounds.cluster) / medianRate(pair.rounds['one Redis']);

/** The Redis pairs: each cached read on one Redis and on a Redis Cluster. */
function redisTable(pairs: Pair<RedisSide>[]): string {
  const cpu = (pair: Pair<RedisSide>, side: RedisSide) =>
    `${Math.round(median(pair.cpuPerRequest[side]))} + ${Math.round(median(pair.redisCpuPerRequest[side]))}`;
  const rows = pairs.map((pair) => {
    const rounds = [...pair.rounds['one Redis'], ...pair.rounds.cluster];
    const cells = [
      `\`${pair.op.name}\`${pair.op.note ? ` (${pair.op.note})` : ''}`,
      ...sideCells(pair.rounds['one Redis']),
      ...sideCells(pair.rounds.cluster),
      clusterRatio(pair).toFixed(2),
      `${cpu(pair, 'one Redis')} / ${cpu(pair, 'cluster')}`,
      format(rounds.reduce((total, r) => total + r.non2xx + r.errors + r.mismatches, 0)),
    ];
    return `| ${cells.join(' | ')} |`;
  });
  return [
    '| Operation | One Redis req/s | One p50 / p99 ms | Cluster req/s | Cluster p50 / p99 ms | Ratio (cluster ÷ one) | CPU µs/request, service + Redis: one / cluster | non-2xx or other body |',
    '|---|---:|---:|---:|---:|---:|---:|---:|',
    ...rows,
  ].join('\n');
}

function report(
  results: Measured[],
  imports: ImportRounds[],
  metrics: MetricsPair | null,
  options: Options,
  serviceLogLines: number,
  redis: Pair<RedisSide>[] = [],
): void {
  if (results.length > 0) console.log(`${table(results)}\n`);
  if (imports.length > 0) console.log(`${importTable(imports)}\n`);
  if (metrics) console.log(`${metricsTable(metrics)}\n`);
  if (redis.length > 0) console.log(`${redisTable(redis)}\n`);
  for (const note of notes(results)) console.log(`- ${note}`);
  if (serviceLogLines > 0) console.log(`- the service logged ${serviceLogLines} warnings or errors (LOG_LEVEL=warn; on stderr above)`);
  console.log(settingsLine(options));
  if (results.length > 0) console.log(targetLine(results, imports));
  if (redis.length > 0) {
    console.log(
      `Redis Cluster ÷ one Redis, median req/s: ${redis.map((pair) => `${pair.op.label} ${clusterRatio(pair).toFixed(2)}`).join(', ')}`,
    );
  }
  if (!metrics) return;
  const ratio = metricsRatio(metrics);
  const met = ratio >= METRICS_TARGET;
  console.log(
    `Metrics: ${met ? 'PASS' : 'FAIL'} (reported, not enforced): on ÷ off ${ratio.toFixed(2)} ${met ? '≥' : '<'} ${METRICS_TARGET.toFixed(2)}`,
  );
}

async function main(): Promise<number> {
  const options = parseOptions();
  ensureBuilt([SERVER_ENTRY]);

  const stamp = `${new Date().toISOString().replace(/\D/g, '').slice(0, 14)}_${randomBytes(3).toString('hex')}`;
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'contacts-bench-'));
  undo.push({ what: `remove ${dataDir}`, run: () => rm(dataDir, { recursive: true, force: true }) });
  const jwtSecret = randomBytes(48).toString('base64url');
  const redisPrefix = `contacts-bench-${stamp}:`;
  undo.push({ what: `delete Redis keys ${redisPrefix}*`, run: () => deleteRedisKeys(redisPrefix) });
  const deployment = { databaseUrl: await createDatabase(`contacts_bench_${stamp}`, options.keep), redisPrefix, dataDir, jwtSecret };
  const service = await startService('service', deployment);
  const { token, ids } = await seed(service.base, path.join(dataDir, 'outbox'));
  const canned = await prepareOperations(service.base, token, ids, stamp, options.writesOnly);

  if (options.redisCluster) {
    const { pairs, logLines } = await measureRedisCluster(canned, deployment, token, options);
    report([], [], null, options, service.logLines() + logLines(), pairs);
    return pairs.some((pair) => [...pair.rounds['one Redis'], ...pair.rounds.cluster].some((r) => r.non2xx + r.errors + r.mismatches > 0))
      ? 1
      : 0;
  }

  const results: Measured[] = [];
  const imports: ImportRounds[] = [];
  if (!options.metricsOnly) {
    const cannedFile = path.join(dataDir, 'canned.json');
    await writeFile(cannedFile, JSON.stringify([...canned.values()]));
    const ceilingEnv = { NODE_ENV: 'production', JWT_SECRET: jwtSecret, DATABASE_URL: deployment.databaseUrl };
    const ceiling = await startNode('ceiling', CEILING_ENTRY, [cannedFile], ceilingEnv, { path: '/' });
    const bases = { service: service.base, ceiling: ceiling.base };
    for (const [op, answer] of canned) results.push(await measure(op, { service, ceiling }, answer, token, options));
    // Imports by another user, whose contacts are only the imported ones, so the rounds do not grow the create's user.
    const importer = await verifiedUser(service.base, path.join(dataDir, 'outbox'), 'bench_importer');
    for (const size of IMPORT_SIZES) imports.push(await measureImport(size, bases, importer, options, stamp));
  }
  if (options.writesOnly) {
    report(results, imports, null, options, service.logLines());
    return results.some((m) => failedRequests(m) > 0) || imports.some((m) => m.failed > 0) ? 1 : 0;
  }

  // Two fresh processes, so neither carries the other rounds' heap and caches. The creates above
  // made the user's cached reads miss; the pair's warm-up fills the cache again.
  const getById = [...canned.keys()].find((op) => op.label === 'get by id')!;
  const metricsOn = await startService('service with metrics on', deployment);
  const metricsOff = await startService('service with metrics off', deployment, { METRICS_ENABLED: 'false' });
  const metrics = await measurePair(
    getById,
    { on: metricsOn, off: metricsOff },
    ['on', 'off'],
    canned.get(getById)!,
    token,
    options,
    'metrics ',
  );
  report(results, imports, metrics, options, service.logLines() + metricsOn.logLines() + metricsOff.logLines());
  const metricsFailed = [...metrics.rounds.on, ...metrics.rounds.off].some((r) => r.non2xx + r.errors > 0);
  return results.some((m) => failedRequests(m) > 0) || imports.some((m) => m.failed > 0) || metricsFailed ? 1 : 0;
}

let exitCode = 2;
try {
  exitCode = await main();
} catch (error) {
  console.error(error);
} finally {
  await cleanUp();
}
process.exit(exitCode);
