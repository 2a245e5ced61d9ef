import { type Kysely, sql } from 'kysely';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/**
 * What incremental sync reads (src/contacts/sync.service.ts): each contact row carries the id of
 * the transaction that last wrote it, and a deleted contact leaves a tombstone with the deleting
 * transaction's id. Triggers set both, so no write path (the API, an import, a tool in psql) can
 * forget them. The column's default is stable, so adding it rewrites no row.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`alter table contacts add column change_xid xid8 not null default pg_current_xact_id()`.execute(db);
  await sql`
    create function contacts_record_change() returns trigger language plpgsql as $$
    begin
      new.change_xid := pg_current_xact_id();
      return new;
    end $$`.execute(db);
  await sql`create trigger contacts_record_change before insert or update on contacts for each row execute function contacts_record_change()`.execute(
    db,
  );

  // No foreign key to users: a user's deletion cascades to their contacts, whose tombstones would
  // then point at a user already gone. Tombstones are purged by age (SYNC_TOMBSTONE_DAYS) whenever a sync runs.
  await db.schema
    .createTable('contact_tombstones')
    .addColumn('contact_id', 'integer', (col) => col.primaryKey())
    .addColumn('owner_id', 'integer', (col) => col.notNull())
    .addColumn('change_xid', sql`xid8`, (col) => col.notNull().defaultTo(sql`pg_current_xact_id()`))
    .addColumn('deleted_at', sql`timestamptz(3)`, (col) => col.notNull().defaultTo(sql`now()`))
    .execute();
  await sql`create index contact_tombstones_owner_change_idx on contact_tombstones (owner_id, change_xid, contact_id)`.execute(db);
  await sql`create index contact_tombstones_deleted_at_idx on contact_tombstones (deleted_at)`.execute(db);
  await sql`
    create function contacts_record_deletion() returns trigger language plpgsql as $$
    begin
      insert into contact_tombstones (contact_id, owner_id) values (old.id, old.owner_id);
      return old;
    end $$`.execute(db);
  await sql`create trigger contacts_record_deletion after delete on contacts for each row execute function contacts_record_deletion()`.execute(
    db,
  );
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`drop trigger contacts_record_deletion on contacts`.execute(db);
  await sql`drop function contacts_record_deletion()`.execute(db);
  await db.schema.dropTable('contact_tombstones').execute();
  await sql`drop trigger contacts_record_change on contacts`.execute(db);
  await sql`drop function contacts_record_change()`.execute(db);
  await sql`alter table contacts drop column change_xid`.execute(db);
}
