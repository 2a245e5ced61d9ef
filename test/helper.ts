/**
 * Test harness: `build(t)` gives each test file its own app over a fresh database on the backend
 * chosen by TEST_BACKEND: `postgres` (real PostgreSQL and Redis on this machine), `embedded`
 * (PGlite copied from a migrated template, in-process cache) or `citus` (a Citus coordinator and
 * two workers that test/run.ts starts with scripts/citus-cluster.sh, and the real Redis).
 */
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { cp, mkdir, mkdtemp, readdir, readFile, rename, rm, stat } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import { type Kysely, type RawBuilder, sql } from 'kysely';
import pg from 'pg';
import { SMTPServer } from 'smtp-server';
import { buildApp, type BuildOptions } from '../src/app.js';
import { loadConfig, type AppConfig } from '../plugins/config.js';
import { openDatabase } from '../plugins/db.js';
import { migrateToLatest } from '../plugins/migrate.js';
import type { Database } from '../src/db/database.js';
import { migrations } from '../src/db/migrations/index.js';
import { checkResponsesAgainstSpec } from './spec-validator.js';

export type Backend = 'postgres' | 'embedded' | 'citus';
export const backend: Backend =
  process.env.TEST_BACKEND === 'embedded' ? 'embedded' : process.env.TEST_BACKEND === 'citus' ? 'citus' : 'postgres';
/** The Citus nodes' admin URLs, coordinator first (test/run.ts sets TEST_CITUS_NODES for the citus pass). */
export const CITUS_NODES = (process.env.TEST_CITUS_NODES ?? '').split(',').filter(Boolean);
/**
 * Counts (as `n`) the sessions of the test's database waiting for a lock another holds. On Citus a
 * row's lock is taken on the worker that holds it, where citus_lock_waits finds the waits.
 */
export const LOCK_WAITERS_SQL =
  backend === 'citus'
    ? 'select count(distinct waiting_gpid)::int as n from citus_lock_waits'
    : "select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'";
/**
 * A session of its own on the app's database, to hold row locks as a hand-written transaction
 * would, and a count of the sessions waiting for a lock (LOCK_WAITERS_SQL, on a second session).
 */
export async function lockingSession(
  t: Teardown,
  databaseUrl: string,
): Promise<{ session: pg.Client; lockWaiters: () => Promise<number> }> {
  const session = new pg.Client({ connectionString: databaseUrl });
  const watcher = new pg.Client({ connectionString: databaseUrl });
  await Promise.all([session.connect(), watcher.connect()]);
  t.teardown(() => Promise.all([session.end(), watcher.end()]));
  return { session, lockWaiters: async () => (await watcher.query<{ n: number }>(LOCK_WAITERS_SQL)).rows[0]!.n };
}

/** Resolves once `check` does, asking every 20 ms; throws after 10 s, naming `what`. */
export async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** Why a test that needs the Citus cluster is skipped on this backend, or false on citus. */
export const onlyOnCitus = backend !== 'citus' && 'needs a Citus cluster: npm test -- --backend citus';

export const POSTGRES_ADMIN_URL = process.env.TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
export const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
export const TEST_JWT_SECRET = 'test-secret-that-is-at-least-32-characters-long';

/** The subset of tap's Test this harness needs. */
export interface Teardown {
  teardown(fn: () => unknown): void;
  /** Reports a response that departs from openapi.yaml. */
  fail(message: string): unknown;
}

const uniqueName = () => `t${Date.now().toString(36)}${randomBytes(4).toString('hex')}`;

async function onNode(url: string, database: string, statements: string[]): Promise<void> {
  const at = new URL(url);
  at.pathname = `/${database}`;
  const client = new pg.Client({ connectionString: at.toString() });
  await client.connect();
  try {
    for (const statement of statements) await client.query(statement);
  } finally {
    await client.end();
  }
}

/**
 * A new PostgreSQL database for one test file, dropped at teardown: empty, or a copy of a migrated
 * template (postgresTemplate, or test/run.ts's on citus). On citus it is made on every node (Citus does not propagate
 * CREATE DATABASE): a copy of test/run.ts's migrated template, or, empty, with the extension and the
 * coordinator knowing both workers, so the migrations distribute the tables.
 */
export async function freshPostgresDatabase(t: Teardown, migrated = false): Promise<string> {
  const name = `contacts_test_${uniqueName()}`;
  const nodes = backend === 'citus' ? CITUS_NODES : [POSTGRES_ADMIN_URL];
  if (nodes.length === 0) throw new Error('TEST_CITUS_NODES is not set: run the citus backend through test/run.ts');
  t.teardown(async () => {
    for (const node of nodes) await onNode(node, 'postgres', [`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`]);
  });
  const template = migrated ? (backend === 'citus' ? process.env.TEST_CITUS_TEMPLATE : await postgresTemplate()) : undefined;
  for (const node of nodes) await onNode(node, 'postgres', [`CREATE DATABASE ${name}${template ? ` TEMPLATE ${template}` : ''}`]);
  if (backend === 'citus' && !template) {
    for (const node of nodes) await onNode(node, name, ['CREATE EXTENSION citus']);
    const [coordinator, ...workers] = nodes.map((node) => new URL(node));
    await onNode(nodes[0]!, name, [
      `SELECT citus_set_coordinator_host('${coordinator!.hostname}', ${coordinator!.port})`,
      ...workers.map((worker) => `SELECT citus_add_node('${worker.hostname}', ${worker.port})`),
    ]);
  }
  const url = new URL(nodes[0]!);
  url.pathname = `/${name}`;
  return url.toString();
}

/** The first 12 hex digits of a hash of the migrations' sources: a template is good while it is the same. */
async function migrationsHash(): Promise<string> {
  const migrationsDir = new URL('../src/db/migrations/', import.meta.url);
  const hash = createHash('sha256');
  for (const file of (await readdir(migrationsDir)).sort()) hash.update(await readFile(new URL(file, migrationsDir)));
  return hash.digest('hex').slice(0, 12);
}

let postgresTemplateName: Promise<string> | undefined;

/**
 * A migrated PostgreSQL database that each test file's database copies, made once per migrations'
 * content and kept (as embeddedTemplate is): a copy takes a fraction of the 36 migrations' time.
 * Closed to connections, as CREATE DATABASE … TEMPLATE needs. Test files racing to make it each
 * build one under a name of their own; the first rename wins and the rest are dropped.
 */
function postgresTemplate(): Promise<string> {
  return (postgresTemplateName ??= (async () => {
    const name = `contacts_template_${await migrationsHash()}`;
    const admin = new pg.Client({ connectionString: POSTGRES_ADMIN_URL });
    await admin.connect();
    try {
      if ((await admin.query('select 1 from pg_database where datname = $1', [name])).rowCount) return name;
      const building = `${name}_${uniqueName()}`;
      await admin.query(`CREATE DATABASE ${building}`);
      const db = await openDatabase(Object.assign(new URL(POSTGRES_ADMIN_URL), { pathname: `/${building}` }).toString(), '');
      try {
        await migrateToLatest(db, migrations);
      } finally {
        await db.destroy();
      }
      await admin.query(`ALTER DATABASE ${building} WITH ALLOW_CONNECTIONS false`);
      await admin.query(`ALTER DATABASE ${building} RENAME TO ${name}`).catch(() => admin.query(`DROP DATABASE ${building}`));
      return name;
    } finally {
      await admin.end();
    }
  })());
}

/** A migrated PGlite folder, built once per migrations' content and copied for each test (far cheaper than initdb). */
async function embeddedTemplate(): Promise<string> {
  const template = path.resolve('.data', 'test-templates', `pgdata-${await migrationsHash()}`);
  if (
    await stat(template).then(
      () => true,
      () => false,
    )
  )
    return template;
  await mkdir(path.dirname(template), { recursive: true });
  const building = `${template}.${uniqueName()}`;
  const db = await openDatabase(null, building);
  await migrateToLatest(db, migrations);
  await db.destroy();
  // Parallel test files may race to build it; the first rename wins and the rest are discarded.
  await rename(building, template).catch(() => rm(building, { recursive: true, force: true }));
  return template;
}

/** A database of its own with no tables on the current backend, for tests of the migrations themselves. */
export async function emptyDatabase(t: Teardown): Promise<Kysely<Database>> {
  if (backend !== 'embedded') return openDatabase<Database>(await freshPostgresDatabase(t), '');
  const dir = await mkdtemp(path.join(tmpdir(), 'contacts-empty-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return openDatabase<Database>(null, path.join(dir, 'pgdata'));
}

/**
 * The expressions of an index on contacts built on `definition`, and those of the index `existing`,
 * as PostgreSQL stores them (without where in the statement they were written). The probe index is
 * built in a transaction that is rolled back.
 */
export async function indexExpressions(
  db: Kysely<Database>,
  definition: RawBuilder<unknown>,
  existing: string,
): Promise<{ probe: string; existing: string }> {
  const expressionsOf = async (trx: Kysely<Database>, index: string): Promise<string> => {
    const { rows } = await sql<{ expressions: string }>`
      select regexp_replace(indexprs::text, ' :location -?[0-9]+', '', 'g') as expressions
        from pg_index where indexrelid = to_regclass(${index})`.execute(trx);
    return rows[0]!.expressions;
  };
  const rolledBack = new Error('rolled back');
  let found: { probe: string; existing: string } | undefined;
  await db
    .transaction()
    .execute(async (trx) => {
      await sql`create index index_probe on contacts ${definition}`.execute(trx);
      found = { probe: await expressionsOf(trx, 'index_probe'), existing: await expressionsOf(trx, existing) };
      throw rolledBack;
    })
    .catch((error: unknown) => {
      if (error !== rolledBack) throw error;
    });
  return found!;
}

/** Environment for one isolated app instance on the current backend. */
export async function testEnv(t: Teardown): Promise<Record<string, string>> {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'contacts-test-'));
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  const env: Record<string, string> = {
    NODE_ENV: 'test',
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    JWT_SECRET: TEST_JWT_SECRET,
    BCRYPT_COST: '4',
    // Test files register and log in many users from one address; test/rate-limit.test.ts and
    // test/auth/sign-in-limits.test.ts set the password limit they check.
    RATE_LIMIT_PASSWORD_PER_MIN: '1000000',
    // And they send several at once: the per-address share of the password queue (4 in production)
    // would answer the fifth 503. test/auth/sign-in-limits.test.ts sets the share it checks.
    PASSWORD_QUEUE_PER_CLIENT: '64',
    // Tests sync, import and upload far more often than a client; the buckets' own tests set them.
    ...HEAVY_WORK_UNLIMITED,
    DATA_DIR: dataDir,
    PUBLIC_BASE_URL: 'http://contacts.test',
  };
  if (backend !== 'embedded') {
    env.DATABASE_URL = await freshPostgresDatabase(t, true);
    env.REDIS_URL = REDIS_URL;
    env.REDIS_KEY_PREFIX = `test:${uniqueName()}:`;
    // Two suites share this machine's two cores in CI: the production 250 ms would fail the odd command.
    env.REDIS_COMMAND_TIMEOUT_MS = '2000';
  } else {
    await cp(await embeddedTemplate(), path.join(dataDir, 'pgdata'), { recursive: true });
  }
  return env;
}

/**
 * The per-user buckets of heavy work out of the way, for tests that upload, import, export, sync
 * or make app passwords more often than a client would; test/plugins/rate-limit-buckets.test.ts
 * and test/users/app-passwords.test.ts test them.
 */
export const HEAVY_WORK_UNLIMITED = {
  RATE_LIMIT_IMPORT_PER_MIN: '100000',
  RATE_LIMIT_EXPORT_PER_MIN: '100000',
  RATE_LIMIT_SYNC_PER_MIN: '100000',
  RATE_LIMIT_AVATAR_PER_MIN: '100000',
  RATE_LIMIT_APP_PASSWORD_PER_MIN: '100000',
  RATE_LIMIT_ACCOUNT_PER_MIN: '100000',
  RATE_LIMIT_MULTIGET_PER_MIN: '100000',
  RATE_LIMIT_CARD_PUT_PER_MIN: '100000',
};

/** testEnv's lifted limits unset again: the production defaults, for the tests of those defaults. */
export const DEFAULT_LIMITS = {
  RATE_LIMIT_PASSWORD_PER_MIN: undefined,
  PASSWORD_QUEUE_PER_CLIENT: undefined,
  ...Object.fromEntries(Object.keys(HEAVY_WORK_UNLIMITED).map((name) => [name, undefined])),
};

export interface BuildTestOptions extends Omit<BuildOptions, 'config'> {
  /** Extra or overriding environment variables; `undefined` unsets one. */
  env?: Record<string, string | undefined>;
}

/** The real app on a fresh database; closed at teardown. Use `app.inject` or `app.listen`. */
export async function build(t: Teardown, options: BuildTestOptions = {}): Promise<FastifyInstance> {
  const env = Object.fromEntries(Object.entries({ ...(await testEnv(t)), ...options.env }).filter(([, value]) => value !== undefined));
  const config: AppConfig = await loadConfig(env);
  const app = await buildApp({ ...options, config });
  t.teardown(() => app.close());
  // Every response any test receives must match openapi.yaml (status, headers, body).
  await checkResponsesAgainstSpec(app, (problem) => t.fail(`response departs from openapi.yaml: ${problem}`));
  await app.ready();
  return app;
}

export interface CapturedMail {
  from: string;
  to: string[];
  raw: string;
  /** The first http(s) link in the message. */
  link: string | null;
}

/** A real SMTP listener on a free port; `SMTP_URL` points the app at it. */
export async function smtpCapture(t: Teardown): Promise<{ url: string; messages: CapturedMail[]; next(): Promise<CapturedMail> }> {
  const messages: CapturedMail[] = [];
  const waiting: ((mail: CapturedMail) => void)[] = [];
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS'],
    logger: false,
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (chunk: Buffer) => chunks.push(chunk));
      stream.on('end', () => {
        const raw = Buffer.concat(chunks).toString('utf8');
        // Quoted-printable soft line breaks would split a long link.
        const unfolded = raw.replace(/=\r?\n/g, '').replace(/=3D/g, '=');
        const mail: CapturedMail = {
          from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
          to: session.envelope.rcptTo.map((r) => r.address),
          raw,
          link: /https?:\/\/[^\s"<>]+/.exec(unfolded)?.[0] ?? null,
        };
        const waiter = waiting.shift();
        if (waiter) waiter(mail);
        else messages.push(mail);
        callback();
      });
    },
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const { port } = server.server.address() as { port: number };
  return {
    url: `smtp://127.0.0.1:${port}`,
    messages,
    next: () => {
      const queued = messages.shift();
      return queued ? Promise.resolve(queued) : new Promise((resolve) => waiting.push(resolve));
    },
  };
}

/** A TCP port nothing listens on right now, for a process a test starts. */
export async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  server.close();
  await once(server, 'close');
  return port;
}

export { seededRandom } from './random.js';
