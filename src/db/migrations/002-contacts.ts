import { type Kysely, sql } from 'kysely';

// Frozen: migrations take Kysely<any>, never the app's Database type.
export async function up(db: Kysely<any>): Promise<void> {
  await sql`create extension if not exists pg_trgm`.execute(db);
  await db.schema
    .createTable('contacts')
    .addColumn('id', 'integer', (col) => col.primaryKey().generatedAlwaysAsIdentity())
    .addColumn('owner_id', 'integer', (col) => col.notNull().references('users.id').onDelete('cascade'))
    .addColumn('first_name', 'text', (col) => col.notNull())
    .addColumn('last_name', 'text', (col) => col.notNull())
    .addColumn('email', 'text', (col) => col.notNull())
    .addColumn('phone', 'text', (col) => col.notNull())
    .addColumn('birthday', 'date', (col) => col.notNull())
    .addColumn('additional_data', 'jsonb')
    .addColumn('created_at', sql`timestamptz(3)`, (col) => col.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', sql`timestamptz(3)`, (col) => col.notNull().defaultTo(sql`now()`))
    // month * 100 + day: the birthday's place in any year, so upcoming birthdays are a range scan.
    .addColumn('birthday_key', 'smallint', (col) =>
      col
        .notNull()
        .generatedAlwaysAs(sql`(extract(month from birthday) * 100 + extract(day from birthday))::smallint`)
        .stored(),
    )
    .execute();

  // Listing in id order, and the owner scope every other query starts from.
  await sql`create index contacts_owner_id_idx on contacts (owner_id, id)`.execute(db);
  await sql`create unique index contacts_owner_email_key on contacts (owner_id, lower(email))`.execute(db);
  // Equality and case-sensitive prefix filters (text_pattern_ops serves LIKE 'abc%' under any collation).
  for (const column of ['first_name', 'last_name', 'email', 'phone']) {
    await sql`create index ${sql.id(`contacts_owner_${column}_idx`)} on contacts (owner_id, ${sql.id(column)} text_pattern_ops)`.execute(
      db,
    );
    // contains / endswith / ilike / bare-term search.
    await sql`create index ${sql.id(`contacts_${column}_trgm_idx`)} on contacts using gin (${sql.id(column)} gin_trgm_ops)`.execute(db);
  }
  await sql`create index contacts_owner_birthday_idx on contacts (owner_id, birthday)`.execute(db);
  await sql`create index contacts_owner_birthday_key_idx on contacts (owner_id, birthday_key)`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('contacts').execute();
}
