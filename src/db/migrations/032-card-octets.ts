import { type Kysely, sql } from 'kysely';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/**
 * Octets of the card text each owner stores (`card`, migration 013), beside their contact count in
 * the count shards (020), for CARDS_MAX_BYTES_PER_USER (docs/limits.md). A card rendered from a
 * REST contact's fields (`card` null) is stored as no text and counts 0. Inserts and deletes add
 * their octets in the statement triggers that count them; an update of `card` adds the difference
 * in a row trigger (a statement trigger with transition tables cannot name columns, and firing
 * one on every update would cost each REST write).
 */
export async function up(db: Kysely<any>): Promise<void> {
  // As in 020: no write may run between the backfill below and the new triggers.
  await sql`lock table contacts in share row exclusive mode`.execute(db);
  await sql`alter table contact_counts add column card_octets bigint not null default 0`.execute(db);
  await sql`
    insert into contact_counts as counts (owner_id, shard, contacts, card_octets)
      select owner_id, 0, 0, sum(octet_length(card)) from contacts where card is not null group by owner_id
    on conflict (owner_id, shard) do update set card_octets = counts.card_octets + excluded.card_octets`.execute(db);
  await sql`
    create or replace function contacts_count_inserts() returns trigger language plpgsql as $$
    begin
      insert into contact_counts as counts (owner_id, shard, contacts, card_octets)
        select owner_id, contacts_count_shard(), count(*), coalesce(sum(octet_length(card)), 0)
          from changed group by owner_id order by owner_id
      on conflict (owner_id, shard) do update
        set contacts = counts.contacts + excluded.contacts, card_octets = counts.card_octets + excluded.card_octets;
      if exists (select from large_owners where owner_id in (select owner_id from changed)) then
        update contacts set large_owner = true
         where id in (select id from changed where owner_id in (select owner_id from large_owners)) and not large_owner;
      end if;
      return null;
    end $$`.execute(db);
  // Deletes only since 023; the join skips an owner whose deletion is what deletes these contacts.
  await sql`
    create or replace function contacts_count_changes() returns trigger language plpgsql as $$
    begin
      insert into contact_counts as counts (owner_id, shard, contacts, card_octets)
        select owner_id, contacts_count_shard(), -count(*), -coalesce(sum(octet_length(card)), 0)
          from changed join users on users.id = changed.owner_id group by owner_id order by owner_id
      on conflict (owner_id, shard) do update
        set contacts = counts.contacts + excluded.contacts, card_octets = counts.card_octets + excluded.card_octets;
      return null;
    end $$`.execute(db);
  await sql`
    create function contacts_count_card_update() returns trigger language plpgsql as $$
    begin
      insert into contact_counts as counts (owner_id, shard, contacts, card_octets)
        values (new.owner_id, contacts_count_shard(), 0, coalesce(octet_length(new.card), 0) - coalesce(octet_length(old.card), 0))
      on conflict (owner_id, shard) do update set card_octets = counts.card_octets + excluded.card_octets;
      return null;
    end $$`.execute(db);
  await sql`
    create trigger contacts_count_card_update after update of card on contacts
      for each row when (old.card is distinct from new.card) execute function contacts_count_card_update()`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`lock table contacts in share row exclusive mode`.execute(db);
  await sql`drop trigger contacts_count_card_update on contacts`.execute(db);
  await sql`drop function contacts_count_card_update()`.execute(db);
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
  await sql`
    create or replace function contacts_count_inserts() returns trigger language plpgsql as $$
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
  await sql`alter table contact_counts drop column card_octets`.execute(db);
}
