/** `npm run migrate`: brings the configured database to the latest schema; exits 1 on failure. */
import path from 'node:path';
import { loadConfig } from '../plugins/config.js';
import { openDatabase } from '../plugins/db.js';
import { migrateToLatest } from '../plugins/migrate.js';
import { migrations } from './db/migrations/index.js';

const config = await loadConfig();
const db = await openDatabase(config.databaseUrl, path.join(config.dataDir, 'pgdata'));
try {
  const applied = await migrateToLatest(db, migrations);
  console.log(applied.length > 0 ? `Applied: ${applied.join(', ')}` : 'Already up to date.');
} catch (error) {
  console.error(error instanceof Error ? error.message : error);
  process.exitCode = 1;
} finally {
  await db.destroy();
}
