import { type Kysely, sql } from 'kysely';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/**
 * Owners large enough to need the search grams (019 keeps them only for their contacts). An owner
 * is promoted by the service (src/contacts/large-owners.ts) once the counts of 008 pass
 * LARGE_OWNER_CONTACTS: a row here (ready once every contact of the owner is marked), and
 * `contacts.large_owner` set on each of its contacts, the predicate of the partial index, so an
 * ordinary owner's insert never computes grams.
 *
 * The flag is a table of its own rather than a column of contact_counts: 008's triggers delete and
 * re-insert those rows on every write. Adding a column with a constant default rewrites no row.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`alter table contacts add column large_owner boolean not null default false`.execute(db);
  await db.schema
    .createTable('large_owners')
    .addColumn('owner_id', 'integer', (col) => col.primaryKey().references('users.id').onDelete('cascade'))
    .addColumn('ready', 'boolean', (col) => col.notNull().defaultTo(false))
    .execute();
  // A contact inserted for a promoted owner is marked at the end of its statement (one lookup per
  // statement, not per row: a 10,000-row import of an ordinary owner pays one semi-join).
  await sql`
    create function contacts_mark_large_owner() returns trigger language plpgsql as $$
    begin
      update contacts set large_owner = true
       where id in (select id from changed where owner_id in (select owner_id from large_owners)) and not large_owner;
      return null;
    end $$`.execute(db);
  await sql`
    create trigger contacts_mark_large_owner after insert on contacts
      referencing new table as changed for each statement execute function contacts_mark_large_owner()`.execute(db);
  // Marking a contact is no change of it: 005's trigger would otherwise move its sync position, and
  // every CardDAV client of a promoted owner would fetch every card again.
  await sql`drop trigger contacts_record_change on contacts`.execute(db);
  await sql`create trigger contacts_record_change before insert on contacts for each row execute function contacts_record_change()`.execute(
    db,
  );
  await sql`
    create trigger contacts_record_update before update on contacts
      for each row when (old.large_owner = new.large_owner) execute function contacts_record_change()`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`drop trigger contacts_record_update on contacts`.execute(db);
  await sql`drop trigger contacts_record_change on contacts`.execute(db);
  await sql`create trigger contacts_record_change before insert or update on contacts for each row execute function contacts_record_change()`.execute(
    db,
  );
  await sql`drop trigger contacts_mark_large_owner on contacts`.execute(db);
  await sql`drop function contacts_mark_large_owner()`.execute(db);
  await db.schema.dropTable('large_owners').execute();
  await sql`alter table contacts drop column large_owner`.execute(db);
}
