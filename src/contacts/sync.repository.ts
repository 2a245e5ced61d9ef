import { type Kysely, sql } from 'kysely';
import type { Database } from '../db/database.js';
import { type ContactRow, CONTACT_COLUMNS } from './contacts.repository.js';

/** One change of a sync round: a contact written, or one deleted, by transaction `xid`. */
export interface Change {
  xid: string;
  id: number;
  deleted: boolean;
  /** For a deletion: the resource name a CardDAV client chose for the card, if it did. */
  card_name: string | null;
}

/**
 * The frontier of one owner's sync round: the oldest transaction still running now (the xmin of a
 * snapshot taken now), or one past the owner's latest visible change when that is lower (0 for an
 * owner with none). Every transaction below xmin has finished, so its changes are visible to every
 * later read, and none of the owner's visible changes is at or above L + 1; every change not yet
 * visible comes from a transaction at or above xmin. Either is a valid frontier on one server; the
 * lower one also stays valid on a promoted standby. xmin can name transactions whose ids never
 * reached the standby (ones that ended without a commit it waited for), and a promoted standby hands
 * out ids from the last one it replayed, so a frontier at xmin could lie above the new leader's next
 * ids and skip their changes. L, a visible commit, was on the standby before it became visible
 * (synchronous replication), so the new leader's ids are all above it.
 */
export async function ownerFrontier(db: Kysely<Database>, ownerId: number): Promise<string> {
  const { xmin, latestXid } = await bookState(db, ownerId);
  if (latestXid === null) return '0';
  const next = BigInt(latestXid) + 1n;
  return (BigInt(xmin) < next ? BigInt(xmin) : next).toString();
}

/** Up to `limit` of the owner's contacts with an id above `afterId`, in id order (a full sync). */
export function contactsAfter(db: Kysely<Database>, ownerId: number, afterId: number, limit: number): Promise<ContactRow[]> {
  return db
    .selectFrom('contacts')
    .select(CONTACT_COLUMNS)
    .where('owner_id', '=', ownerId)
    .where('id', '>', afterId)
    .orderBy('id')
    .limit(limit)
    .execute();
}

/**
 * Up to `limit` of the owner's changes by transactions from `since` on, after position `after`, in
 * (transaction, id) order: contacts as last written, and tombstones of deleted ones. A row written
 * again moves to its new transaction, so it is read once, in its latest state.
 */
export async function changesSince(
  db: Kysely<Database>,
  ownerId: number,
  since: string,
  after: { xid: string; id: number } | null,
  limit: number,
): Promise<Change[]> {
  // Below every id: a tombstone of a moved card's old name has a negative one (renameCard).
  const from = after ?? { xid: since, id: -2_147_483_648 };
  const { rows } = await sql<Change>`
    select xid, id, deleted, card_name from (
      select change_xid::text as xid, change_xid, id, false as deleted, null::text as card_name from contacts
       where owner_id = ${ownerId} and change_xid >= ${since}::xid8 and (change_xid, id) > (${from.xid}::xid8, ${from.id})
      union all
      select change_xid::text, change_xid, contact_id, true, card_name from contact_tombstones
       where owner_id = ${ownerId} and change_xid >= ${since}::xid8 and (change_xid, contact_id) > (${from.xid}::xid8, ${from.id})
    ) changes
    order by change_xid, id
    limit ${limit}`.execute(db);
  return rows;
}

/** The owner's contacts with these ids, as they are now (a contact deleted meanwhile is missing). */
export function contactsByIds(db: Kysely<Database>, ownerId: number, ids: readonly number[]): Promise<ContactRow[]> {
  if (ids.length === 0) return Promise.resolve([]);
  return db.selectFrom('contacts').select(CONTACT_COLUMNS).where('owner_id', '=', ownerId).where('id', 'in', ids).execute();
}

/**
 * Forgets every owner's tombstones older than `before` (by the deleted_at index), and records per
 * owner the newest change a purge forgot, in the same statement: a CardDAV token at or below it is
 * refused (card-sync.service.ts).
 */
export async function purgeTombstones(db: Kysely<Database>, before: Date): Promise<void> {
  await sql`
    with purged as (delete from contact_tombstones where deleted_at < ${before} returning owner_id, change_xid)
    insert into tombstone_horizons (owner_id, purged_xid)
    select owner_id, max(change_xid) from purged group by owner_id
    on conflict (owner_id) do update set purged_xid = greatest(tombstone_horizons.purged_xid, excluded.purged_xid)`.execute(db);
}

/** The newest change of the owner's that a purge forgot, or null when none ever was. */
export async function purgedHorizon(db: Kysely<Database>, ownerId: number): Promise<string | null> {
  const row = await db
    .selectFrom('tombstone_horizons')
    .select(sql<string>`purged_xid::text`.as('xid'))
    .where('owner_id', '=', ownerId)
    .executeTakeFirst();
  return row?.xid ?? null;
}

/** Where an owner's book stands: the sync frontier and the owner's latest change (see card-sync.service.ts). */
export interface BookState {
  /** The oldest transaction still running now. */
  xmin: string;
  /** The transactions running now (all at or above xmin). */
  running: string[];
  /** The transaction of the owner's latest visible change (a write or a deletion), or null. */
  latestXid: string | null;
}

/** The owner's book state, from one snapshot: two index lookups of the latest change, and the running transactions. */
export async function bookState(db: Kysely<Database>, ownerId: number): Promise<BookState> {
  const { rows } = await sql<{ xmin: string; running: string[]; latest_xid: string | null }>`
    select pg_snapshot_xmin(snapshot)::text as xmin,
           array(select xip::text from pg_snapshot_xip(snapshot) as xip) as running,
           latest.xid::text as latest_xid
      from pg_current_snapshot() as snapshot
      left join lateral (
        select xid from (
          (select change_xid as xid from contacts where owner_id = ${ownerId} order by change_xid desc limit 1)
          union all
          (select change_xid from contact_tombstones where owner_id = ${ownerId} order by change_xid desc limit 1)
        ) as both_kinds
        order by xid desc limit 1
      ) as latest on true`.execute(db);
  const row = rows[0]!;
  return { xmin: row.xmin, running: row.running, latestXid: row.latest_xid };
}

/** Transactions that may write this database, seen from outside any of them (see card-sync.service.ts). */
export interface LocalWriters {
  /** The next transaction id when the scan began: a transaction from it on may be anyone's. */
  next: string;
  /** The running transactions (32-bit ids, as pg_locks gives them) that hold a lock on a relation of this database. */
  xids: string[];
}

/**
 * The transactions holding a lock on a relation of this database (every writer of a table here
 * does until it ends), read from pg_locks, which every role may read. Another database's
 * transactions never can write here.
 */
export async function localWriters(db: Kysely<Database>): Promise<LocalWriters> {
  const { rows } = await sql<{ next: string; xids: string[] }>`
    select pg_snapshot_xmax(pg_current_snapshot())::text as next,
           array(
             select distinct own.transactionid::text
               from pg_locks own
              where own.locktype = 'transactionid' and own.granted
                and exists (
                  select from pg_locks relation
                   where relation.virtualtransaction = own.virtualtransaction and relation.locktype = 'relation'
                     and relation.database = (select oid from pg_database where datname = current_database()))
           ) as xids`.execute(db);
  return rows[0]!;
}
