import { type Kysely, sql } from 'kysely';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/**
 * One statement trigger after an insert, not two: it adds the new rows to their owners' counts
 * (020's shards) and marks them when their owner is large (018), looking that up once. An insert's
 * owner exists (the foreign key is checked before statement triggers fire), so it needs no join
 * with users, which is for deletes. pgbench, 8 connections, one owner's single-row inserts as the
 * service sends them: 5,540 → 5,760 per second.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    create function contacts_count_inserts() returns trigger language plpgsql as $$
    begin
      insert into contact_counts as counts (owner_id, shard, contacts)
        select owner_id, contacts_count_shard(), count(*) from changed group by owner_id order by owner_id
      on conflict (owner_id, shard) do update set contacts = counts.contacts + excluded.contacts;
      if exists (select from large_owners where owner_id in (select owner_id from changed)) then
        update contacts set large_owner = true
         where id in (select id from changed where owner_id in (select owner_id from large_owners)) and not large_owner;
      end if;
      return null;
    end $$`.execute(db);
  await sql`drop trigger contacts_mark_large_owner on contacts`.execute(db);
  await sql`drop function contacts_mark_large_owner()`.execute(db);
  await sql`drop trigger contacts_count_insert on contacts`.execute(db);
  await sql`
    create trigger contacts_count_insert after insert on contacts
      referencing new table as changed for each statement execute function contacts_count_inserts()`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`drop trigger contacts_count_insert on contacts`.execute(db);
  await sql`drop function contacts_count_inserts()`.execute(db);
  await sql`
    create trigger contacts_count_insert after insert on contacts
      referencing new table as changed for each statement execute function contacts_count_changes()`.execute(db);
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
}
