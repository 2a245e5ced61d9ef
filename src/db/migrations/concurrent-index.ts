import { type Kysely, type RawBuilder, sql } from 'kysely';

// Used by migrations that export `transactional = false`; frozen with them.

/**
 * CREATE INDEX CONCURRENTLY unless a valid index of that name exists. A CONCURRENTLY build that
 * failed leaves an INVALID index behind under the name (unused by queries, yet maintained on every
 * write): it is dropped first, so an interrupted run is finished by the next.
 */
export async function createIndex(db: Kysely<any>, table: string, name: string, definition: RawBuilder<unknown>): Promise<void> {
  const { rows } = await sql<{ valid: boolean }>`
    select i.indisvalid as valid
      from pg_index i join pg_class c on c.oid = i.indexrelid
     where c.relname = ${name} and c.relnamespace = current_schema()::regnamespace`.execute(db);
  if (rows[0]?.valid) return;
  if (rows[0]) await sql`drop index concurrently ${sql.id(name)}`.execute(db);
  await sql`create index concurrently ${sql.id(name)} on ${sql.id(table)} ${definition}`.execute(db);
}

export async function dropIndex(db: Kysely<any>, name: string): Promise<void> {
  await sql`drop index concurrently if exists ${sql.id(name)}`.execute(db);
}
