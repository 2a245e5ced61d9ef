import { setTimeout as sleep } from 'node:timers/promises';
import { type Kysely, sql } from 'kysely';
import { type Migration, Migrator } from 'kysely/migration';

/**
 * A migration module. One that exports `transactional = false` runs outside a transaction, statement
 * by statement (CREATE INDEX CONCURRENTLY cannot run inside one), so it must be safe to run again
 * after an interruption.
 */
export interface AppMigration extends Migration {
  readonly transactional?: boolean;
}

// Ours, not Kysely's migration lock: it is held across several Migrator runs.
const LOCK_KEY = sql.lit(7_402_913_665_017_104_113n);
const LOCK_POLL_MS = 100;

/**
 * Brings the schema to the latest of `migrations` (in key order); throws naming the migration that
 * failed. Consecutive pending migrations of one kind run together: transactional ones in one
 * transaction (as Kysely's Migrator does by default), the others with transactions disabled. One
 * session holds an advisory lock throughout, so replicas that start together wait for one another
 * and no run is planned on a stale view of what was applied. The lock is polled rather than waited
 * for: a session blocked in pg_advisory_lock holds a snapshot, and CREATE INDEX CONCURRENTLY on
 * the session holding the lock would wait for that snapshot forever (a deadlock).
 */
export async function migrateToLatest(db: Kysely<any>, migrations: Record<string, AppMigration>): Promise<string[]> {
  const provider = { getMigrations: async () => migrations };
  return db.connection().execute(async (session) => {
    while (!(await sql<{ locked: boolean }>`select pg_try_advisory_lock(${LOCK_KEY}) as locked`.execute(session)).rows[0]?.locked) {
      await sleep(LOCK_POLL_MS);
    }
    try {
      const applied: string[] = [];
      for (;;) {
        const pending = (await new Migrator({ db: session, provider }).getMigrations()).filter((m) => m.executedAt === undefined);
        if (pending.length === 0) return applied;
        const transactional = isTransactional(migrations[pending[0]!.name]!);
        let last = 0;
        while (last + 1 < pending.length && isTransactional(migrations[pending[last + 1]!.name]!) === transactional) last++;
        const migrator = new Migrator({ db: session, provider, disableTransactions: !transactional });
        // Under the lock nothing else migrates, so the target is ahead of what was applied: always up.
        const { error, results = [] } = await migrator.migrateTo(pending[last]!.name);
        const failed = results.find((r) => r.status === 'Error');
        if (error || failed) {
          const cause = error instanceof Error ? error.message : 'unknown error';
          throw new Error(failed ? `Migration ${failed.migrationName} failed: ${cause}` : `Migrations could not run: ${cause}`, {
            cause: error,
          });
        }
        applied.push(...results.map((r) => r.migrationName));
      }
    } finally {
      await sql`select pg_advisory_unlock(${LOCK_KEY})`.execute(session);
    }
  });
}

function isTransactional(migration: AppMigration): boolean {
  return migration.transactional !== false;
}
