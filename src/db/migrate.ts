import type { Kysely } from 'kysely';
// kysely 0.28 (the last line for Node 20) exports Migrator from its root; 0.29 moves it to 'kysely/migration'.
import { Migrator } from 'kysely';
import { migrations } from './migrations/index.js';

/** Brings the schema to the latest migration; throws when one fails. Migrator takes a lock, so replicas can race safely. */
export async function migrateToLatest(db: Kysely<any>): Promise<string[]> {
  const migrator = new Migrator({ db, provider: { getMigrations: async () => migrations } });
  const { error, results = [] } = await migrator.migrateToLatest();
  const failed = results.find((r) => r.status === 'Error');
  if (error || failed) {
    const cause = error instanceof Error ? error.message : String(error ?? 'unknown error');
    throw new Error(`Migration ${failed?.migrationName ?? ''} failed: ${cause}`);
  }
  return results.map((r) => r.migrationName);
}
