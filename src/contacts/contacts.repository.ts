import {
  CompiledQuery,
  type ExpressionBuilder,
  type Insertable,
  type Kysely,
  type OrderByModifiers,
  type RawBuilder,
  type Selectable,
  sql,
  type Updateable,
} from 'kysely';
import { allowLongStatements, preparedStatement, violatesUnique } from '../../plugins/db.js';
import type { ContactsTable, Database } from '../db/database.js';
import { schemaFields } from '../generated/schemas.js';
import { type BirthdaySegment, type BirthdayWindow, birthdaySegments } from './birthdays.js';
import type { Condition } from './filter.js';
import { countPredicate, filterPredicate, findsByGrams, findsByTrigrams } from './filter-sql.js';
import { hasLargeOwnerIndexes } from './large-owners.js';
import { type SortKey, TEXT_SORT_FIELDS } from './sort.js';

/**
 * The columns an answer shows: the properties of the API's Contact, in its order (openapi.yaml).
 * Each must be a column of the table: a property without one fails tsc here.
 */
export const CONTACT_COLUMNS = schemaFields.Contact.properties satisfies readonly (keyof Selectable<ContactsTable>)[];
export type ContactRow = Pick<Selectable<ContactsTable>, (typeof CONTACT_COLUMNS)[number]>;

/** The columns a write sets: the writable properties of ContactPatch (openapi.yaml); Pick fails tsc for one that is no column. */
type WritableColumn = (typeof schemaFields.ContactPatch.writable)[number];
/** Values for the writable columns, as the service checked them; undefined leaves a stored value alone. */
export type ContactFields = Partial<Pick<Selectable<ContactsTable>, WritableColumn>>;

type ContactsBuilder = ExpressionBuilder<Database, 'contacts'>;

export interface PageRequest {
  skip: number;
  limit: number;
}

export interface PageOf<T> {
  total: number;
  rows: T[];
}

const UNIQUE_EMAIL_INDEX = 'contacts_owner_email_key';

/** Whether `error` is the per-owner e-mail uniqueness index refusing a row (a duplicate, even one racing ours). */
export function isDuplicateEmail(error: unknown): boolean {
  return violatesUnique(error, UNIQUE_EMAIL_INDEX);
}

/** Column values of `fields`: jsonb travels as JSON text, so both drivers store it the same way. */
function columnValues(fields: ContactFields): Pick<Updateable<ContactsTable>, WritableColumn> {
  const { kinds } = schemaFields.Contact;
  return Object.fromEntries(
    Object.entries(fields).map(([column, value]) => [
      column,
      kinds[column as keyof typeof kinds] === 'object' && value != null ? JSON.stringify(value) : value,
    ]),
  );
}

/** A create that would leave the owner with more contacts than allowed; its transaction was rolled back. */
export class OverQuota extends Error {
  constructor(
    /** The owner's contacts before the create. */
    readonly had: number,
    /** Contacts the create would have added. */
    readonly adding: number,
  ) {
    super('over quota');
  }
}

/**
 * Locks the owner's address book (migration 033; made, empty, for an owner who has none yet) and
 * returns its count of contacts. Every write of the owner's contacts locks the same row (the
 * triggers), so until the transaction ends the count changes only by its own writes.
 */
async function lockBook(trx: Kysely<Database>, ownerId: number): Promise<number> {
  const locked = () => trx.selectFrom('address_books').select('contacts').where('owner_id', '=', ownerId).forUpdate().executeTakeFirst();
  let book = await locked();
  if (!book) {
    await trx
      .insertInto('address_books')
      .values({ owner_id: ownerId })
      .onConflict((conflict) => conflict.column('owner_id').doNothing())
      .execute();
    book = await locked();
  }
  return book!.contacts;
}

/**
 * Runs `create` (inserts of the owner's contacts, returning how many it made) in one transaction
 * that first locks the owner's address book, so one owner's creates count one after another and
 * can never overshoot `max` together; OverQuota (rolled back) when the owner then has more than
 * `max`. Given a transaction (an Idempotency-Key's, which stores its answer with the rows), it runs in it.
 */
export async function creatingWithin<T>(
  db: Kysely<Database>,
  ownerId: number,
  max: number,
  create: (trx: Kysely<Database>) => Promise<{ result: T; added: number }>,
): Promise<T> {
  const counted = async (trx: Kysely<Database>) => {
    const had = await lockBook(trx, ownerId);
    const { result, added } = await create(trx);
    if (had + added > max) throw new OverQuota(had, added);
    return result;
  };
  return db.isTransaction ? counted(db) : db.transaction().execute(counted);
}

/** Creates one contact by `insert` as creatingWithin does, refusing before it inserts when the owner has no room. */
export async function creatingOne<T>(
  db: Kysely<Database>,
  ownerId: number,
  max: number,
  insert: (trx: Kysely<Database>) => Promise<T>,
): Promise<T> {
  const create = async (trx: Kysely<Database>) => {
    const had = await lockBook(trx, ownerId);
    if (had + 1 > max) throw new OverQuota(had, 1);
    return insert(trx);
  };
  return db.isTransaction ? create(db) : db.transaction().execute(create);
}

/**
 * A write's new `updated_at`: `now`, or a millisecond past the stored one if that is not earlier,
 * so a write always moves it. In UTC without a time zone: timestamptz + interval depends on the
 * session's zone, which a sharded database cannot evaluate on the row's node.
 */
function nextVersion(now: Date): RawBuilder<Date> {
  return sql<Date>`greatest(${now}::timestamptz, ((updated_at at time zone 'UTC') + interval '1 millisecond') at time zone 'UTC')`;
}

/** Every writable column unset, under the fields given: the bound statements below take a value for each column they name. */
const UNSET_FIELDS = Object.fromEntries(schemaFields.ContactPatch.writable.map((column) => [column, null])) as Record<WritableColumn, null>;
/** The columns an insert of one contact writes. */
const INSERTED_COLUMNS = [...schemaFields.ContactPatch.writable, 'owner_id', 'created_at', 'updated_at'] as const;

/** Inserts a contact owned by `ownerId`, stamped `now`; `fields` holds every required column (the create schema makes sure). */
export async function insertContact(db: Kysely<Database>, ownerId: number, fields: ContactFields, now: Date): Promise<ContactRow> {
  const row = { ...UNSET_FIELDS, ...columnValues(fields), owner_id: ownerId, created_at: now, updated_at: now };
  const [inserted] = (await db.executeQuery(insertOne(db, row))).rows;
  return inserted!;
}

/** A create's insert, as a prepared statement (docs/performance.md). */
const insertOne = preparedStatement(INSERTED_COLUMNS, (db: Kysely<Database>, row) =>
  db.insertInto('contacts').values(row).returning(CONTACT_COLUMNS),
);

/** The owner's contact `id`, or undefined (also when it belongs to someone else). */
export async function findContact(db: Kysely<Database>, ownerId: number, id: number): Promise<ContactRow | undefined> {
  return db.selectFrom('contacts').select(CONTACT_COLUMNS).where('owner_id', '=', ownerId).where('id', '=', id).executeTakeFirst();
}

/**
 * Writes the given fields and moves `updated_at`; undefined when the owner has no such contact, or
 * when `versions` is given and the contact's `updated_at` is none of them (so the check and the
 * write are one statement: of two writers holding the same version, one wins), or when the contact
 * has a stored card, whose text must change with its fields (updateCardContact).
 */
export async function updateContact(
  db: Kysely<Database>,
  ownerId: number,
  id: number,
  fields: ContactFields,
  now: Date,
  versions?: readonly Date[],
): Promise<ContactRow | undefined> {
  return db
    .updateTable('contacts')
    .set({
      ...columnValues(fields),
      updated_at: nextVersion(now),
    })
    .where('owner_id', '=', ownerId)
    .where('id', '=', id)
    .where('card', 'is', null)
    .$if(versions !== undefined, (query) => query.where('updated_at', 'in', versions!))
    .returning(CONTACT_COLUMNS)
    .executeTakeFirst();
}

/** Deletes the owner's contact `id` (if its `updated_at` is one of `versions`, when given) and returns it as it was. */
export async function deleteContact(
  db: Kysely<Database>,
  ownerId: number,
  id: number,
  versions?: readonly Date[],
): Promise<ContactRow | undefined> {
  return db
    .deleteFrom('contacts')
    .where('owner_id', '=', ownerId)
    .where('id', '=', id)
    .$if(versions !== undefined, (query) => query.where('updated_at', 'in', versions!))
    .returning(CONTACT_COLUMNS)
    .executeTakeFirst();
}

/**
 * ORDER BY terms of the sort keys, then `id` ascending to break ties. A text key orders by its
 * lower-cased value, then by the value, both byte-wise: the order of the (owner_id, lower(col)
 * collate "C", col collate "C", id) indexes, so a page walked in that order reads about skip + limit entries.
 */
function orderTerms(keys: readonly SortKey[]): [RawBuilder<unknown>, OrderByModifiers][] {
  const terms = keys.flatMap(({ field, descending }): [RawBuilder<unknown>, OrderByModifiers][] => {
    const column = sql.ref(`contacts.${field}`);
    const direction = descending ? 'desc' : 'asc';
    if (!TEXT_SORT_FIELDS.includes(field)) return [[column, direction]];
    return [
      [sql`lower(${column}) collate "C"`, direction],
      [sql`${column} collate "C"`, direction],
    ];
  });
  return keys.some((key) => key.field === 'id') ? terms : [...terms, [sql.ref('contacts.id'), 'asc']];
}

/** `query` ordered by `terms`. */
function ordered<Q extends { orderBy(term: RawBuilder<unknown>, direction: OrderByModifiers): Q }>(
  query: Q,
  terms: ReturnType<typeof orderTerms>,
): Q {
  return terms.reduce((ordering, [term, direction]) => ordering.orderBy(term, direction), query);
}

/** The WHERE of the owner's contacts that match `conditions`. */
function matching(ownerId: number, conditions: readonly Condition[]) {
  return (eb: ContactsBuilder) => eb.and([eb('owner_id', '=', ownerId), filterPredicate(eb, conditions)]);
}

/**
 * Fetching a match by its grams and sorting it costs about this many index entries walked in order
 * (npm run bench:scale: ~1.9 µs a match fetched, ~0.65 µs an entry walked).
 */
const FETCH_TO_WALK_COST = 3;

/**
 * The owner's contacts matching `conditions`, one page in `sort` order, and the total, from one
 * statement (one snapshot). The total and the page are separate reads. Only the page's rows are
 * read in full, and a page past the end still has the total.
 *
 * The page's ids are walked: the query with the row tests in `sort` order, which PostgreSQL reads
 * in the order of an index when it expects matches to be common, testing entries until skip + limit
 * match, about (skip + limit) · N / T of the owner's N contacts for T matches. For a short run
 * (countPredicate) its estimate is global and often far off for one owner: a run that 300 of
 * 100,000 contacts hold walked 91,000 entries for its sixth page. So when a condition is looked up by its
 * grams, the exact total decides: if FETCH_TO_WALK_COST · T² <= (skip + limit) · N, the T matches
 * are fetched through their grams instead, and sorted. Only a large owner's contacts have grams
 * (src/contacts/large-owners.ts); an ordinary owner's few thousand are tested row by row.
 */
export async function listContacts(
  db: Kysely<Database>,
  ownerId: number,
  conditions: readonly Condition[],
  { skip, limit }: PageRequest,
  sort: readonly SortKey[] = [],
): Promise<PageOf<ContactRow>> {
  const terms = orderTerms(sort);
  const large = (findsByGrams(conditions) || conditions.some(findsByTrigrams)) && (await hasLargeOwnerIndexes(db, ownerId));
  const fetchable = large && findsByGrams(conditions);
  const counts = (eb: ContactsBuilder) => countPredicate(eb, ownerId, conditions, large);
  // The owner's size as the triggers keep it in the address book (migration 033): one row, 0 without a book.
  const ownerSize = db
    .selectFrom('address_books')
    .where('owner_id', '=', ownerId)
    .select(sql<number>`coalesce(max(contacts), 0)`.as('n'));
  const walked = ordered(db.selectFrom('contacts').where(matching(ownerId, conditions)).select('id'), terms)
    .offset(skip)
    .limit(limit);
  // Joined, not a subquery in the select list, which a sharded database does not push down to the owner's node.
  const fetchMatches = fetchable
    ? sql<boolean>`${sql.lit(FETCH_TO_WALK_COST)} * count(*) * count(*) <= ${skip + limit}::bigint * coalesce(max(owner.n), 0)`
    : sql<boolean>`false`;
  // Without conditions, the total is the owner's size.
  const counted =
    conditions.length === 0
      ? db.selectFrom(ownerSize.as('owner')).select([sql<number>`n::integer`.as('total'), sql<boolean>`false`.as('fetch_matches')])
      : db
          .selectFrom('contacts')
          .leftJoin(ownerSize.as('owner'), (join) => join.onTrue())
          .where(counts)
          .select((eb) => [eb.fn.countAll<number>().as('total'), fetchMatches.as('fetch_matches')]);
  // The sort's columns of every match; OFFSET 0 keeps the planner from reading them in index order.
  const sortColumns = [...new Set(['id' as const, ...sort.map((key) => key.field)])];
  const matches = db.selectFrom('contacts').where(counts).select(sortColumns).offset(0);
  const fetched = ordered(db.selectFrom(matches.as('contacts')).select('id'), terms)
    .offset(skip)
    .limit(limit);
  // Inside the page's subqueries and outside, `contacts` names that scope's own table. Each arm's
  // condition reads only the count, so it is a one-time filter: the arm not chosen never runs.
  const result = await ordered(
    db
      .selectFrom(counted.as('counted'))
      .leftJoinLateral(
        (eb) =>
          fetchable
            ? eb
                .selectFrom(walked.as('walked'))
                .select('walked.id')
                .where(sql<boolean>`not counted.fetch_matches`)
                .unionAll(
                  eb
                    .selectFrom(fetched.as('fetched'))
                    .select('fetched.id')
                    .where(sql<boolean>`counted.fetch_matches`),
                )
                .as('page')
            : walked.as('page'),
        (join) => join.onTrue(),
      )
      .leftJoin('contacts', (join) => join.onRef('contacts.id', '=', 'page.id').on('contacts.owner_id', '=', ownerId))
      .select('counted.total')
      .select(CONTACT_COLUMNS.map((column) => `contacts.${column}` as const)),
    terms,
  ).execute();
  const total = result[0]?.total ?? 0;
  const rows = result.flatMap(({ total: _total, ...row }) => (row.id === null ? [] : [row as ContactRow]));
  return { total, rows };
}

/**
 * Every contact of the owner matching `conditions`, in `sort` order, in batches of `batchSize`:
 * a cursor in a read-only repeatable-read transaction, so the batches are one snapshot and only one
 * batch is in memory at a time; each statement may take `statementTimeoutMs`. The transaction ends with the generator, however it stops.
 */
export async function* streamContacts(
  db: Kysely<Database>,
  ownerId: number,
  conditions: readonly Condition[],
  sort: readonly SortKey[],
  batchSize: number,
  statementTimeoutMs: number,
): AsyncGenerator<ContactRow[]> {
  const { sql: select, parameters } = ordered(
    db.selectFrom('contacts').where(matching(ownerId, conditions)).select(CONTACT_COLUMNS),
    orderTerms(sort),
  ).compile();
  const trx = await db.startTransaction().setIsolationLevel('repeatable read').setAccessMode('read only').execute();
  try {
    await allowLongStatements(trx, statementTimeoutMs);
    await trx.executeQuery(CompiledQuery.raw(`declare contacts_export no scroll cursor for ${select}`, [...parameters]));
    for (;;) {
      const { rows } = await trx.executeQuery<ContactRow>(CompiledQuery.raw(`fetch ${batchSize} from contacts_export`));
      if (rows.length === 0) break;
      yield rows;
    }
  } finally {
    // Read-only, so ending it either way is the same. A rollback that fails (a dead connection)
    // still releases the connection, and there is nothing left to undo.
    await trx
      .rollback()
      .execute()
      .catch(() => undefined);
  }
}

/**
 * Inserts `contacts` for `ownerId` (in the caller's transaction, which holds the owner's address
 * book: creatingWithin), stamped `now`, skipping any whose e-mail the owner already has (ignoring
 * case). No other write of the owner's runs meanwhile, so what heldEmails reads stays true, and no
 * insert is skipped by ON CONFLICT after its trigger counted it (migration 033). Returns the
 * e-mails of the rows inserted, as given.
 */
export async function insertContacts(
  db: Kysely<Database>,
  ownerId: number,
  contacts: readonly ContactFields[],
  now: Date,
): Promise<Set<string>> {
  // 1,000 rows of at most 10 parameters each stay far below PostgreSQL's 65,535 per statement.
  const CHUNK = 1000;
  const inserted = new Set<string>();
  for (let start = 0; start < contacts.length; start += CHUNK) {
    const chunk = contacts.slice(start, start + CHUNK);
    const held = await heldEmails(
      db,
      ownerId,
      chunk.map((fields) => fields.email!),
    );
    const fresh = chunk.filter((fields) => !held.has(fields.email!.toLowerCase()));
    if (fresh.length === 0) continue;
    const rows = await db
      .insertInto('contacts')
      .values(
        fresh.map((fields) => ({
          ...(columnValues(fields) as Insertable<ContactsTable>),
          owner_id: ownerId,
          created_at: now,
          updated_at: now,
        })),
      )
      .returning('email')
      .execute();
    // An import entry always has an e-mail (the create rules).
    for (const row of rows) inserted.add(row.email!);
  }
  return inserted;
}

/**
 * The owner's contacts whose next birthday is in `window`, ordered by that day, then last name,
 * first name and id, and the total, from one statement. The window is a few key segments in that
 * order (birthdaySegments). Each segment is counted (an index-only scan); the page then takes from
 * each segment the part of [skip, skip + limit) that falls in it, an ordered range of the
 * (owner_id, birthday_key, last_name, first_name, id) index read from its offset, so a page reads
 * about skip + limit index entries. A segment the page misses gets LIMIT 0 and is never read.
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
  /** Where segment `i` starts in the whole list: the counts of the segments before it. */
  const start = (i: number): RawBuilder<number> =>
    i === 0
      ? sql<number>`0`
      : sql<number>`(${sql.join(
          segments.slice(0, i).map((_, j) => sql.ref(`counted.n${j}`)),
          sql` + `,
        )})`;
  const segmentPage = (eb: ExpressionBuilder<Database, never>, segment: BirthdaySegment, i: number) =>
    eb
      .selectFrom((from) =>
        from
          .selectFrom('contacts')
          .where((w) => inSegment(w, segment))
          // Within a one-day segment the keys differ (228, 229) but the day does not: order by name alone.
          .select([
            sql.lit(i).as('segment'),
            (segment.oneDay ? sql.lit(segment.from) : sql.ref('birthday_key')).as('day'),
            'last_name',
            'first_name',
            'id',
          ])
          .$if(!segment.oneDay, (query) => query.orderBy('birthday_key'))
          .orderBy('last_name')
          .orderBy('first_name')
          .orderBy('id')
          .offset(sql<number>`greatest(${skip} - ${start(i)}, 0)`)
          .limit(sql<number>`greatest(least(${skip + limit}, ${start(i + 1)}) - greatest(${skip}, ${start(i)}), 0)`)
          .as(`s${i}`),
      )
      .selectAll();
  const result = await db
    // Materialized: inlined, each use of a count below would run its scan again.
    .with(
      (cte) => cte('counted').materialized(),
      (qb) =>
        qb.selectNoFrom((eb) =>
          segments.map((segment, i) =>
            eb
              .selectFrom('contacts')
              .where((w) => inSegment(w, segment))
              .select((count) => count.fn.countAll<number>().as('n'))
              .as(`n${i}`),
          ),
        ),
    )
    .selectFrom('counted')
    .leftJoinLateral(
      (eb) =>
        segments
          .slice(1)
          .reduce((union, segment, i) => union.unionAll(segmentPage(eb, segment, i + 1)), segmentPage(eb, segments[0]!, 0))
          .as('page'),
      (join) => join.onTrue(),
    )
    .leftJoin('contacts', (join) => join.onRef('contacts.id', '=', 'page.id').on('contacts.owner_id', '=', ownerId))
    .select(start(segments.length).as('total'))
    .select(CONTACT_COLUMNS.map((column) => `contacts.${column}` as const))
    .orderBy('page.segment')
    .orderBy('page.day')
    .orderBy('page.last_name')
    .orderBy('page.first_name')
    .orderBy('page.id')
    .execute();
  const total = Number(result[0]?.total ?? 0);
  const rows = result.flatMap(({ total: _total, ...row }) => (row.id === null ? [] : [row as ContactRow]));
  return { total, rows };
}

/** The columns of a card beside a contact's: the stored vCard, the client's resource name, a UID of its own. */
const CARD_COLUMNS = ['card', 'card_name', 'uid'] as const;
export type CardRow = ContactRow & Pick<Selectable<ContactsTable>, (typeof CARD_COLUMNS)[number]>;
/** A card as a listing shows it: the text's length instead of the text. */
export type CardSummary = ContactRow & Pick<Selectable<ContactsTable>, 'card_name'> & { card_octets: number | null };

const UNIQUE_CARD_NAME_INDEX = 'contacts_owner_card_name_key';
const UNIQUE_UID_INDEX = 'contacts_owner_uid_key';

/** Which per-owner uniqueness index of cards refused a row: the resource name, the UID, or neither. */
export function cardUniquenessRefused(error: unknown): 'card_name' | 'uid' | null {
  return violatesUnique(error, UNIQUE_CARD_NAME_INDEX) ? 'card_name' : violatesUnique(error, UNIQUE_UID_INDEX) ? 'uid' : null;
}

/** The owner's contact `id` with its card columns. */
export async function findCardRow(db: Kysely<Database>, ownerId: number, id: number): Promise<CardRow | undefined> {
  return db
    .selectFrom('contacts')
    .select([...CONTACT_COLUMNS, ...CARD_COLUMNS])
    .where('owner_id', '=', ownerId)
    .where('id', '=', id)
    .executeTakeFirst();
}

/**
 * The owner's contact whose card has the resource name `name`: the contact `derivedId` when the name
 * is the derived name of that contact and its client chose none, else the one whose client chose it.
 */
export async function findCardRowByName(
  db: Kysely<Database>,
  ownerId: number,
  name: string,
  derivedId: number | null,
): Promise<CardRow | undefined> {
  return (
    db
      .selectFrom('contacts')
      .select([...CONTACT_COLUMNS, ...CARD_COLUMNS])
      .where('owner_id', '=', ownerId)
      .where((eb) => {
        const chosen = eb('card_name', '=', name);
        return derivedId === null ? chosen : eb.or([chosen, eb.and([eb('id', '=', derivedId), eb('card_name', 'is', null)])]);
      })
      // The derived one first: it is the contact's own name.
      .orderBy(sql`card_name is null`, 'desc')
      .limit(1)
      .executeTakeFirst()
  );
}

/** The owner's contacts whose card has the UID `uid` (their own, or the derived UID of `derivedId`): at most two. */
export async function findUidHolders(
  db: Kysely<Database>,
  ownerId: number,
  uid: string,
  derivedId: number | null,
): Promise<Pick<CardRow, 'id' | 'card_name'>[]> {
  return db
    .selectFrom('contacts')
    .select(['id', 'card_name'])
    .where('owner_id', '=', ownerId)
    .where((eb) => {
      const own = eb('uid', '=', uid);
      return derivedId === null ? own : eb.or([own, eb.and([eb('id', '=', derivedId), eb('uid', 'is', null)])]);
    })
    .limit(2)
    .execute();
}

/** Which of the owner's contacts hold one of `emails`, ignoring case: lower-cased address → contact id. */
export async function heldEmails(db: Kysely<Database>, ownerId: number, emails: readonly string[]): Promise<Map<string, number>> {
  if (emails.length === 0) return new Map();
  const rows = await db
    .selectFrom('contacts')
    .select(['id', sql<string>`lower(email)`.as('email')])
    .where('owner_id', '=', ownerId)
    .where(
      sql`lower(email)`,
      'in',
      emails.map((email) => email.toLowerCase()),
    )
    .execute();
  return new Map(rows.map((row) => [row.email, row.id]));
}

/** What a card write stores beside the fields. */
export interface CardColumns {
  card: string;
  card_name?: string | null;
  uid: string | null;
}

/** Inserts a contact stored from a card, stamped `now`. */
export async function insertCardContact(
  db: Kysely<Database>,
  ownerId: number,
  fields: ContactFields,
  card: CardColumns,
  now: Date,
): Promise<CardRow> {
  const row = { ...UNSET_FIELDS, ...columnValues(fields), card_name: null, ...card, owner_id: ownerId, created_at: now, updated_at: now };
  const [inserted] = (await db.executeQuery(insertCard(db, row))).rows;
  return inserted!;
}

/** A stored card's insert, as a prepared statement. */
const insertCard = preparedStatement([...INSERTED_COLUMNS, ...CARD_COLUMNS], (db: Kysely<Database>, row) =>
  db
    .insertInto('contacts')
    .values(row)
    .returning([...CONTACT_COLUMNS, ...CARD_COLUMNS]),
);

/**
 * Writes the fields and the card columns of the owner's contact `id` if its `updated_at` is one of
 * `versions` (any, when undefined), moving `updated_at`; undefined when nothing was written.
 */
export async function updateCardContact(
  db: Kysely<Database>,
  ownerId: number,
  id: number,
  fields: ContactFields,
  card: CardColumns,
  now: Date,
  versions?: readonly Date[],
): Promise<CardRow | undefined> {
  return db
    .updateTable('contacts')
    .set({ ...columnValues(fields), ...card, updated_at: nextVersion(now) })
    .where('owner_id', '=', ownerId)
    .where('id', '=', id)
    .$if(versions !== undefined, (query) => query.where('updated_at', 'in', versions!))
    .returning([...CONTACT_COLUMNS, ...CARD_COLUMNS])
    .executeTakeFirst();
}

/** Up to `limit` of the owner's contact ids after `afterId`, in id order. */
export async function listCardIds(db: Kysely<Database>, ownerId: number, afterId: number, limit: number): Promise<number[]> {
  const rows = await db
    .selectFrom('contacts')
    .select('id')
    .where('owner_id', '=', ownerId)
    .where('id', '>', afterId)
    .orderBy('id')
    .limit(limit)
    .execute();
  return rows.map((row) => row.id);
}

/** Octets of card text the owner stores, as the triggers keep them in the address book (migration 033): a rendered card counts none. */
export async function storedCardOctets(db: Kysely<Database>, ownerId: number): Promise<number> {
  const book = await db.selectFrom('address_books').select('card_octets').where('owner_id', '=', ownerId).executeTakeFirst();
  return Number(book?.card_octets ?? 0);
}

/** A rendered card's octets beyond its `additional_data`: names, e-mail, phone, birthday, UID and framing. */
const RENDERED_CARD_OCTETS = 1024;

/** The octets each of these contacts' cards holds (a rendered one's estimated from its data), by id: read without the text. */
export async function cardOctets(db: Kysely<Database>, ownerId: number, ids: readonly number[]): Promise<Map<number, number>> {
  if (ids.length === 0) return new Map();
  const rows = await db
    .selectFrom('contacts')
    .select([
      'id',
      sql<number>`coalesce(octet_length(card), ${RENDERED_CARD_OCTETS} + coalesce(octet_length(additional_data::text), 0))`.as('octets'),
    ])
    .where('owner_id', '=', ownerId)
    .where('id', 'in', ids)
    .execute();
  return new Map(rows.map((row) => [row.id, Number(row.octets)]));
}

/** The owner's contacts with these ids, with their text's length instead of the text. */
export async function findCardSummaries(db: Kysely<Database>, ownerId: number, ids: readonly number[]): Promise<CardSummary[]> {
  if (ids.length === 0) return [];
  return db
    .selectFrom('contacts')
    .select([...CONTACT_COLUMNS, 'card_name', sql<number | null>`octet_length(card)`.as('card_octets')])
    .where('owner_id', '=', ownerId)
    .where('id', 'in', ids)
    .execute();
}

/** The id and chosen name of the owner's contacts with these ids, or whose card has one of these chosen names. */
export async function findCardNames(
  db: Kysely<Database>,
  ownerId: number,
  ids: readonly number[],
  names: readonly string[],
): Promise<Pick<CardRow, 'id' | 'card_name'>[]> {
  if (ids.length === 0 && names.length === 0) return [];
  return db
    .selectFrom('contacts')
    .select(['id', 'card_name'])
    .where('owner_id', '=', ownerId)
    .where((eb) => eb.or([...(ids.length > 0 ? [eb('id', 'in', ids)] : []), ...(names.length > 0 ? [eb('card_name', 'in', names)] : [])]))
    .execute();
}

/** The owner's contacts with these ids, with their card columns (a missing one is left out). */
export async function findCardRows(db: Kysely<Database>, ownerId: number, ids: readonly number[]): Promise<CardRow[]> {
  // In chunks: a statement takes at most 65,535 parameters.
  const CHUNK = 10_000;
  const rows: CardRow[] = [];
  for (let start = 0; start < ids.length; start += CHUNK) {
    const chunk = ids.slice(start, start + CHUNK);
    rows.push(
      ...(await db
        .selectFrom('contacts')
        .select([...CONTACT_COLUMNS, ...CARD_COLUMNS])
        .where('owner_id', '=', ownerId)
        .where('id', 'in', chunk)
        .orderBy('id')
        .execute()),
    );
  }
  return rows;
}

/**
 * Gives the owner's card `id` (if its `updated_at` is one of `versions`) the resource name `name`,
 * and leaves a tombstone of the name it had (`oldName`), so a CardDAV sync reports that name gone
 * and the card under its new one. A contact has one tombstone by its id, kept for its deletion: a
 * name's tombstone takes a negative id of its own, drawn from the contacts' id sequence (so it
 * never meets another), which the REST sync leaves out, at the position the rename gave the card
 * (its trigger), just before it in a sync's order. `updated_at` stays: nothing REST shows changes.
 */
export async function renameCard(
  db: Kysely<Database>,
  ownerId: number,
  id: number,
  versions: readonly Date[],
  name: string,
  oldName: string,
): Promise<CardRow | undefined> {
  const renamed = await db
    .updateTable('contacts')
    .set({ card_name: name })
    .where('owner_id', '=', ownerId)
    .where('id', '=', id)
    .where('updated_at', 'in', versions)
    // A rename keeps updated_at: the name read must still be the card's (null: its derived name).
    .where((eb) => eb.or([eb('card_name', '=', oldName), eb('card_name', 'is', null)]))
    .returning([...CONTACT_COLUMNS, ...CARD_COLUMNS, 'change_position'])
    .executeTakeFirst();
  if (!renamed) return undefined;
  const { change_position: position, ...card } = renamed;
  await sql`
    insert into contact_tombstones (contact_id, owner_id, card_name, change_position)
    values ((-nextval(pg_get_serial_sequence('contacts', 'id')))::integer, ${ownerId}, ${oldName}, ${position})`.execute(db);
  return card;
}
