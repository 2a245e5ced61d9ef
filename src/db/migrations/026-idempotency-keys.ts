import { type Kysely, sql } from 'kysely';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/**
 * The answers of writes sent with an Idempotency-Key (openapi.yaml, "Idempotent retries"), one row
 * per user, operation and key, written in the transaction of the write itself. `id` orders a
 * user's keys by age (the oldest are forgotten first past the user's bounds) and is given anew when
 * an expired key is used again; `answer_bytes` is what the row counts against the user's bytes.
 * `created_at` is the service's clock (app.now), as every expiry the service judges.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('idempotency_keys')
    .addColumn('owner_id', 'integer', (col) => col.notNull().references('users.id').onDelete('cascade'))
    .addColumn('operation', 'text', (col) => col.notNull())
    .addColumn('key', 'text', (col) => col.notNull())
    .addColumn('id', 'bigint', (col) => col.notNull().generatedByDefaultAsIdentity())
    .addColumn('request_hash', 'bytea', (col) => col.notNull())
    .addColumn('status', 'smallint', (col) => col.notNull())
    .addColumn('headers', 'jsonb', (col) => col.notNull())
    // Text, not jsonb: the answer is sent again as it was, object keys in their order.
    .addColumn('body', 'text', (col) => col.notNull())
    .addColumn('answer_bytes', 'integer', (col) => col.notNull())
    .addColumn('created_at', sql`timestamptz(3)`, (col) => col.notNull())
    .addPrimaryKeyConstraint('idempotency_keys_pkey', ['owner_id', 'operation', 'key'])
    .execute();
  // A user's keys newest first, with their sizes, without reading the rows.
  await sql`create index idempotency_keys_owner_age_idx on idempotency_keys (owner_id, id) include (answer_bytes)`.execute(db);
  await sql`create index idempotency_keys_created_at_idx on idempotency_keys (created_at)`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('idempotency_keys').execute();
}
