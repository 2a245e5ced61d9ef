import { type Kysely, sql } from 'kysely';

// Frozen: migrations take Kysely<any>, never the app's Database type.
export async function up(db: Kysely<any>): Promise<void> {
  // Avatars live in the database, so every instance serves every one. A name is used once: an
  // upload inserts a row under a new name and deletes the user's previous one.
  await db.schema
    .createTable('avatars')
    .addColumn('name', 'text', (col) => col.primaryKey())
    .addColumn('user_id', 'integer', (col) => col.notNull().unique().references('users.id').onDelete('cascade'))
    .addColumn('image', 'bytea', (col) => col.notNull())
    .addColumn('created_at', sql`timestamptz(3)`, (col) => col.notNull().defaultTo(sql`now()`))
    .execute();
  // users.avatar names the current image; deleting the image clears it. No API wrote the column
  // before, so any value in it names no image.
  await sql`update users set avatar = null where avatar is not null`.execute(db);
  await sql`alter table users add constraint users_avatar_fkey foreign key (avatar) references avatars (name) on delete set null`.execute(
    db,
  );
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`alter table users drop constraint users_avatar_fkey`.execute(db);
  await db.schema.dropTable('avatars').execute();
}
