import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { btree_gin } from '@electric-sql/pglite/contrib/btree_gin';
import { pg_trgm } from '@electric-sql/pglite/contrib/pg_trgm';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { Kysely, type Migration, PostgresDialect, type PostgresPool } from 'kysely';
import pg from 'pg';
import { migrateToLatest } from './migrate.js';
import { PGlitePool } from './pglite-pool.js';

const DATE_OID = 1082;
const INT8_OID = 20;
// Dates stay 'YYYY-MM-DD' strings (pg would make a local-midnight Date); counts are numbers on both backends.
const keepDate = (value: string) => value;
const int8 = (value: string) => Number(value);

/**
 * A Kysely instance over PostgreSQL when `databaseUrl` is set, else over PGlite persisted in
 * `embeddedDir`. `onIdleError` hears about pooled connections the server dropped (a restart, say):
 * pg emits those as 'error' events, which would otherwise end the process.
 */
export async function openDatabase<DB>(
  databaseUrl: string | null,
  embeddedDir: string,
  onIdleError: (error: Error) => void = () => {},
): Promise<Kysely<DB>> {
  let pool: PostgresPool;
  if (databaseUrl) {
    const pgPool = new pg.Pool({
      connectionString: databaseUrl,
      max: 10,
      types: {
        getTypeParser: ((oid: number, format?: 'text' | 'binary') => {
          if (oid === DATE_OID) return keepDate;
          if (oid === INT8_OID) return int8;
          return pg.types.getTypeParser(oid, format);
        }) as typeof pg.types.getTypeParser,
      },
    });
    pgPool.on('error', onIdleError);
    pool = pgPool;
  } else {
    await mkdir(path.dirname(embeddedDir), { recursive: true });
    const pglite = await PGlite.create(embeddedDir, {
      extensions: { pg_trgm, btree_gin },
      parsers: { [DATE_OID]: keepDate, [INT8_OID]: int8 },
    });
    pool = new PGlitePool(pglite);
  }
  return new Kysely<DB>({ dialect: new PostgresDialect({ pool }) });
}

export interface DbOptions {
  /** The schema's migrations, applied in key order before the app serves. */
  migrations: Record<string, Migration>;
}

/**
 * `app.db`: Kysely over PostgreSQL or embedded PGlite, migrated to the latest schema before the app
 * serves. The features declare its table types (`FastifyInstance['db']`), so this plugin knows none.
 */
export default fp<DbOptions>(
  async (app, { migrations }) => {
    const { databaseUrl, dataDir } = app.config;
    const db = await openDatabase<FastifyInstance['db'] extends Kysely<infer DB> ? DB : never>(databaseUrl, path.join(dataDir, 'pgdata'), (error) =>
      app.log.warn({ err: error }, 'an idle database connection was closed by the server'),
    );
    try {
      const applied = await migrateToLatest(db, migrations);
      if (applied.length > 0) app.log.info({ migrations: applied }, 'database migrated');
    } catch (error) {
      await db.destroy();
      throw error;
    }
    app.decorate('db', db);
    app.addHook('onClose', async () => db.destroy());
  },
  { name: 'db', dependencies: ['config'], fastify: '5.x' },
);
