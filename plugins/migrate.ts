import { type Kysely, type Migration, Migrator } from 'kysely';

/**
 * Brings the schema to the latest of `migrations` (in key order); throws naming the migration that
 * failed. Migrator takes an advisory lock, so replicas that start together wait for one another.
 */
export async function migrateToLatest(db: Kysely<any>, migrations: Record<string, Migration>): Promise<string[]> {
  // kysely 0.28 (the last line for Node 20) exports Migrator from its root; 0.29 moves it to 'kysely/migration'.
  const migrator = new Migrator({ db, provider: { getMigrations: async () => migrations } });
  const { error, results = [] } = await migrator.migrateToLatest();
  const failed = results.find((r) => r.status === 'Error');
  if (error || failed) {
    const cause = error instanceof Error ? error.message : String(error ?? 'unknown error');
    throw new Error(failed ? `Migration ${failed.migrationName} failed: ${cause}` : `Migrations could not run: ${cause}`, { cause: error });
  }
  return results.map((r) => r.migrationName);
}
