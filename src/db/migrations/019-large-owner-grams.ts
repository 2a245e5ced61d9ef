import { type Kysely, sql } from 'kysely';
import { createIndex, dropIndex } from './concurrent-index.js';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/** Built CONCURRENTLY on a live table (see 003), so it runs outside a transaction. */
export const transactional = false;

/**
 * 009's grams, for the contacts of large owners only (018). They were most of the cost of every
 * insert (10,000 rows in one statement: 16 s with them, 4.5 s without) and of the index space
 * (381 MB of 1,000,000 contacts), for counts that only an owner of tens of thousands of contacts
 * needs; an ordinary owner's short term tests its own few thousand rows. A row outside the
 * predicate computes no grams at all.
 */
export async function up(db: Kysely<any>): Promise<void> {
  const fields = ['first_name', 'last_name', 'email', 'phone'].map((column) => sql`lower(${sql.id(column)})`);
  await createIndex(
    db,
    'contacts',
    'contacts_large_owner_grams_idx',
    sql`using gin (contact_search_grams(owner_id, ${sql.join(fields)})) where large_owner`,
  );
  await dropIndex(db, 'contacts_owner_grams_idx');
}

export async function down(db: Kysely<any>): Promise<void> {
  const fields = ['first_name', 'last_name', 'email', 'phone'].map((column) => sql`lower(${sql.id(column)})`);
  await createIndex(db, 'contacts', 'contacts_owner_grams_idx', sql`using gin (contact_search_grams(owner_id, ${sql.join(fields)}))`);
  await dropIndex(db, 'contacts_large_owner_grams_idx');
}
