import { type Kysely, sql } from 'kysely';
import { createIndex, dropIndex } from './concurrent-index.js';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/** Built CONCURRENTLY on a live table (see 003), so it runs outside a transaction. */
export const transactional = false;

/**
 * The grams of the searched fields, so that counting the matches of a short substring reads one
 * owner's posting lists instead of testing every contact of the owner. A contact's grams are
 * `owner:field:gram` for every run of 1 to 3 characters of each lower-cased field (the field is its
 * position among the arguments: the searched fields of src/contacts/filter-sql.ts as they were when
 * this migration was made). A field holds such a run exactly when its grams hold `owner:field:run`,
 * so a lookup needs no recheck, and a count tests no row. The owner
 * leads every gram, so a lookup reads that owner's entries only.
 *
 * ANALYZE then samples the new expression, so the planner knows how many contacts a gram finds.
 * Scans of contacts are serial from here on: a query reads one owner's rows, and under concurrent
 * requests the start-up of two more workers costs more than they save. The planner would start them
 * for a count of a few hundred grams (npm run bench:scale, 10 concurrent requests for a 3-letter bare
 * term, p99: 106 ms in parallel, 27 ms serial for a 2,000-contact user; 180 and 104 ms for 100,000).
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    create or replace function contact_search_grams(owner_id integer, variadic fields text[]) returns text[]
    language sql immutable parallel safe as $$
      select array(
        select distinct owner_id || ':' || field.position || ':' || substr(field.value, start, gram.length)
          from unnest(fields) with ordinality as field (value, position),
               generate_series(1, char_length(field.value)) as start,
               (values (1), (2), (3)) as gram (length)
         where start + gram.length - 1 <= char_length(field.value))
    $$`.execute(db);
  const fields = ['first_name', 'last_name', 'email', 'phone'].map((column) => sql`lower(${sql.id(column)})`);
  await createIndex(db, 'contacts', 'contacts_owner_grams_idx', sql`using gin (contact_search_grams(owner_id, ${sql.join(fields)}))`);
  await sql`analyze contacts`.execute(db);
  await sql`alter table contacts set (parallel_workers = 0)`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`alter table contacts reset (parallel_workers)`.execute(db);
  await dropIndex(db, 'contacts_owner_grams_idx');
  await sql`drop function if exists contact_search_grams(integer, text[])`.execute(db);
}
