import { existsSync } from 'node:fs';
import { chmod, mkdir, readdir } from 'node:fs/promises';
import path from 'node:path';
import fp from 'fastify-plugin';
import type { FastifyInstance } from 'fastify';
import {
  type Compilable,
  type CompiledQuery,
  createQueryId,
  Kysely,
  PostgresDialect,
  type PostgresPool,
  type QueryExecutorProvider,
  sql,
} from 'kysely';
import pg from 'pg';
import { Gauge, type Registry } from 'prom-client';
import { type AppMigration, migrateToLatest } from './migrate.js';
import { type OutageLog, outageLog } from './outage-log.js';
import { UserShares } from './db-share.js';
import { PGlitePool } from './pglite-pool.js';

const DATE_OID = 1082;
const INT8_OID = 20;
// Dates stay 'YYYY-MM-DD' strings (pg would make a local-midnight Date); counts are numbers on both backends.
const keepDate = (value: string) => value;
const int8 = (value: string) => Number(value);

/**
 * Takes group and other access off everything in `dir`: PGlite unpacks a new database with 0666
 * files, whatever the umask (the files PostgreSQL makes later follow the umask).
 */
async function makePrivate(dir: string): Promise<void> {
  await chmod(dir, 0o700);
  for (const entry of await readdir(dir, { recursive: true, withFileTypes: true })) {
    await chmod(path.join(entry.parentPath, entry.name), entry.isDirectory() ? 0o700 : 0o600);
  }
}

/**
 * PGlite persisted in `dir`, behind pg's Pool interface. PGlite is a development dependency (the
 * embedded default of `make run` and the tests), so a production install without it needs DATABASE_URL.
 */
async function embeddedPool(dir: string): Promise<PGlitePool> {
  let modules;
  try {
    modules = await Promise.all([
      import('@electric-sql/pglite'),
      import('@electric-sql/pglite/contrib/pg_trgm'),
      import('@electric-sql/pglite/contrib/btree_gin'),
    ]);
  } catch (error) {
    if ((error as { code?: unknown }).code !== 'ERR_MODULE_NOT_FOUND') throw error;
    throw new Error(
      'DATABASE_URL is unset and the embedded database (@electric-sql/pglite) is not installed: set DATABASE_URL, or install every dependency with npm ci',
      { cause: error },
    );
  }
  const [{ PGlite }, { pg_trgm }, { btree_gin }] = modules;
  // The database's files are this user's alone (server.ts also sets the umask for the files inside).
  await mkdir(path.dirname(dir), { recursive: true, mode: 0o700 });
  const pglite = await PGlite.create(dir, { extensions: { pg_trgm, btree_gin }, parsers: { [DATE_OID]: keepDate, [INT8_OID]: int8 } });
  await makePrivate(dir);
  return new PGlitePool(pglite);
}

export interface OpenOptions {
  /** Hears of pooled connections the server dropped (a restart, say): pg emits those as 'error' events, which would otherwise end the process. */
  onIdleError?: (error: Error) => void;
  /** Hears of every new connection to the server. */
  onConnect?: () => void;
  /** Hears of every statement sent (tests count them). */
  onQuery?: (sql: string) => void;
  /** A connection not made within this fails (a standby that does not answer must not hold a read); unset: no limit. */
  connectionTimeoutMs?: number;
  /** Connections of the pool (default 10). */
  maxConnections?: number;
  /** PostgreSQL's statement_timeout of each connection, ms; 0 (the default) is none. */
  statementTimeoutMs?: number;
}

/** Statement texts marked by prepared(), each with its name; a bound on each connection's prepared statements, whatever marks them. */
const preparedNames = new Map<string, string>();
const MAX_PREPARED_STATEMENTS = 64;

/**
 * `query` compiled, and marked to go to PostgreSQL as a named prepared statement: each connection
 * parses and plans its text once, not on every request (a create's insert spent more time there
 * than in writing its row: docs/performance.md). Only for statements of a fixed text whose best
 * plan does not depend on their values; a filter's does (a pattern's literal prefix picks an index
 * range), so reads are planned each time. The embedded database plans every statement each time.
 */
export function prepared<R>(query: Compilable<R>): CompiledQuery<R> {
  const compiled = query.compile();
  if (!preparedNames.has(compiled.sql) && preparedNames.size < MAX_PREPARED_STATEMENTS)
    preparedNames.set(compiled.sql, `prepared_${preparedNames.size}`);
  return compiled;
}

/**
 * A prepared() statement that Kysely builds and compiles once, with a placeholder for each of
 * `names`, and that each call binds to `values`: for a statement run on every request, building
 * and compiling it cost the process a tenth of a create's time. `build` gets the placeholders
 * typed `never`, so they fit wherever its builder wants a value. The first call's `db` builds it for
 * every later one: each Kysely here compiles alike (one dialect, no plugins).
 */
export function preparedStatement<DB, Name extends string, R>(
  names: readonly Name[],
  build: (db: Kysely<DB>, placeholders: Record<Name, never>) => Compilable<R>,
): (db: Kysely<DB>, values: Record<Name, unknown>) => CompiledQuery<R> {
  let template: { compiled: CompiledQuery<R>; boundTo: (Name | undefined)[] } | undefined;
  return (db, values) => {
    if (!template) {
      const placeholders = new Map(names.map((name) => [{ placeholder: name }, name]));
      const compiled = prepared(
        build(db, Object.fromEntries([...placeholders].map(([token, name]) => [name, token])) as Record<Name, never>),
      );
      template = { compiled, boundTo: compiled.parameters.map((parameter) => placeholders.get(parameter as { placeholder: Name })) };
    }
    const { compiled, boundTo } = template;
    const parameters = compiled.parameters.map((constant, i) => (boundTo[i] === undefined ? constant : values[boundTo[i]]));
    return { ...compiled, parameters, queryId: createQueryId() };
  };
}

/** Makes `client` send a text marked by prepared() by name (pg parses a name once per connection), anything else as before. */
function sendingPrepared(client: pg.PoolClient): void {
  const query = client.query.bind(client) as (...args: unknown[]) => unknown;
  client.query = ((statement: unknown, ...rest: unknown[]) => {
    const name = typeof statement === 'string' ? preparedNames.get(statement) : undefined;
    return name === undefined ? query(statement, ...rest) : query({ name, text: statement, values: rest[0] }, ...rest.slice(1));
  }) as typeof client.query;
}

/**
 * Makes `pool` leave the connections of a server that turned out read-only. When any statement
 * fails with isReadOnlyServer, every connection opened so far may be to that standby (they all went
 * through the same address, HAProxy's): each is closed when it is next lent instead of being used,
 * and the pool opens a new one, which reaches whichever node leads by then.
 */
function leavingReadOnlyServers(pool: pg.Pool): PostgresPool & PoolCounts {
  let opened = 0;
  let staleThrough = 0;
  const serials = new WeakMap<pg.PoolClient, number>();
  pool.on('connect', (client) => {
    serials.set(client, ++opened);
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    client.query = ((...args: unknown[]) => {
      const result = query(...args);
      if (result instanceof Promise)
        result.catch((error: unknown) => {
          if (isReadOnlyServer(error)) staleThrough = opened;
        });
      return result;
    }) as typeof client.query;
  });
  return {
    async connect() {
      for (;;) {
        const client = await pool.connect();
        if ((serials.get(client) ?? 0) > staleThrough) return client;
        client.release(true); // closed, not kept
      }
    },
    end: () => pool.end(),
    options: pool.options,
    get totalCount() {
      return pool.totalCount;
    },
    get idleCount() {
      return pool.idleCount;
    },
    get waitingCount() {
      return pool.waitingCount;
    },
  };
}

/** What a pool tells of its connections, as pg.Pool names it; the embedded pool counts its one session alike. */
export interface PoolCounts {
  totalCount: number;
  idleCount: number;
  waitingCount: number;
}

/** A connection pool to PostgreSQL when `databaseUrl` is set, else to PGlite persisted in `embeddedDir`. */
export async function openPool(
  databaseUrl: string | null,
  embeddedDir: string,
  {
    onIdleError = () => {},
    onConnect = () => {},
    connectionTimeoutMs = 0,
    maxConnections = 10,
    statementTimeoutMs = 0,
  }: Omit<OpenOptions, 'onQuery'> = {},
): Promise<PostgresPool & PoolCounts> {
  if (!databaseUrl) return embeddedPool(embeddedDir);
  const pgPool = new pg.Pool({
    connectionString: databaseUrl,
    max: maxConnections,
    connectionTimeoutMillis: connectionTimeoutMs,
    // Every query here reads one owner's rows, in milliseconds. JIT compiling one whose plan costs
    // past jit_above_cost (a count of 100,000 index entries) took 13 ms and saved nothing.
    // statement_timeout is each session's default: RESET and a transaction's SET LOCAL start from it.
    options: `-c jit=off -c statement_timeout=${statementTimeoutMs}`,
    types: {
      getTypeParser: ((oid: number, format?: 'text' | 'binary') => {
        if (oid === DATE_OID) return keepDate;
        if (oid === INT8_OID) return int8;
        return pg.types.getTypeParser(oid, format) as (value: string) => unknown;
      }) as typeof pg.types.getTypeParser,
    },
  });
  pgPool.on('error', onIdleError);
  // The pool listens for 'error' only on idle clients and removes its listener while it lends a
  // client out. Kysely gives a client back only once its query's promise has settled, so when one
  // socket read holds both a query's last reply and the server's FATAL 57P01 (pg_ctl restart -m
  // fast), the error is emitted on a lent-out client with no listener, and the process exits.
  // With this listener the client is only marked unusable: its next query fails, and the pool
  // drops it when it is released.
  pgPool.on('connect', (client) => client.on('error', () => {}));
  pgPool.on('connect', sendingPrepared);
  pgPool.on('connect', onConnect);
  return leavingReadOnlyServers(pgPool);
}

/** Kysely over `pool`; `onQuery` hears of every statement sent. */
export function databaseOver<DB>(pool: PostgresPool, onQuery?: (sql: string) => void): Kysely<DB> {
  return new Kysely<DB>({ dialect: new PostgresDialect({ pool }), ...(onQuery ? { log: (event) => onQuery(event.query.sql) } : {}) });
}

/** A Kysely instance over PostgreSQL when `databaseUrl` is set, else over PGlite persisted in `embeddedDir`. */
export async function openDatabase<DB>(databaseUrl: string | null, embeddedDir: string, options: OpenOptions = {}): Promise<Kysely<DB>> {
  return databaseOver<DB>(await openPool(databaseUrl, embeddedDir, options), options.onQuery);
}

/** Socket errors of a connection to the database server that is refused, cut or unanswered. */
const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);
/** SQLSTATEs of a server that is going away, starting up, or full; class 08 (connection exception) too, bar protocol violations. */
const UNAVAILABLE_STATES = new Set(['57P01', '57P02', '57P03', '53300']);
/**
 * SQLSTATE 25006 (read_only_sql_transaction) on a write: the server is a standby, not the leader.
 * The service never opens a read-only transaction that writes, so during a failover this is a node
 * not yet promoted (HAProxy's check can pass 0.1–0.2 s before the promotion ends) or one demoted.
 */
const READ_ONLY_SERVER = '25006';

/** Whether `error` came from a server that takes no writes now (a standby): the connection should go. */
export function isReadOnlyServer(error: unknown): boolean {
  return (error as { code?: unknown } | undefined)?.code === READ_ONLY_SERVER;
}
/** What pg says when a connection it held was lost, or could not be made in time. */
const PG_LOST_CONNECTION = /^Connection terminated|not queryable$|^timeout exceeded when trying to connect$/;

/**
 * Whether `error` means the database cannot be reached right now (restarting, stopped, unreachable,
 * or mid-failover: no leader yet) rather than that a query is wrong: a retry later may well succeed.
 */
export function isDatabaseUnavailable(error: unknown): boolean {
  type Failure = { code?: unknown; message?: unknown; errors?: unknown; cause?: unknown };
  let e = error as Failure | undefined;
  for (let depth = 0; e && depth < 5; depth++, e = e.cause as Failure | undefined) {
    const code = typeof e.code === 'string' ? e.code : '';
    if (NETWORK_CODES.has(code) || UNAVAILABLE_STATES.has(code) || code === READ_ONLY_SERVER || (code.startsWith('08') && code !== '08P01'))
      return true;
    if (typeof e.message === 'string' && PG_LOST_CONNECTION.test(e.message)) return true;
    // Connecting to a name with several addresses fails with an AggregateError of one error per address.
    if (Array.isArray(e.errors) && e.errors.some(isDatabaseUnavailable)) return true;
  }
  return false;
}

/**
 * Whether `error` has SQLSTATE `code` and names a constraint that `name` matches. The name is in
 * `constraint`, or only in the message: on Citus a shard's error names the shard's index, the
 * constraint's name with `_<shard id>` added, and may leave `constraint` out.
 */
function namesConstraint(error: unknown, code: string, name: RegExp): boolean {
  const e = (error ?? {}) as { code?: unknown; constraint?: unknown; message?: unknown };
  if (e.code !== code) return false;
  if (typeof e.constraint === 'string' && name.test(e.constraint)) return true;
  return typeof e.message === 'string' && [...e.message.matchAll(/"([^"]+)"/g)].some((quoted) => name.test(quoted[1]!));
}

/**
 * Whether a write referred to a user who is no longer there (SQLSTATE 23503 on a foreign key to
 * `users`, by the naming of the migrations: `<table>_user_id_fkey`, `<table>_owner_id_fkey`, or a
 * shard's copy of one): the account was deleted while a request of its own was under way.
 */
export function referencedUserGone(error: unknown): boolean {
  return namesConstraint(error, '23503', /_(user|owner)_id_fkey(_\d+)?$/);
}

/**
 * Whether PostgreSQL aborted the transaction to break a deadlock (40P01) or a serialization
 * conflict (40001): nothing of it was stored. Each write of an owner's contacts locks the owner's
 * address book (migration 033) after the row, so a transaction that holds the book and then locks
 * another of the owner's rows (a tool in psql writing several) can deadlock with the service.
 */
export function isTransactionConflict(error: unknown): boolean {
  const code = (error as { code?: unknown } | undefined)?.code;
  return code === '40P01' || code === '40001';
}

/** Whether `error` is PostgreSQL cancelling a statement (SQLSTATE 57014): statement_timeout ran out. */
export function isStatementTimeout(error: unknown): boolean {
  return (error as { code?: unknown } | undefined)?.code === '57014';
}

/**
 * Lets the statements of transaction `trx` run for `ms` each instead of the session's
 * statement_timeout, until it ends (imports and exports: a bound of their own).
 */
export async function allowLongStatements(trx: QueryExecutorProvider, ms: number): Promise<void> {
  await sql`select set_config('statement_timeout', ${String(ms)}, true)`.execute(trx);
}

/**
 * Whether `error` is the unique index (or key) `index`, or a shard's copy of it, refusing a row
 * (SQLSTATE 23505: a duplicate, even one racing ours).
 */
export function violatesUnique(error: unknown, index: string): boolean {
  if (!/^[a-z0-9_]+$/.test(index)) throw new Error(`not an index name: ${index}`);
  return namesConstraint(error, '23505', new RegExp(`^${index}(_\\d+)?$`));
}

declare module 'fastify' {
  interface FastifyInstance {
    /** Told of every request that fails for want of the database; logs once per outage. */
    databaseOutage: OutageLog;
  }
}

function withoutPassword(databaseUrl: string): string {
  const url = new URL(databaseUrl);
  if (url.password) url.password = '***';
  return url.toString();
}

export interface DbOptions {
  /** The schema's migrations, applied in key order before the app serves. */
  migrations: Record<string, AppMigration>;
  /** Hears of every statement sent (tests count them). */
  onQuery?: (sql: string) => void;
  /** Wraps the pool the app queries through (tracing puts a span around each statement). */
  wrapPool?: (pool: PostgresPool) => PostgresPool;
}

/** `contacts_db_pool_connections{state}` and `contacts_db_pool_waiting`, read from the pool at each scrape. */
function poolGauges(registry: Registry, pool: PoolCounts): void {
  new Gauge({
    name: 'contacts_db_pool_connections',
    help: 'Database connections of the pool, idle or lent to a request.',
    labelNames: ['state'],
    registers: [registry],
    collect() {
      this.set({ state: 'idle' }, pool.idleCount);
      this.set({ state: 'used' }, pool.totalCount - pool.idleCount);
    },
  });
  new Gauge({
    name: 'contacts_db_pool_waiting',
    help: 'Requests waiting for a database connection.',
    registers: [registry],
    collect() {
      this.set(pool.waitingCount);
    },
  });
}

/**
 * `app.db`: Kysely over PostgreSQL or embedded PGlite, migrated to the latest schema before the app
 * serves. The features declare its table types (`FastifyInstance['db']`), so this plugin knows none.
 */
export default fp<DbOptions>(
  async (app, { migrations, onQuery, wrapPool = (pool) => pool }) => {
    const { databaseUrl, dataDir } = app.config;
    const embeddedDir = path.join(dataDir, 'pgdata');
    if (!databaseUrl && !existsSync(embeddedDir))
      app.log.info({ embeddedDir }, 'creating the embedded database (first start: a few seconds)');
    // Every connection is lost in an outage, so the first new one is the sign that it is over.
    const outage = outageLog(
      app.log,
      { down: 'database not reachable; answering 503 until it is back', up: 'database reachable again' },
      1_000,
    );
    const pool = await openPool(databaseUrl, embeddedDir, {
      onIdleError: (error) => app.log.warn({ err: error }, 'an idle database connection was closed by the server'),
      onConnect: () => outage.answered(),
      statementTimeoutMs: app.config.dbStatementTimeoutMs,
    });
    const shares = new UserShares(app.config.dbUserConnections, app.config.dbUserWaiting);
    const db = databaseOver<FastifyInstance['db'] extends Kysely<infer DB> ? DB : never>(shares.pool(wrapPool(pool)), onQuery);
    try {
      // A migration may rewrite a whole table: no statement_timeout for it, on its one connection.
      const applied = await db.connection().execute(async (connection) => {
        await sql`set statement_timeout = 0`.execute(connection);
        try {
          return await migrateToLatest(connection, migrations);
        } finally {
          await sql`reset statement_timeout`.execute(connection);
        }
      });
      if (applied.length > 0) app.log.info({ migrations: applied }, 'database migrated');
    } catch (error) {
      await db.destroy();
      if (databaseUrl && isDatabaseUnavailable(error)) {
        throw new Error(
          `database not reachable at ${withoutPassword(databaseUrl)} (${String((error as Error).cause ?? error)}): start PostgreSQL, or fix DATABASE_URL (unset, the embedded database in DATA_DIR is used)`,
          { cause: error },
        );
      }
      throw error;
    }
    app.decorate('db', db);
    app.decorate('databaseOutage', outage);
    // After authentication and the body: the handler's connections count in its user's share.
    app.addHook('preHandler', (request, _reply, done) => {
      if (request.userId === null || request.userId === undefined) return done();
      shares.runAs(request.userId, done);
    });
    poolGauges(app.metrics.registry, pool);
    app.metrics.dependency('database', async () => (await sql`select 1`.execute(db), true));
    app.addHook('onClose', async () => db.destroy());
  },
  { name: 'db', dependencies: ['config', 'metrics'], fastify: '5.x' },
);
