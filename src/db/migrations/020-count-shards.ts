import { type Kysely, sql } from 'kysely';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/**
 * 008's counts without its merge. 008 made every write add a row and then delete and re-insert the
 * owner's rows: four statements per write, and dead rows that slowed each later write until a
 * vacuum (pgbench, 8 connections inserting for one owner: 2,320 inserts/s falling to 1,240 within
 * 20 s). Now each statement adds its change in place to the owner's row of its database session's
 * shard: one upsert, a HOT update (4,900 inserts/s, steady).
 *
 * A session's shard is the lowest number whose session-level advisory lock (first key 22) it could
 * take, so two sessions never share one: no write waits on another transaction that changed the
 * same owner's count, as under 008. An owner has at most one row per session that ever wrote for
 * it at once, and the count is still their sum.
 */
export async function up(db: Kysely<any>): Promise<void> {
  // No write may run between the merge below and the new trigger: the lock waits for writes in
  // flight and holds back new ones for the moment this takes (contact_counts has a row or a few per owner).
  await sql`lock table contacts in share row exclusive mode`.execute(db);
  await sql`alter table contact_counts add column shard integer not null default 0`.execute(db);
  await sql`
    with merged as (delete from contact_counts returning owner_id, contacts)
    insert into contact_counts (owner_id, contacts) select owner_id, sum(contacts) from merged group by owner_id`.execute(db);
  await sql`alter table contact_counts alter column shard drop default`.execute(db);
  // Built inside the lock, on a table of a row per owner: no CONCURRENTLY is needed for its moment.
  await db.schema.createIndex('contact_counts_owner_shard_key').on('contact_counts').columns(['owner_id', 'shard']).unique().execute();
  await db.schema.dropIndex('contact_counts_owner_idx').execute();
  await sql`
    create function contacts_count_shard() returns integer language plpgsql as $$
    declare
      -- Unset, or emptied by the rollback of the transaction that set it: '' then.
      shard integer := nullif(current_setting('contacts.count_shard', true), '')::integer;
    begin
      if shard is null then
        shard := 0;
        while not pg_try_advisory_lock(22, shard) loop
          shard := shard + 1;
        end loop;
        perform set_config('contacts.count_shard', shard::text, false);
      end if;
      return shard;
    end $$`.execute(db);
  await sql`
    create or replace function contacts_count_changes() returns trigger language plpgsql as $$
    begin
      -- The join skips an owner whose deletion is what deletes these contacts; the order keeps
      -- two many-owner statements from locking the same rows in opposite orders.
      insert into contact_counts as counts (owner_id, shard, contacts)
        select owner_id, contacts_count_shard(), case tg_op when 'INSERT' then count(*) else -count(*) end
          from changed join users on users.id = changed.owner_id group by owner_id order by owner_id
      on conflict (owner_id, shard) do update set contacts = counts.contacts + excluded.contacts;
      return null;
    end $$`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`lock table contacts in share row exclusive mode`.execute(db);
  await sql`
    create or replace function contacts_count_changes() returns trigger language plpgsql as $$
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
  await sql`drop function contacts_count_shard()`.execute(db);
  await db.schema.createIndex('contact_counts_owner_idx').on('contact_counts').column('owner_id').execute();
  await db.schema.dropIndex('contact_counts_owner_shard_key').execute();
  await sql`
    with merged as (delete from contact_counts returning owner_id, contacts)
    insert into contact_counts (owner_id, shard, contacts) select owner_id, 0, sum(contacts) from merged group by owner_id`.execute(db);
  await sql`alter table contact_counts drop column shard`.execute(db);
}
