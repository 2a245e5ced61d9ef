import { type Kysely, sql } from 'kysely';
import { createIndex, dropIndex } from './concurrent-index.js';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/** Built CONCURRENTLY on a live table (see 003), so it runs outside a transaction. */
export const transactional = false;

/**
 * The bare search term's index: per owner in id order, the searched fields lower-cased and joined
 * by U+001F (the search key of src/contacts/filter-sql.ts, written out here as it was when this
 * migration was made), with the fields themselves included so that PostgreSQL reads the key from
 * the index instead of lower-casing four columns of every row. A term is then one substring test
 * per index entry of the owner, and a page in id order stops at skip + limit matches.
 */
export async function up(db: Kysely<any>): Promise<void> {
  const key = sql.join(
    ['first_name', 'last_name', 'email', 'phone'].map((column) => sql`coalesce(lower(${sql.id(column)}), '')`),
    sql` || ${sql.lit('\u001f')} || `,
  );
  await createIndex(
    db,
    'contacts',
    'contacts_owner_search_idx',
    sql`(owner_id, id, (${key}) collate "C") include (first_name, last_name, email, phone)`,
  );
}

export async function down(db: Kysely<any>): Promise<void> {
  await dropIndex(db, 'contacts_owner_search_idx');
}
