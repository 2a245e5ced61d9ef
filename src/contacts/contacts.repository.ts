import { type Expression, type ExpressionBuilder, type Kysely, type Selectable, type SqlBool, sql } from 'kysely';
import type { ContactsTable, Database } from '../db/database.js';
import { type BirthdaySegment, type BirthdayWindow, birthdaySegments } from './birthdays.js';
import type { Condition } from './filter.js';
import { filterPredicate } from './filter-sql.js';

/** A contact as read: every column but the owner and the derived birthday key. */
export type ContactRow = Omit<Selectable<ContactsTable>, 'owner_id' | 'birthday_key'>;

/** The writable fields; `additional_data` undefined leaves the stored value alone. */
export interface ContactFields {
  first_name: string;
  last_name: string;
  email: string;
  phone: string;
  birthday: string;
  additional_data?: Record<string, unknown> | null;
}

type ContactsBuilder = ExpressionBuilder<Database, 'contacts'>;

export interface PageRequest {
  skip: number;
  limit: number;
}

export interface PageOf<T> {
  total: number;
  rows: T[];
}

const COLUMNS = [
  'id',
  'first_name',
  'last_name',
  'email',
  'phone',
  'birthday',
  'additional_data',
  'created_at',
  'updated_at',
] as const satisfies readonly (keyof ContactRow)[];

const UNIQUE_EMAIL_INDEX = 'contacts_owner_email_key';

/** Whether `error` is the per-owner e-mail uniqueness index refusing a row (a duplicate, even one racing ours). */
export function isDuplicateEmail(error: unknown): boolean {
  const e = error as { code?: unknown; constraint?: unknown } | null;
  return e?.code === '23505' && e.constraint === UNIQUE_EMAIL_INDEX;
}

/** jsonb travels as text so both drivers store it the same way. */
function json(value: Record<string, unknown> | null | undefined): string | null | undefined {
  return value === undefined || value === null ? value : JSON.stringify(value);
}

/** Inserts a contact owned by `ownerId`, stamped `now`. */
export async function insertContact(db: Kysely<Database>, ownerId: number, fields: ContactFields, now: Date): Promise<ContactRow> {
  return db
    .insertInto('contacts')
    .values({ ...fields, additional_data: json(fields.additional_data), owner_id: ownerId, created_at: now, updated_at: now })
    .returning(COLUMNS)
    .executeTakeFirstOrThrow();
}

/** The owner's contact `id`, or undefined (also when it belongs to someone else). */
export async function findContact(db: Kysely<Database>, ownerId: number, id: number): Promise<ContactRow | undefined> {
  return db.selectFrom('contacts').select(COLUMNS).where('owner_id', '=', ownerId).where('id', '=', id).executeTakeFirst();
}

/** Writes the given fields and moves `updated_at`; undefined when the owner has no such contact. */
export async function updateContact(
  db: Kysely<Database>,
  ownerId: number,
  id: number,
  fields: Partial<ContactFields>,
  now: Date,
): Promise<ContactRow | undefined> {
  const { additional_data, ...plain } = fields;
  return db
    .updateTable('contacts')
    .set({
      ...plain,
      ...(additional_data === undefined ? {} : { additional_data: json(additional_data) }),
      // A write always moves updated_at, even within the millisecond of the previous one.
      updated_at: sql<Date>`greatest(${now}::timestamptz, updated_at + interval '1 millisecond')`,
    })
    .where('owner_id', '=', ownerId)
    .where('id', '=', id)
    .returning(COLUMNS)
    .executeTakeFirst();
}

/** Deletes the owner's contact `id` and returns it as it was; undefined when there is none. */
export async function deleteContact(db: Kysely<Database>, ownerId: number, id: number): Promise<ContactRow | undefined> {
  return db.deleteFrom('contacts').where('owner_id', '=', ownerId).where('id', '=', id).returning(COLUMNS).executeTakeFirst();
}

/**
 * The owner's contacts matching `conditions`, one page in `id` order, and the total, from one
 * statement (one snapshot). The count and the page are separate scans, so a page reads about
 * skip + limit index entries rather than every match; the page's ids come from an index (often
 * without visiting the table) and only the page's rows are read in full. A page past the end still
 * has the total.
 */
export async function listContacts(
  db: Kysely<Database>,
  ownerId: number,
  conditions: readonly Condition[],
  { skip, limit }: PageRequest,
): Promise<PageOf<ContactRow>> {
  const matches = (eb: ContactsBuilder) => eb.and([eb('owner_id', '=', ownerId), filterPredicate(eb, conditions)]);
  const result = await db
    .selectFrom((eb) => eb.selectFrom('contacts').where(matches).select((count) => count.fn.countAll<number>().as('total')).as('counted'))
    .leftJoin(
      (eb) => eb.selectFrom('contacts').where(matches).select('id').orderBy('id').offset(skip).limit(limit).as('page'),
      (join) => join.onTrue(),
    )
    .leftJoin('contacts', (join) => join.onRef('contacts.id', '=', 'page.id').on('contacts.owner_id', '=', ownerId))
    .select('counted.total')
    .select(COLUMNS.map((column) => `contacts.${column}` as const))
    .orderBy('page.id')
    .execute();
  const total = result[0]?.total ?? 0;
  const rows = result.flatMap(({ total: _total, ...row }) => (row.id === null ? [] : [row as ContactRow]));
  return { total, rows };
}

/**
 * The owner's contacts whose next birthday is in `window`, ordered by that day, then last name,
 * first name and id. The window is a few key segments in that order (birthdaySegments); each is
 * counted, then only the segments the page overlaps are read, each an ordered range of the
 * (owner_id, birthday_key, last_name, first_name, id) index from its offset, so a page reads about
 * skip + limit index entries. Counts and page come from one snapshot.
 */
export async function listUpcomingBirthdays(
  db: Kysely<Database>,
  ownerId: number,
  window: BirthdayWindow,
  { skip, limit }: PageRequest,
): Promise<PageOf<ContactRow>> {
  const segments = birthdaySegments(window);
  const inSegment = (eb: ContactsBuilder, { from, to }: BirthdaySegment) =>
    eb.and([eb('owner_id', '=', ownerId), from === to ? eb('birthday_key', '=', from) : eb.between('birthday_key', from, to)]);
  return consistently(db, async (trx) => {
    const counted = await trx
      .selectNoFrom((eb) =>
        segments.map((segment, i) =>
          eb.selectFrom('contacts').where((w) => inSegment(w, segment)).select((count) => count.fn.countAll<number>().as('n')).as(`s${i}`),
        ),
      )
      .executeTakeFirstOrThrow();
    const counts = segments.map((_, i) => Number((counted as Record<string, unknown>)[`s${i}`] ?? 0));
    const rows: ContactRow[] = [];
    let before = 0;
    for (const [i, segment] of segments.entries()) {
      const count = counts[i]!;
      // The part of [skip, skip + limit) that falls in this segment, as an offset and a limit within it.
      const from = Math.max(skip, before);
      const to = Math.min(skip + limit, before + count);
      if (from < to) rows.push(...(await segmentPage(trx, ownerId, segment, inSegment, from - before, to - from)));
      before += count;
    }
    return { total: before, rows };
  });
}

/** Rows `offset`.. of one birthday segment in upcoming order: ids from the index, then those rows. */
async function segmentPage(
  db: Kysely<Database>,
  ownerId: number,
  segment: BirthdaySegment,
  inSegment: (eb: ContactsBuilder, segment: BirthdaySegment) => Expression<SqlBool>,
  offset: number,
  limit: number,
): Promise<ContactRow[]> {
  // Within a one-day segment the keys differ (228, 229) but the day does not: order by name alone.
  const byDay = !segment.oneDay;
  const ids = db
    .selectFrom('contacts')
    .where((eb) => inSegment(eb, segment))
    .select(['id', 'birthday_key', 'last_name', 'first_name'])
    .$if(byDay, (query) => query.orderBy('birthday_key'))
    .orderBy('last_name')
    .orderBy('first_name')
    .orderBy('id')
    .offset(offset)
    .limit(limit);
  return db
    .selectFrom(ids.as('page'))
    .innerJoin('contacts', (join) => join.onRef('contacts.id', '=', 'page.id').on('contacts.owner_id', '=', ownerId))
    .select(COLUMNS.map((column) => `contacts.${column}` as const))
    .$if(byDay, (query) => query.orderBy('page.birthday_key'))
    .orderBy('page.last_name')
    .orderBy('page.first_name')
    .orderBy('page.id')
    .execute();
}

/**
 * Runs `read` in one snapshot: a repeatable-read, read-only transaction, or the caller's transaction
 * when `db` already is one.
 */
async function consistently<T>(db: Kysely<Database>, read: (db: Kysely<Database>) => Promise<T>): Promise<T> {
  if (db.isTransaction) return read(db);
  return db.transaction().setIsolationLevel('repeatable read').setAccessMode('read only').execute(read);
}
