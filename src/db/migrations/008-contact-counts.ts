import { type Kysely, sql } from 'kysely';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/**
 * How many contacts each owner has, kept by statement triggers, so an unfiltered list's
 * X-Total-Count reads a few rows instead of counting the owner's index entries (100,000 of them
 * cost more than the page). A write's change commits with the write, so the list statement sees
 * both in one snapshot.
 *
 * An owner's count is the sum of their rows, and no write ever waits on one: each statement adds a
 * row with its change, then merges the owner's rows into one, skipping rows that another
 * transaction is merging. A single row updated in place would make one owner's concurrent writes
 * queue on it until each commits, and could deadlock an import with a create that waits on it
 * (pgbench, 50 connections inserting for one owner: 860 inserts/s on one row, 1,320 this way,
 * 2,830 uncounted).
 *
 * No foreign key to users, as with the tombstones (005): checking it would lock the user's row
 * on every write. A user's deletion removes their rows; the cascade to their contacts adds none.
 */
export async function up(db: Kysely<any>): Promise<void> {
  // Taken first, so the count below comes after any write that began before it.
  await sql`lock table contacts in share row exclusive mode`.execute(db);
  await db.schema
    .createTable('contact_counts')
    .addColumn('owner_id', 'integer', (col) => col.notNull())
    .addColumn('contacts', 'integer', (col) => col.notNull())
    .execute();
  await db.schema.createIndex('contact_counts_owner_idx').on('contact_counts').column('owner_id').execute();
  await sql`
    create function contacts_count_changes() returns trigger language plpgsql as $$
    begin
      -- The join skips an owner whose deletion is what deletes these contacts.
      insert into contact_counts (owner_id, contacts)
        select owner_id, case tg_op when 'INSERT' then count(*) else -count(*) end
          from changed join users on users.id = changed.owner_id group by owner_id;
      with merged as (
        delete from contact_counts where ctid = any (array(
          select ctid from contact_counts where owner_id in (select owner_id from changed) for update skip locked))
        returning owner_id, contacts)
      insert into contact_counts (owner_id, contacts) select owner_id, sum(contacts) from merged group by owner_id;
      return null;
    end $$`.execute(db);
  for (const [event, table] of [
    ['insert', 'new'],
    ['delete', 'old'],
  ] as const) {
    await sql`
      create trigger ${sql.id(`contacts_count_${event}`)} after ${sql.raw(event)} on contacts
        referencing ${sql.raw(table)} table as changed for each statement execute function contacts_count_changes()`.execute(db);
  }
  await sql`
    create function contacts_count_truncate() returns trigger language plpgsql as $$
    begin
      delete from contact_counts;
      return null;
    end $$`.execute(db);
  await sql`create trigger contacts_count_truncate after truncate on contacts for each statement execute function contacts_count_truncate()`.execute(
    db,
  );
  await sql`
    create function users_drop_contact_counts() returns trigger language plpgsql as $$
    begin
      delete from contact_counts where owner_id in (select id from deleted);
      return null;
    end $$`.execute(db);
  await sql`
    create trigger users_drop_contact_counts after delete on users
      referencing old table as deleted for each statement execute function users_drop_contact_counts()`.execute(db);
  // A contact moved to another owner would be counted for the wrong one; nothing moves them.
  await sql`
    create function contacts_keep_owner() returns trigger language plpgsql as $$
    begin
      raise exception 'a contact cannot change owner';
    end $$`.execute(db);
  await sql`
    create trigger contacts_keep_owner before update of owner_id on contacts
      for each row when (old.owner_id is distinct from new.owner_id) execute function contacts_keep_owner()`.execute(db);
  await sql`insert into contact_counts (owner_id, contacts) select owner_id, count(*) from contacts group by owner_id`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`drop trigger contacts_keep_owner on contacts`.execute(db);
  await sql`drop function contacts_keep_owner()`.execute(db);
  await sql`drop trigger users_drop_contact_counts on users`.execute(db);
  await sql`drop function users_drop_contact_counts()`.execute(db);
  await sql`drop trigger contacts_count_truncate on contacts`.execute(db);
  await sql`drop function contacts_count_truncate()`.execute(db);
  await sql`drop trigger contacts_count_delete on contacts`.execute(db);
  await sql`drop trigger contacts_count_insert on contacts`.execute(db);
  await sql`drop function contacts_count_changes()`.execute(db);
  await db.schema.dropTable('contact_counts').execute();
}
