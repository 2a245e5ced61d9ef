import { type Kysely, sql } from 'kysely';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/**
 * How many contacts each owner has, kept by statement triggers, so an unfiltered list's
 * X-Total-Count reads one row instead of counting the owner's index entries (100,000 of them cost
 * more than the page). A write's count change commits with the write, so the list statement sees
 * both in one snapshot. Writes of one owner queue briefly on the owner's row.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('contact_counts')
    .addColumn('owner_id', 'integer', (col) => col.primaryKey().references('users.id').onDelete('cascade'))
    .addColumn('contacts', 'integer', (col) => col.notNull())
    .execute();
  await sql`
    create function contacts_count_inserted() returns trigger language plpgsql as $$
    begin
      insert into contact_counts (owner_id, contacts)
        select owner_id, count(*) from inserted group by owner_id
        on conflict (owner_id) do update set contacts = contact_counts.contacts + excluded.contacts;
      return null;
    end $$`.execute(db);
  await sql`
    create function contacts_count_deleted() returns trigger language plpgsql as $$
    begin
      update contact_counts set contacts = contact_counts.contacts - deletions.contacts
        from (select owner_id, count(*) as contacts from deleted group by owner_id) as deletions
       where contact_counts.owner_id = deletions.owner_id;
      return null;
    end $$`.execute(db);
  await sql`
    create trigger contacts_count_inserted after insert on contacts
      referencing new table as inserted for each statement execute function contacts_count_inserted()`.execute(db);
  await sql`
    create trigger contacts_count_deleted after delete on contacts
      referencing old table as deleted for each statement execute function contacts_count_deleted()`.execute(db);
  // Counted after the triggers exist: creating them locked out writes until this commits, so no
  // contact is counted twice or missed.
  await sql`insert into contact_counts (owner_id, contacts) select owner_id, count(*) from contacts group by owner_id`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`drop trigger contacts_count_deleted on contacts`.execute(db);
  await sql`drop trigger contacts_count_inserted on contacts`.execute(db);
  await sql`drop function contacts_count_deleted()`.execute(db);
  await sql`drop function contacts_count_inserted()`.execute(db);
  await db.schema.dropTable('contact_counts').execute();
}
