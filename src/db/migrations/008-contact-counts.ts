import { type Kysely, sql } from 'kysely';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/**
 * How many contacts each owner has, kept by statement triggers, so an unfiltered list's
 * X-Total-Count reads a few rows instead of counting the owner's index entries (100,000 of them
 * cost more than the page). A write's change commits with the write, so the list statement sees
 * both in one snapshot.
 *
 * An owner's count is the sum of up to 16 shards, and a write adds to the shard of its connection:
 * with one row per owner, concurrent writes of one owner would queue on it until each commits
 * (pgbench, 50 connections inserting for one owner: 860 inserts/s on one row, 2,270 on 16 shards,
 * 2,830 uncounted).
 */
const SHARDS = 16;

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('contact_counts')
    .addColumn('owner_id', 'integer', (col) => col.notNull().references('users.id').onDelete('cascade'))
    .addColumn('shard', 'smallint', (col) => col.notNull())
    .addColumn('contacts', 'integer', (col) => col.notNull())
    .addPrimaryKeyConstraint('contact_counts_pkey', ['owner_id', 'shard'])
    .execute();
  const shard = sql.raw(`(pg_backend_pid() % ${SHARDS})`);
  await sql`
    create function contacts_count_inserted() returns trigger language plpgsql as $$
    begin
      insert into contact_counts (owner_id, shard, contacts)
        select owner_id, ${shard}, count(*) from inserted group by owner_id
        on conflict (owner_id, shard) do update set contacts = contact_counts.contacts + excluded.contacts;
      return null;
    end $$`.execute(db);
  // The join skips the owners whose deletion is what deletes these contacts: their counts go by
  // the cascade, and a row for them now would break the foreign key.
  await sql`
    create function contacts_count_deleted() returns trigger language plpgsql as $$
    begin
      insert into contact_counts (owner_id, shard, contacts)
        select deleted.owner_id, ${shard}, -count(*) from deleted join users on users.id = deleted.owner_id group by deleted.owner_id
        on conflict (owner_id, shard) do update set contacts = contact_counts.contacts + excluded.contacts;
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
  await sql`insert into contact_counts (owner_id, shard, contacts) select owner_id, 0, count(*) from contacts group by owner_id`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`drop trigger contacts_count_deleted on contacts`.execute(db);
  await sql`drop trigger contacts_count_inserted on contacts`.execute(db);
  await sql`drop function contacts_count_deleted()`.execute(db);
  await sql`drop function contacts_count_inserted()`.execute(db);
  await db.schema.dropTable('contact_counts').execute();
}
