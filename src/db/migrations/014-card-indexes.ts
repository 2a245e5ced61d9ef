import { type Kysely, type RawBuilder, sql } from 'kysely';
import { dropIndex } from './concurrent-index.js';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/** Built CONCURRENTLY on a live table (see 003), so it runs outside a transaction. */
export const transactional = false;

/** CREATE UNIQUE INDEX CONCURRENTLY unless a valid one of that name exists; an invalid leftover of an interrupted run is rebuilt. */
async function createUniqueIndex(db: Kysely<any>, name: string, definition: RawBuilder<unknown>): Promise<void> {
  const { rows } = await sql<{ valid: boolean }>`
    select i.indisvalid as valid
      from pg_index i join pg_class c on c.oid = i.indexrelid
     where c.relname = ${name} and c.relnamespace = current_schema()::regnamespace`.execute(db);
  if (rows[0]?.valid) return;
  if (rows[0]) await sql`drop index concurrently ${sql.id(name)}`.execute(db);
  await sql`create unique index concurrently ${sql.id(name)} on contacts ${definition}`.execute(db);
}

/**
 * A card's resource name and its UID are unique in its owner's book. Partial: only cards a CardDAV
 * client stored have either, so a REST create adds no entry to these indexes.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await createUniqueIndex(db, 'contacts_owner_card_name_key', sql`(owner_id, card_name) where card_name is not null`);
  await createUniqueIndex(db, 'contacts_owner_uid_key', sql`(owner_id, uid) where uid is not null`);
}

export async function down(db: Kysely<any>): Promise<void> {
  await dropIndex(db, 'contacts_owner_uid_key');
  await dropIndex(db, 'contacts_owner_card_name_key');
}
