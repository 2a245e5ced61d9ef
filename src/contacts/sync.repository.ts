import { type Kysely, sql } from 'kysely';
import type { Database } from '../db/database.js';
import { type ContactRow, CONTACT_COLUMNS } from './contacts.repository.js';

/** One change of a sync round: a contact written, or one deleted, at the owner's change `position`. */
export interface Change {
  position: string;
  id: number;
  deleted: boolean;
  /** For a deletion: the resource name a CardDAV client chose for the card, if it did. */
  card_name: string | null;
}

/**
 * The frontier of one owner's sync round: one past the position of the owner's latest change, as
 * the address book holds it (migration 033), "1" for an owner with none. Each change of the owner
 * takes the book's row lock until it commits, so positions commit in order: every change at or
 * below the one seen here is visible to every later read, and every change not yet visible gets a
 * position above it. A position is the owner's own, so it means the same on any node (a promoted
 * standby, another shard) as on this one.
 */
export async function ownerFrontier(db: Kysely<Database>, ownerId: number): Promise<string> {
  const book = await db.selectFrom('address_books').select('sync_position').where('owner_id', '=', ownerId).executeTakeFirst();
  return (BigInt(book?.sync_position ?? 0) + 1n).toString();
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
 * Up to `limit` of the owner's changes at positions from `since` on, after change `after`, in
 * (position, id) order: contacts as last written, and tombstones of deleted ones. A row written
 * again moves to its new position, so it is read once, in its latest state.
 */
export async function changesSince(
  db: Kysely<Database>,
  ownerId: number,
  since: string,
  after: { position: string; id: number } | null,
  limit: number,
): Promise<Change[]> {
  // Below every id: a tombstone of a moved card's old name has a negative one (renameCard).
  const from = after ?? { position: since, id: -2_147_483_648 };
  const { rows } = await sql<Change>`
    select position, id, deleted, card_name from (
      select change_position::text as position, change_position, id, false as deleted, null::text as card_name from contacts
       where owner_id = ${ownerId} and change_position >= ${since}::bigint and (change_position, id) > (${from.position}::bigint, ${from.id})
      union all
      select change_position::text, change_position, contact_id, true, card_name from contact_tombstones
       where owner_id = ${ownerId} and change_position >= ${since}::bigint and (change_position, contact_id) > (${from.position}::bigint, ${from.id})
    ) changes
    order by change_position, id
    limit ${limit}`.execute(db);
  return rows;
}

/** The owner's contacts with these ids, as they are now (a contact deleted meanwhile is missing). */
export function contactsByIds(db: Kysely<Database>, ownerId: number, ids: readonly number[]): Promise<ContactRow[]> {
  if (ids.length === 0) return Promise.resolve([]);
  return db.selectFrom('contacts').select(CONTACT_COLUMNS).where('owner_id', '=', ownerId).where('id', 'in', ids).execute();
}

/**
 * Forgets the owner's tombstones older than `before`, and records the newest position a purge
 * forgot, in the same statement: a CardDAV token at or below it is refused (card-sync.service.ts).
 */
export async function purgeTombstones(db: Kysely<Database>, ownerId: number, before: Date): Promise<void> {
  await sql`
    with purged as (delete from contact_tombstones where owner_id = ${ownerId} and deleted_at < ${before} returning change_position)
    insert into tombstone_horizons as horizons (owner_id, purged_position)
    select ${ownerId}::integer, max(change_position) from purged having count(*) > 0
    on conflict (owner_id) do update set purged_position = greatest(horizons.purged_position, excluded.purged_position)`.execute(db);
}

/** The newest position of the owner's that a purge forgot, or null when none ever was. */
export async function purgedHorizon(db: Kysely<Database>, ownerId: number): Promise<string | null> {
  const row = await db
    .selectFrom('tombstone_horizons')
    .select(sql<string>`purged_position::text`.as('position'))
    .where('owner_id', '=', ownerId)
    .executeTakeFirst();
  return row?.position ?? null;
}
