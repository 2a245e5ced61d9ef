import { type Kysely, sql } from 'kysely';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/**
 * Per-device passwords for CardDAV clients (docs/carddav.md). Only a keyed hash of each is kept
 * (HMAC-SHA-256), unique across all users: a request is checked by one lookup of that hash.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('app_passwords')
    .addColumn('id', 'integer', (col) => col.primaryKey().generatedAlwaysAsIdentity())
    .addColumn('user_id', 'integer', (col) => col.notNull().references('users.id').onDelete('cascade'))
    .addColumn('name', 'text', (col) => col.notNull())
    .addColumn('secret_hash', 'bytea', (col) => col.notNull().unique())
    .addColumn('created_at', sql`timestamptz(3)`, (col) => col.notNull().defaultTo(sql`now()`))
    .addColumn('last_used_at', sql`timestamptz(3)`)
    .execute();
  await sql`create index app_passwords_user_id_idx on app_passwords (user_id, id)`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('app_passwords').execute();
}
