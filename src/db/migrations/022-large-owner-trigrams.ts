import { type Kysely, sql } from 'kysely';
import { createIndex, dropIndex } from './concurrent-index.js';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/** Built CONCURRENTLY on a live table (see 003), so it runs outside a transaction. */
export const transactional = false;

const TEXT_COLUMNS = ['first_name', 'last_name', 'email', 'phone'] as const;

/**
 * 003's trigram indexes, for the contacts of large owners only (018), as 019 did for the grams.
 * The four cost every insert about 50 of 260 µs (pgbench, one connection) and were the longest
 * index builds of a bulk load, for the counts of an `ilike` without a literal prefix, which an
 * ordinary owner's few thousand contacts answer as fast from the per-field btrees, index only.
 */
export async function up(db: Kysely<any>): Promise<void> {
  for (const column of TEXT_COLUMNS) {
    await createIndex(
      db,
      'contacts',
      `contacts_large_owner_${column}_trgm_idx`,
      sql`using gin (owner_id, (lower(${sql.id(column)})) collate "C" gin_trgm_ops) where large_owner`,
    );
    await dropIndex(db, `contacts_owner_${column}_trgm_idx`);
  }
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const column of TEXT_COLUMNS) {
    await createIndex(
      db,
      'contacts',
      `contacts_owner_${column}_trgm_idx`,
      sql`using gin (owner_id, (lower(${sql.id(column)})) collate "C" gin_trgm_ops)`,
    );
    await dropIndex(db, `contacts_large_owner_${column}_trgm_idx`);
  }
}
