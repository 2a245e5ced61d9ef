import { type Kysely, sql } from 'kysely';
import { createIndex, dropIndex } from './concurrent-index.js';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/** Built CONCURRENTLY on a live table (see 003), so it runs outside a transaction. */
export const transactional = false;

/** A delta sync reads one owner's changes in (transaction, id) order from a frontier on. */
export async function up(db: Kysely<any>): Promise<void> {
  await createIndex(db, 'contacts', 'contacts_owner_change_idx', sql`(owner_id, change_xid, id)`);
}

export async function down(db: Kysely<any>): Promise<void> {
  await dropIndex(db, 'contacts_owner_change_idx');
}
