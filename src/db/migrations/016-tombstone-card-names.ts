import { type Kysely, sql } from 'kysely';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/**
 * A deleted card's resource name, for the CardDAV sync-collection that reports it gone: a name its
 * client chose is kept with the tombstone (null for a contact whose name was derived from its id).
 * Only deletions write it: creates and updates pay nothing.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`alter table contact_tombstones add column card_name text`.execute(db);
  await sql`
    create or replace function contacts_record_deletion() returns trigger language plpgsql as $$
    begin
      insert into contact_tombstones (contact_id, owner_id, card_name) values (old.id, old.owner_id, old.card_name);
      return old;
    end $$`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    create or replace function contacts_record_deletion() returns trigger language plpgsql as $$
    begin
      insert into contact_tombstones (contact_id, owner_id) values (old.id, old.owner_id);
      return old;
    end $$`.execute(db);
  await sql`alter table contact_tombstones drop column card_name`.execute(db);
}
