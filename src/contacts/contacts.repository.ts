import { type Expression, type ExpressionBuilder, type Kysely, type RawBuilder, type Selectable, type SqlBool, sql } from 'kysely';
import type { ContactsTable, Database } from '../db/database.js';
import type { BirthdayWindow } from './birthdays.js';
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

/** The owner's contacts matching `conditions`, one page in `id` order, with the total from the same statement. */
export async function listContacts(
  db: Kysely<Database>,
  ownerId: number,
  conditions: readonly Condition[],
  page: PageRequest,
): Promise<PageOf<ContactRow>> {
  return pageOf(db, ownerId, (eb) => filterPredicate(eb, conditions), sql`id`, page);
}

/**
 * The owner's contacts whose next birthday is in `window`, ordered by that day, then last name,
 * first name and id. The key range is what the (owner_id, birthday_key) index serves; the order
 * key puts this year's keys before next year's and moves 29 February to 28 in a year without one.
 */
export async function listUpcomingBirthdays(
  db: Kysely<Database>,
  ownerId: number,
  window: BirthdayWindow,
  page: PageRequest,
): Promise<PageOf<ContactRow>> {
  const { todayKey, endKey, wraps, leapDayThisYear, leapDayNextYear } = window;
  const inWindow = (eb: ExpressionBuilder<Database, 'contacts'>): Expression<SqlBool> => {
    if (endKey === null) return sql<SqlBool>`true`;
    if (wraps) return eb.or([eb('birthday_key', '>=', todayKey), eb('birthday_key', '<=', endKey)]);
    return eb.between('birthday_key', todayKey, endKey);
  };
  const nextBirthday = sql`case
    when birthday_key >= ${todayKey} then (case when birthday_key = 229 then ${leapDayThisYear}::int else birthday_key end)
    else 10000 + (case when birthday_key = 229 then ${leapDayNextYear}::int else birthday_key end)
  end`;
  return pageOf(db, ownerId, inWindow, sql`${nextBirthday}, last_name, first_name, id`, page);
}

/**
 * One page and the total of the owner's rows matching `where`, from one statement: a CTE holds the
 * numbered matches, the count comes from it, and the page is joined laterally so a page past the
 * end still returns the total.
 */
async function pageOf(
  db: Kysely<Database>,
  ownerId: number,
  where: (eb: ExpressionBuilder<Database, 'contacts'>) => Expression<SqlBool>,
  order: RawBuilder<unknown>,
  { skip, limit }: PageRequest,
): Promise<PageOf<ContactRow>> {
  const result = await db
    .with('matched', (qb) =>
      qb
        .selectFrom('contacts')
        .select(COLUMNS)
        .select(sql<number>`row_number() over (order by ${order})`.as('position'))
        .where('owner_id', '=', ownerId)
        .where(where),
    )
    .selectFrom((eb) => eb.selectFrom('matched').select((count) => count.fn.countAll<number>().as('total')).as('counted'))
    .leftJoinLateral(
      (eb) => eb.selectFrom('matched').selectAll().where('position', '>', skip).where('position', '<=', skip + limit).as('page'),
      (join) => join.onTrue(),
    )
    .select('counted.total')
    .selectAll('page')
    .orderBy('page.position')
    .execute();
  const total = result[0]?.total ?? 0;
  const rows = result.flatMap(({ total: _total, position, ...row }) => (position === null ? [] : [row as ContactRow]));
  return { total, rows };
}
