import { type Kysely, sql } from 'kysely';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/**
 * Sync positions that belong to the owner, not to a database node: each owner's address book has a
 * change counter (as SabreDAV's per-book sync token), advanced by a row trigger in the transaction
 * of each change, which stores it in the changed row (`change_position`) or in the tombstone of a
 * deleted one. A transaction id (005) means something on one node only: after a failover, or with
 * the table sharded by owner over several nodes, a later change could get a lower one and a delta
 * sync would skip it. The book's row also keeps the owner's exact counts (replacing 008, 020 and
 * 032's statement triggers, which sharded tables cannot run), and its row lock orders the owner's
 * writes: the next write waits until the last commits, so positions commit in order and a
 * snapshot that sees position N sees every position up to N (docs/carddav.md).
 *
 * Every trigger reads and writes only rows of the changed contact's owner, and every key includes
 * the owner, so the tables can be sharded by owner. Existing rows get positions per owner in the
 * order of their transactions; tokens handed out before carry transaction ids, which the service
 * refuses as expired (a full sync), so none of them is compared with a position.
 *
 * An insert's position and counts come from its BEFORE trigger, which runs also for a row that
 * `ON CONFLICT` then skips: the service never skips one (an import leaves out the e-mails the
 * owner has, under the book's lock), and nothing else may insert contacts that way.
 */
export async function up(db: Kysely<any>): Promise<void> {
  // No write may run between the counts and positions filled below and the new triggers.
  await sql`lock table contacts, contact_tombstones in share row exclusive mode`.execute(db);
  for (const [trigger, table] of [
    ['contacts_record_update', 'contacts'],
    ['contacts_record_deletion', 'contacts'],
    ['contacts_count_insert', 'contacts'],
    ['contacts_count_delete', 'contacts'],
    ['contacts_count_truncate', 'contacts'],
    ['contacts_count_card_update', 'contacts'],
    ['users_drop_contact_counts', 'users'],
  ] as const) {
    await sql`drop trigger ${sql.id(trigger)} on ${sql.id(table)}`.execute(db);
  }
  for (const fn of [
    'contacts_record_change',
    'contacts_record_deletion',
    'contacts_count_changes',
    'contacts_count_inserts',
    'contacts_count_truncate',
    'users_drop_contact_counts',
    'contacts_count_shard',
    'contacts_count_card_update',
  ]) {
    await sql`drop function ${sql.id(fn)}()`.execute(db);
  }

  await db.schema
    .createTable('address_books')
    .addColumn('owner_id', 'integer', (col) => col.primaryKey().references('users.id').onDelete('cascade'))
    // The position of the owner's latest change; 0 before the first.
    .addColumn('sync_position', 'bigint', (col) => col.notNull().defaultTo(0))
    .addColumn('contacts', 'integer', (col) => col.notNull().defaultTo(0))
    // Octets of the stored card text (`card`, 013), for CARDS_MAX_BYTES_PER_USER; a rendered card counts none.
    .addColumn('card_octets', 'bigint', (col) => col.notNull().defaultTo(0))
    .execute();
  await sql`
    insert into address_books (owner_id, contacts, card_octets)
    select counts.owner_id, sum(counts.contacts), sum(counts.card_octets)
      from contact_counts counts join users on users.id = counts.owner_id
     group by counts.owner_id`.execute(db);
  await db.schema.dropTable('contact_counts').execute();

  // A deleted user's tombstones (the service deletes them with the user) would have no book.
  await sql`delete from contact_tombstones where owner_id not in (select id from users)`.execute(db);
  await sql`alter table contacts add column change_position bigint`.execute(db);
  await sql`alter table contact_tombstones add column change_position bigint`.execute(db);
  await sql`
    with changes as (
      select owner_id, id, false as deleted, change_xid from contacts
      union all
      select owner_id, contact_id, true, change_xid from contact_tombstones
    ),
    numbered as (
      select owner_id, id, deleted, row_number() over (partition by owner_id order by change_xid, id, deleted) as position from changes
    ),
    tombstones as (
      update contact_tombstones set change_position = numbered.position from numbered
       where numbered.deleted and contact_tombstones.owner_id = numbered.owner_id and contact_tombstones.contact_id = numbered.id
    )
    update contacts set change_position = numbered.position from numbered
     where not numbered.deleted and contacts.owner_id = numbered.owner_id and contacts.id = numbered.id`.execute(db);
  await sql`
    insert into address_books as books (owner_id, sync_position)
    select owner_id, max(change_position) from (
      select owner_id, change_position from contacts
      union all
      select owner_id, change_position from contact_tombstones
    ) changes group by owner_id
    on conflict (owner_id) do update set sync_position = excluded.sync_position`.execute(db);
  for (const table of ['contacts', 'contact_tombstones']) {
    await sql`alter table ${sql.id(table)} alter column change_position set not null, drop column change_xid`.execute(db);
  }

  // Every token that named a purged tombstone's transaction is refused now, and every position
  // handed out from now on is above those of the rows still kept: 0 refuses none of them.
  await sql`alter table tombstone_horizons add column purged_position bigint not null default 0, drop column purged_xid`.execute(db);
  await sql`alter table tombstone_horizons alter column purged_position drop default`.execute(db);

  // Keys with the owner. An id stays unique by its identity alone; (owner_id, id) also serves what
  // 002's (owner_id, id) index did.
  await sql`alter table contacts drop constraint contacts_pkey, add constraint contacts_pkey primary key (owner_id, id)`.execute(db);
  await sql`drop index contacts_owner_id_idx`.execute(db);
  await sql`
    alter table contact_tombstones
      drop constraint contact_tombstones_pkey, add constraint contact_tombstones_pkey primary key (owner_id, contact_id)`.execute(db);
  // A delta sync reads one owner's changes in (position, id) order from a frontier on; the purge
  // one owner's tombstones by age.
  await sql`create index contacts_owner_change_idx on contacts (owner_id, change_position, id)`.execute(db);
  await sql`create index contact_tombstones_owner_change_idx on contact_tombstones (owner_id, change_position, contact_id)`.execute(db);
  await sql`drop index contact_tombstones_deleted_at_idx`.execute(db);
  await sql`create index contact_tombstones_owner_deleted_at_idx on contact_tombstones (owner_id, deleted_at)`.execute(db);

  // Moves the owner's book to its next position, adding to its counts; null when the owner has no
  // book. The row as this transaction last wrote it is found by its ctid, not through the index,
  // whose entries for every version the transaction wrote would be walked again on each write (one
  // statement inserting 30,000 rows into a table of two columns: 5.3 s that way, 0.65 s this way).
  await sql`
    create function address_books_advance(owner integer, added integer, octets bigint) returns bigint language plpgsql as $$
    declare
      cached text[] := string_to_array(nullif(current_setting('contacts.address_book', true), ''), '/');
      written tid;
      advanced bigint;
    begin
      if cached[1]::integer = owner then
        update address_books
           set sync_position = sync_position + 1, contacts = contacts + added, card_octets = card_octets + octets
         where owner_id = owner and ctid = cached[2]::tid
        returning sync_position, ctid into advanced, written;
      end if;
      if written is null then
        update address_books
           set sync_position = sync_position + 1, contacts = contacts + added, card_octets = card_octets + octets
         where owner_id = owner
        returning sync_position, ctid into advanced, written;
      end if;
      if written is not null then
        perform set_config('contacts.address_book', owner || '/' || written, true);
      end if;
      return advanced;
    end $$`.execute(db);
  // An insert: the book's next position and counts (the book is made by the owner's first
  // contact), and the large-owner mark (018), read once the book's lock is held, so a promotion
  // that took that lock after adding the owner is seen (src/contacts/large-owners.ts).
  await sql`
    create function contacts_book_insert() returns trigger language plpgsql as $$
    begin
      new.change_position := address_books_advance(new.owner_id, 1, coalesce(octet_length(new.card), 0));
      if new.change_position is null then
        insert into address_books as books (owner_id, sync_position, contacts, card_octets)
          values (new.owner_id, 1, 1, coalesce(octet_length(new.card), 0))
        on conflict (owner_id) do update
          set sync_position = books.sync_position + 1, contacts = books.contacts + 1, card_octets = books.card_octets + excluded.card_octets
        returning sync_position into new.change_position;
      end if;
      perform from large_owners where owner_id = new.owner_id;
      new.large_owner := new.large_owner or found;
      return new;
    end $$`.execute(db);
  await sql`create trigger contacts_book_insert before insert on contacts for each row execute function contacts_book_insert()`.execute(db);
  // An update: the next position, and the card's change of octets. Marking a contact of a large
  // owner (018) is no change of it, and moves nothing.
  await sql`
    create function contacts_book_update() returns trigger language plpgsql as $$
    begin
      new.change_position := address_books_advance(new.owner_id, 0, coalesce(octet_length(new.card), 0) - coalesce(octet_length(old.card), 0));
      return new;
    end $$`.execute(db);
  await sql`
    create trigger contacts_book_update before update on contacts
      for each row when (old.large_owner = new.large_owner) execute function contacts_book_update()`.execute(db);
  // A deletion: the next position, the counts, and the tombstone at that position (016's card
  // name kept). A book already gone is its owner's deletion (src/users/account.repository.ts),
  // which needs no tombstones.
  await sql`
    create function contacts_book_delete() returns trigger language plpgsql as $$
    declare
      deleted_at_position bigint := address_books_advance(old.owner_id, -1, -coalesce(octet_length(old.card), 0));
    begin
      if deleted_at_position is not null then
        insert into contact_tombstones (owner_id, contact_id, card_name, change_position)
          values (old.owner_id, old.id, old.card_name, deleted_at_position);
      end if;
      return old;
    end $$`.execute(db);
  await sql`create trigger contacts_book_delete after delete on contacts for each row execute function contacts_book_delete()`.execute(db);
}

/** Back to 032's transaction ids and count shards; the positions are lost, the counts summed again. */
export async function down(db: Kysely<any>): Promise<void> {
  await sql`lock table contacts, contact_tombstones in share row exclusive mode`.execute(db);
  for (const event of ['insert', 'update', 'delete']) {
    await sql`drop trigger ${sql.id(`contacts_book_${event}`)} on contacts`.execute(db);
    await sql`drop function ${sql.id(`contacts_book_${event}`)}()`.execute(db);
  }
  await sql`drop function address_books_advance(integer, integer, bigint)`.execute(db);
  await sql`drop index contact_tombstones_owner_deleted_at_idx`.execute(db);
  await sql`create index contact_tombstones_deleted_at_idx on contact_tombstones (deleted_at)`.execute(db);
  await sql`alter table contact_tombstones drop constraint contact_tombstones_pkey, add constraint contact_tombstones_pkey primary key (contact_id)`.execute(
    db,
  );
  await sql`create index contacts_owner_id_idx on contacts (owner_id, id)`.execute(db);
  await sql`alter table contacts drop constraint contacts_pkey, add constraint contacts_pkey primary key (id)`.execute(db);
  await sql`alter table tombstone_horizons add column purged_xid xid8 not null default '0', drop column purged_position`.execute(db);
  await sql`alter table tombstone_horizons alter column purged_xid drop default`.execute(db);
  for (const table of ['contacts', 'contact_tombstones']) {
    await sql`alter table ${sql.id(table)} add column change_xid xid8 not null default pg_current_xact_id(), drop column change_position`.execute(
      db,
    );
  }
  await sql`create index contacts_owner_change_idx on contacts (owner_id, change_xid, id)`.execute(db);
  await sql`create index contact_tombstones_owner_change_idx on contact_tombstones (owner_id, change_xid, contact_id)`.execute(db);

  await db.schema
    .createTable('contact_counts')
    .addColumn('owner_id', 'integer', (col) => col.notNull())
    .addColumn('contacts', 'integer', (col) => col.notNull())
    .addColumn('shard', 'integer', (col) => col.notNull())
    .addColumn('card_octets', 'bigint', (col) => col.notNull().defaultTo(0))
    .execute();
  await db.schema.createIndex('contact_counts_owner_shard_key').on('contact_counts').columns(['owner_id', 'shard']).unique().execute();
  await sql`insert into contact_counts (owner_id, shard, contacts, card_octets) select owner_id, 0, contacts, card_octets from address_books`.execute(
    db,
  );
  await db.schema.dropTable('address_books').execute();

  await sql`
    create function contacts_record_change() returns trigger language plpgsql as $$
    begin
      new.change_xid := pg_current_xact_id();
      return new;
    end $$`.execute(db);
  await sql`
    create trigger contacts_record_update before update on contacts
      for each row when (old.large_owner = new.large_owner) execute function contacts_record_change()`.execute(db);
  await sql`
    create function contacts_record_deletion() returns trigger language plpgsql as $$
    begin
      insert into contact_tombstones (contact_id, owner_id, card_name) values (old.id, old.owner_id, old.card_name);
      return old;
    end $$`.execute(db);
  await sql`create trigger contacts_record_deletion after delete on contacts for each row execute function contacts_record_deletion()`.execute(
    db,
  );
  await sql`
    create function contacts_count_shard() returns integer language plpgsql as $$
    declare
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
    create function contacts_count_inserts() returns trigger language plpgsql as $$
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
  await sql`
    create trigger contacts_count_insert after insert on contacts
      referencing new table as changed for each statement execute function contacts_count_inserts()`.execute(db);
  await sql`
    create function contacts_count_changes() returns trigger language plpgsql as $$
    begin
      insert into contact_counts as counts (owner_id, shard, contacts, card_octets)
        select owner_id, contacts_count_shard(), -count(*), -coalesce(sum(octet_length(card)), 0)
          from changed join users on users.id = changed.owner_id group by owner_id order by owner_id
      on conflict (owner_id, shard) do update
        set contacts = counts.contacts + excluded.contacts, card_octets = counts.card_octets + excluded.card_octets;
      return null;
    end $$`.execute(db);
  await sql`
    create trigger contacts_count_delete after delete on contacts
      referencing old table as changed for each statement execute function contacts_count_changes()`.execute(db);
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
}
