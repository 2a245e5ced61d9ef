import { type Kysely, sql } from 'kysely';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/**
 * How far each owner's tombstones have been purged: the newest change_xid a purge removed. A
 * CardDAV sync token is refused only when a tombstone it would have to report is gone (its
 * frontier is at or below this), never merely for being old (docs/carddav.md). One row per owner
 * that ever lost a tombstone; no foreign key, like the tombstones (005).
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('tombstone_horizons')
    .addColumn('owner_id', 'integer', (col) => col.primaryKey())
    .addColumn('purged_xid', sql`xid8`, (col) => col.notNull())
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('tombstone_horizons').execute();
}
