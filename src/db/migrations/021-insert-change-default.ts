import { type Kysely, sql } from 'kysely';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/**
 * An insert's sync position comes from the column default of 005 (`pg_current_xact_id()`, the
 * inserting transaction), not from 005's row trigger as well: the service never writes the column,
 * and the trigger cost every inserted row a PL/pgSQL call (pgbench, one connection: 18 of 260 µs
 * per insert). Updates keep the trigger (018's `contacts_record_update`): an update has no default.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`drop trigger contacts_record_change on contacts`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`create trigger contacts_record_change before insert on contacts for each row execute function contacts_record_change()`.execute(
    db,
  );
}
