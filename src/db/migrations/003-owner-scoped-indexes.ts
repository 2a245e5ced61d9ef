import { type Kysely, type RawBuilder, sql } from 'kysely';
import { createIndex, dropIndex } from './concurrent-index.js';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/**
 * Built with CREATE INDEX CONCURRENTLY, which cannot run in a transaction: reads and writes go on
 * while each index builds. Every step is safe to repeat, so a run that was interrupted (a lost
 * connection, a deadlock) is finished by the next start.
 */
export const transactional = false;

const TEXT_COLUMNS = ['first_name', 'last_name', 'email', 'phone'] as const;

/**
 * Every index leads with owner_id, so a query reads one owner's entries only. Text columns are
 * keyed by `lower(column) collate "C"`: the filters compare that (ilike is lower(value) LIKE
 * lower(pattern), so the lower-casing is stored, not redone per row), and it is the first key of
 * the list's text sort order (openapi.yaml's `sort` parameter: lower(value), then the value, byte-wise, then id).
 */
const CREATED: [name: string, definition: RawBuilder<unknown>][] = [
  ...TEXT_COLUMNS.flatMap((column): [string, RawBuilder<unknown>][] => [
    // eq / in_ / startswith and patterns with a literal prefix (a range of the key); any other
    // filter on the column (contains, endswith, ilike) reads the owner's entries without the
    // table; sorting by a name or e-mail.
    [`contacts_owner_${column}_lower_idx`, sql`(owner_id, (lower(${sql.id(column)})) collate "C", ${sql.id(column)} collate "C", id)`],
    // ilike (and, until 007, the bare term): the rows holding the pattern's trigrams, within one
    // owner (btree_gin puts owner_id in a GIN index).
    [`contacts_owner_${column}_trgm_idx`, sql`using gin (owner_id, (lower(${sql.id(column)})) collate "C" gin_trgm_ops)`],
  ]),
  // Upcoming birthdays in their order: day of the year, then last name, first name, id.
  ['contacts_owner_upcoming_idx', sql`(owner_id, birthday_key, last_name, first_name, id)`],
  // Date filters, and sorting by a date with ties broken by id.
  ['contacts_owner_birthday_id_idx', sql`(owner_id, birthday, id)`],
  ['contacts_owner_created_at_id_idx', sql`(owner_id, created_at, id)`],
  ['contacts_owner_updated_at_id_idx', sql`(owner_id, updated_at, id)`],
];

/** 002's indexes that the ones above replace: the global trigram indexes read every owner's rows. */
const REPLACED: [name: string, definition: RawBuilder<unknown>][] = [
  ...TEXT_COLUMNS.flatMap((column): [string, RawBuilder<unknown>][] => [
    [`contacts_${column}_trgm_idx`, sql`using gin (${sql.id(column)} gin_trgm_ops)`],
    [`contacts_owner_${column}_idx`, sql`(owner_id, ${sql.id(column)} text_pattern_ops)`],
  ]),
  ['contacts_owner_birthday_idx', sql`(owner_id, birthday)`],
  ['contacts_owner_birthday_key_idx', sql`(owner_id, birthday_key)`],
];

export async function up(db: Kysely<any>): Promise<void> {
  await sql`create extension if not exists btree_gin`.execute(db);
  for (const [name, definition] of CREATED) await createIndex(db, 'contacts', name, definition);
  for (const [name] of REPLACED) await dropIndex(db, name);
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const [name, definition] of REPLACED) await createIndex(db, 'contacts', name, definition);
  for (const [name] of CREATED) await dropIndex(db, name);
}
