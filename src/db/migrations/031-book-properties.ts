import type { Kysely } from 'kysely';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/**
 * The dead properties a CardDAV client set on a user's address book with PROPPATCH (RFC 4918 §9.2;
 * docs/carddav.md), `DAV:displayname` among them: one row per property, its content as JSON of the
 * element's text, attributes and children. `bytes` is what the row counts against the book's bound.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('book_properties')
    .addColumn('owner_id', 'integer', (col) => col.notNull().references('users.id').onDelete('cascade'))
    .addColumn('ns', 'text', (col) => col.notNull())
    .addColumn('name', 'text', (col) => col.notNull())
    .addColumn('value', 'text', (col) => col.notNull())
    .addColumn('bytes', 'integer', (col) => col.notNull())
    .addPrimaryKeyConstraint('book_properties_pkey', ['owner_id', 'ns', 'name'])
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('book_properties').execute();
}
