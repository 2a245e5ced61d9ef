/**
 * The single test command (`npm test`): runs the tap suite once per storage backend and ends with
 * one line, `N passed, N failed, N skipped`, summed over the runs. The counts are leaf assertions
 * (t.ok, t.equal, ...), not subtests or files.
 *
 *   npm test                                  every backend: postgres, embedded, then citus
 *   npm test -- test/auth/login.test.ts       any other argument goes to tap
 *   npm test -- --backend embedded            one backend only
 *
 * The citus pass runs CITUS_FILES (the contacts, sync, CardDAV and account tests, and test/citus/)
 * against a Citus coordinator and two workers that it starts with scripts/citus-cluster.sh and
 * destroys at the end. It needs Citus installed for this machine's PostgreSQL
 * (`$(pg_config --pkglibdir)/citus.so`); without it the pass is skipped, and counted as one
 * skip, unless CITUS_REQUIRED=1 (set by .ci/run when it installed Citus), which makes it a failure.
 * Given test files, the citus pass runs those of them that are in its list (all of them with
 * `--backend citus`).
 *
 * TEST_NODE_FLOOR=1 runs NODE_FLOOR_FILES alone (when no files are given): .ci/run's second pass,
 * on the oldest Node that package.json's engines allows, which the whole suite has just run on the
 * target Node.
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { Parser, type Result } from 'tap-parser';
import { openDatabase } from '../plugins/db.js';
import { migrateToLatest } from '../plugins/migrate.js';
import type { Database } from '../src/db/database.js';
import { migrations } from '../src/db/migrations/index.js';

const BACKENDS = ['postgres', 'embedded', 'citus'] as const;
type Backend = (typeof BACKENDS)[number];
type Tally = { pass: number; fail: number; skip: number };

const root = fileURLToPath(new URL('..', import.meta.url));
const tapBin = fileURLToPath(new URL('../node_modules/tap/dist/esm/run.mjs', import.meta.url));

/** What the citus pass runs: what a sharded deployment must keep, in a few minutes. */
const CITUS_FILES = [
  ...['crud', 'sync', 'list', 'filter-property', 'large-owners', 'quota', 'address-books', 'transfer', 'conditional'].map(
    (f) => `test/contacts/${f}.test.ts`,
  ),
  ...['cards', 'reports', 'races', 'auth', 'card-quota', 'real-clients'].map((f) => `test/carddav/${f}.test.ts`),
  'test/users/account.test.ts',
  'test/auth/register.test.ts',
  ...readdirSync(path.join(root, 'test/citus'))
    .filter((f) => f.endsWith('.test.ts'))
    .sort()
    .map((f) => `test/citus/${f}`),
];
/**
 * What the floor Node runs: the service as production runs it (the real server, every face, worker
 * threads, streams, sockets, crypto, image work, the SDK), a few minutes of the suite. The rest is
 * the same code again, and tools that run once on the target Node (codegen, contract diff, the
 * process-level fault and scale suites, Prometheus and nginx).
 */
const NODE_FLOOR_FILES = [
  'test/server.test.ts',
  ...['flow', 'tokens'].map((f) => `test/auth/${f}.test.ts`),
  ...['passwords', 'worker-pool', 'http', 'rate-limit'].map((f) => `test/plugins/${f}.test.ts`),
  ...['crud', 'list', 'sync', 'transfer', 'database-time', 'formats/vcard', 'formats/csv'].map((f) => `test/contacts/${f}.test.ts`),
  ...['cards', 'reports', 'streaming'].map((f) => `test/carddav/${f}.test.ts`),
  'test/avatars/avatars.test.ts',
  'test/users/account.test.ts',
  'test/idempotency/idempotency.test.ts',
  'test/health/health.test.ts',
  'test/pages/pages.test.ts',
  'test/sdk/sync.test.ts',
];

let only: string | undefined;
const tapArgs: string[] = [];
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const a = argv[i]!;
  if (a === '--backend') only = argv[++i];
  else if (a.startsWith('--backend=')) only = a.slice('--backend='.length);
  else tapArgs.push(a);
}
if (only !== undefined && !(BACKENDS as readonly string[]).includes(only)) {
  console.error(`--backend must be one of: ${BACKENDS.join(', ')}`);
  process.exit(2);
}

// On a terminal: tap's `base` reporter, raw TAP saved with --output-file. Elsewhere (CI, pipes):
// raw TAP, teed from tap's stdout, because `base` redraws a live box on a non-TTY and, with
// CI=true and --output-file, loses its final summary.
const userReporter = tapArgs.some((a) => /^(-R|--reporter\b)/.test(a));
const isFile = (a: string) => !a.startsWith('-') && /\.[cm]?[jt]s$/.test(a);
const userFiles = tapArgs.filter(isFile);
const tapOptions = tapArgs.filter((a) => !isFile(a));
const tee = !userReporter && !process.stdout.isTTY;

function envFor(backend: Backend): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, TEST_BACKEND: backend };
  if (backend === 'citus') {
    env.REDIS_URL ??= 'redis://127.0.0.1:6379';
    delete env.DATABASE_URL;
  } else if (backend === 'postgres') {
    env.DATABASE_URL ??= 'postgres://postgres@127.0.0.1:5432/postgres';
    env.REDIS_URL ??= 'redis://127.0.0.1:6379';
  } else {
    // embedded = PGlite + in-process cache, which the service picks when these are absent
    delete env.DATABASE_URL;
    delete env.REDIS_URL;
  }
  return env;
}

/**
 * tap-parser emits every test point of every nested subtest. A point that closes a subtest is
 * not counted itself, only the assertions inside it; but if it failed with nothing failing
 * inside (a test file that crashed or exited non-zero, a timeout, a bad plan) it counts as 1.
 */
function tallyTap(tap: string): { total: Tally; failedFiles: string[] } {
  const asserts = new Map<Parser, Result[]>();
  const children = new Map<Parser, Parser[]>();
  const watch = (p: Parser): void => {
    asserts.set(p, []);
    children.set(p, []);
    p.on('assert', (r: Result) => asserts.get(p)!.push(r));
    p.on('child', (c: Parser) => {
      children.get(p)!.push(c);
      watch(c);
    });
  };
  const tally = (p: Parser): Tally => {
    const t: Tally = { pass: 0, fail: 0, skip: 0 };
    const closers = new Map(children.get(p)!.map((c) => [c.closingTestPoint, c]));
    for (const r of asserts.get(p)!) {
      const child = closers.get(r);
      if (child) {
        const s = tally(child);
        t.pass += s.pass;
        t.fail += s.fail;
        t.skip += s.skip;
        if (!r.ok && !r.todo && !r.skip && s.fail === 0) t.fail++;
      } else if (r.todo || r.skip) t.skip++;
      else if (r.ok) t.pass++;
      else t.fail++;
    }
    return t;
  };
  const parser = new Parser();
  watch(parser);
  parser.end(tap);
  const failedFiles = asserts
    .get(parser)!
    .filter((r) => !r.ok && !r.todo && !r.skip)
    .map((r) => r.name);
  return { total: tally(parser), failedFiles };
}

async function runTap(
  backend: Backend,
  files: string[],
  extraEnv: NodeJS.ProcessEnv = {},
  extraArgs: string[] = [],
): Promise<{ tap: string; code: number | string }> {
  const out = `${root}.tap/backend-${backend}.tap`;
  mkdirSync(`${root}.tap`, { recursive: true });
  rmSync(out, { force: true });
  const args = tee ? ['--reporter=tap'] : [...(userReporter ? [] : ['--reporter=base']), `--output-file=${out}`];
  const child = spawn(process.execPath, [tapBin, ...args, ...extraArgs, ...tapOptions, ...files], {
    cwd: root,
    env: { ...envFor(backend), ...extraEnv },
    stdio: ['inherit', tee ? 'pipe' : 'inherit', 'inherit'],
  });
  let tap = '';
  child.stdout?.setEncoding('utf8').on('data', (d: string) => {
    process.stdout.write(d);
    tap += d;
  });
  const code = await new Promise<number | string>((resolve) => {
    child.on('error', (e) => resolve(String(e)));
    child.on('close', (status, signal) => resolve(signal ?? status ?? 1));
  });
  if (tee)
    writeFileSync(out, tap); // kept for inspection, as --output-file would
  else if (existsSync(out)) tap = readFileSync(out, 'utf8');
  return { tap, code };
}

/** Why the citus pass cannot run here, or null when Citus is installed for this machine's PostgreSQL. */
function citusMissing(): string | null {
  let libdir: string, version: string;
  try {
    libdir = execFileSync('pg_config', ['--pkglibdir'], { encoding: 'utf8' }).trim();
    version = execFileSync('pg_config', ['--version'], { encoding: 'utf8' }).trim();
  } catch {
    return 'citus: skipped — PostgreSQL (pg_config) is not installed';
  }
  const major = /(\d+)/.exec(version)?.[1] ?? version;
  return existsSync(path.join(libdir, 'citus.so')) ? null : `citus: skipped — Citus is not installed for PostgreSQL ${major}`;
}

const citusScript = path.join(root, 'scripts/citus-cluster.sh');

/** Starts the throwaway cluster; returns the nodes' admin URLs (coordinator first) and how to destroy it. */
function startCitus(): { nodes: string[]; destroy(): void } {
  const clusterRoot = mkdtempSync(path.join(tmpdir(), 'contacts-citus-'));
  // Fewer shards than Citus's 32 (two a worker) make each test file's migrations (which distribute the tables) quicker.
  const env = { ...process.env, ROOT: clusterRoot, CITUS_SHARD_COUNT: '4' };
  const destroy = () => {
    execFileSync('bash', [citusScript, 'destroy'], { env, stdio: ['ignore', 'inherit', 'inherit'] });
  };
  try {
    execFileSync('bash', [citusScript, 'start'], { env, stdio: ['ignore', 'inherit', 'inherit'] });
  } catch (error) {
    destroy();
    throw error;
  }
  const ports = execFileSync('bash', [citusScript, 'ports'], { env, encoding: 'utf8' }).trim().split(/\s+/);
  return { nodes: ports.map((port) => `postgres://postgres@127.0.0.1:${port}/postgres`), destroy };
}

/** The database every citus test file's database is copied from: migrated (so distributed) once per run. */
const CITUS_TEMPLATE = 'contacts_template';

/**
 * Makes CITUS_TEMPLATE on every node, migrates it through the coordinator, then closes it to
 * connections: CREATE DATABASE … TEMPLATE needs a source nobody is connected to, and Citus's
 * maintenance daemon would otherwise be. A copy made on each node keeps the shards and the metadata
 * in step, and costs a fraction of migrating (distributing 14 tables) again for every file.
 */
async function migratedCitusTemplate(nodes: string[]): Promise<void> {
  const at = (node: string, database: string) => Object.assign(new URL(node), { pathname: `/${database}` }).toString();
  const run = async (node: string, database: string, statements: string[]) => {
    const client = new pg.Client({ connectionString: at(node, database) });
    await client.connect();
    try {
      for (const statement of statements) await client.query(statement);
    } finally {
      await client.end();
    }
  };
  for (const node of nodes) await run(node, 'postgres', [`CREATE DATABASE ${CITUS_TEMPLATE}`]);
  for (const node of nodes) await run(node, CITUS_TEMPLATE, ['CREATE EXTENSION citus']);
  const [coordinator, ...workers] = nodes.map((node) => new URL(node));
  await run(nodes[0]!, CITUS_TEMPLATE, [
    `SELECT citus_set_coordinator_host('${coordinator!.hostname}', ${coordinator!.port})`,
    ...workers.map((worker) => `SELECT citus_add_node('${worker.hostname}', ${worker.port})`),
  ]);
  const db = await openDatabase<Database>(at(nodes[0]!, CITUS_TEMPLATE), '');
  try {
    await migrateToLatest(db, migrations);
  } finally {
    await db.destroy();
  }
  for (const node of nodes) {
    await run(node, 'postgres', [
      `ALTER DATABASE ${CITUS_TEMPLATE} WITH ALLOW_CONNECTIONS false`,
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${CITUS_TEMPLATE}'`,
    ]);
  }
}

async function runBackend(backend: Backend): Promise<{ tap: string; code: number | string } | { skipped: string } | null> {
  if (backend !== 'citus')
    return runTap(backend, userFiles.length === 0 && process.env.TEST_NODE_FLOOR === '1' ? NODE_FLOOR_FILES : userFiles);
  const files =
    only === 'citus' && userFiles.length > 0
      ? userFiles
      : userFiles.length > 0
        ? userFiles.filter((f) => CITUS_FILES.includes(path.normalize(f)))
        : CITUS_FILES;
  if (files.length === 0) return null;
  const missing = citusMissing();
  if (missing) return { skipped: missing };
  let cluster: ReturnType<typeof startCitus>;
  try {
    cluster = startCitus();
  } catch (error) {
    // Counted as a failure: the tap text below has one failing point for the tally to read.
    console.error(`citus: the cluster did not start: ${String(error)}`);
    return { tap: 'TAP version 14\nnot ok 1 - the Citus cluster did not start (scripts/citus-cluster.sh start)\n1..1\n', code: 1 };
  }
  try {
    await migratedCitusTemplate(cluster.nodes);
    // Each test file's database is a copy of the template on every node; under load a file that
    // builds a dozen apps (test/auth/login.test.ts) can still need more than .taprc's 300 s.
    const env = { TEST_CITUS_NODES: cluster.nodes.join(','), TEST_CITUS_TEMPLATE: CITUS_TEMPLATE };
    return await runTap(backend, files, env, ['--timeout=600']);
  } finally {
    cluster.destroy();
  }
}

const sum: Tally = { pass: 0, fail: 0, skip: 0 };
const lines: string[] = [];
for (const backend of BACKENDS.filter((b) => !only || b === only)) {
  const started = Date.now();
  console.log(`\n=== tap run: TEST_BACKEND=${backend}, node ${process.version} ===\n`);
  const run = await runBackend(backend);
  if (run === null) {
    console.log('citus: not run — none of the given files is in its list (test/run.ts CITUS_FILES)');
    continue;
  }
  if ('skipped' in run) {
    console.log(run.skipped);
    const required = process.env.CITUS_REQUIRED === '1';
    if (required) sum.fail++;
    else sum.skip++;
    lines.push(`[${backend}] ${run.skipped}${required ? ' (CITUS_REQUIRED=1: a failure)' : ''}`);
    continue;
  }
  const { tap, code } = run;
  const { total, failedFiles } = tallyTap(tap);
  // tap failed without a failing assertion: the runner crashed, no test files matched, ...
  if (code !== 0 && total.fail === 0) total.fail = 1;
  sum.pass += total.pass;
  sum.fail += total.fail;
  sum.skip += total.skip;
  const seconds = Math.round((Date.now() - started) / 1000);
  lines.push(`[${backend}] passed ${total.pass}, failed ${total.fail}, skipped ${total.skip}; tap exit ${code}; ${seconds} s`);
  for (const f of failedFiles) lines.push(`[${backend}]   failed: ${f}`);
}
console.log(`\n${lines.join('\n')}`);
console.log(`${sum.pass} passed, ${sum.fail} failed, ${sum.skip} skipped`);
process.exit(sum.fail > 0 ? 1 : 0);
