import { createHmac, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { cardsByIds, listCardsWithText, type StoredCard } from './cards.service.js';
import { derivedCardName } from './cards.js';
import { purgeTombstones } from './sync.service.js';
import * as repository from './sync.repository.js';

/*
 * The book's sync token (RFC 6578) and getctag, on the change frontier and tombstones of
 * `GET /api/contacts/sync` (sync.service.ts explains why reading every change of transactions
 * from a frontier on misses none). A book's token must change on every write of its owner and on
 * nothing else, so it is not the bare frontier (the oldest running transaction, which any writer of
 * the cluster moves): it is L + 1, where L is the transaction of the owner's latest visible change,
 * lowered to the oldest running transaction that could still commit a change of this database
 * below it. Every transaction below that frontier has finished or can write nothing here, so it is
 * a valid frontier; in a quiet book it is L + 1, which only the owner's next change moves. Signed,
 * it is the token: the same text for the same state.
 *
 * A token is refused as expired only when a tombstone it would have to report is gone: a purge
 * (after SYNC_TOMBSTONE_DAYS and a day) records per owner the newest change it forgot, and a token
 * whose frontier is at or below that cannot be answered. A token's age alone decides nothing: a
 * quiet book hands out the same token for months, and the one just handed out must work.
 *
 * Which running transactions can write here: each one holding a lock on a relation of this
 * database (a writer of a table holds one from its first write to its end), found in pg_locks
 * before the book's snapshot is taken, and any transaction that began after that scan. Another
 * database's long transaction (a neighbour on a shared cluster) then leaves the token alone.
 */

/** What the card sync needs from the app. */
type CardSyncDeps = Pick<FastifyInstance, 'db' | 'cache' | 'config' | 'now' | 'largeOwners'>;

const PREFIX = 'urn:contacts-service:sync:';
const MAC_BYTES = 16;

/** Where a client stands: the frontier and, mid-round, how far the round got. */
type TokenState =
  /** A book state: every change from frontier `f` on is new to the holder. */
  | { f: string }
  /** Mid-way through the first listing, after contact `a`; the rounds after it start at `f`. */
  | { f: string; a: number }
  /** Mid-way through a round of changes from `f` on, after change (`x`, `i`); the next round starts at `n`. */
  | { f: string; x: string; i: number; n: string };

export class SyncTokenRefused extends Error {}

/** A `D:limit` of 0 while changes wait: no answer within it makes progress (RFC 6578 §3.7). */
export class SyncLimitTooLow extends Error {}

function mac(secret: string, payload: string): Buffer {
  const key = createHmac('sha256', secret).update('contacts dav sync token').digest();
  return createHmac('sha256', key).update(payload).digest().subarray(0, MAC_BYTES);
}

function encode(secret: string, ownerId: number, state: TokenState): string {
  const payload = Buffer.from(JSON.stringify({ u: ownerId, ...state })).toString('base64url');
  return `${PREFIX}${payload}.${mac(secret, payload).toString('base64url')}`;
}

const XID = /^\d{1,20}$/;
const isXid = (value: unknown): value is string => typeof value === 'string' && XID.test(value);
const isCount = (value: unknown): value is number => Number.isSafeInteger(value) && (value as number) >= 0;

function decode(secret: string, ownerId: number, token: string): TokenState | null {
  if (!token.startsWith(PREFIX)) return null;
  const [payload, signature, ...rest] = token.slice(PREFIX.length).split('.');
  if (!payload || !signature || rest.length > 0) return null;
  const given = Buffer.from(signature, 'base64url');
  if (given.length !== MAC_BYTES || !timingSafeEqual(given, mac(secret, payload))) return null;
  let claims: Record<string, unknown>;
  try {
    claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as Record<string, unknown>;
  } catch {
    return null;
  }
  if (claims.u !== ownerId || !isXid(claims.f)) return null;
  const base = { f: claims.f };
  if ('a' in claims) return isCount(claims.a) ? { ...base, a: claims.a } : null;
  if ('x' in claims)
    return isXid(claims.x) && isCount(claims.i) && isXid(claims.n) ? { ...base, x: claims.x, i: claims.i, n: claims.n } : null;
  return base;
}

const XID_SPACE = 1n << 32n;

/** A 32-bit transaction id (pg_locks) as the 64-bit one, in the epoch just below `next`. */
function fullXid(xid: string, next: bigint): bigint {
  const full = (next / XID_SPACE) * XID_SPACE + BigInt(xid);
  return full >= next ? full - XID_SPACE : full;
}

/** The book's state now, as a token state. */
async function currentState(deps: CardSyncDeps, ownerId: number): Promise<{ f: string }> {
  let state = await repository.bookState(deps.db, ownerId);
  if (state.latestXid === null) return { f: '0' };
  const next = BigInt(state.latestXid) + 1n;
  if (BigInt(state.xmin) >= next) return { f: next.toString() };
  // Some transaction below L + 1 still runs: it holds the frontier back only if it can write here.
  const writers = await repository.localWriters(deps.db);
  state = await repository.bookState(deps.db, ownerId);
  const scanned = BigInt(writers.next);
  const local = new Set(writers.xids.map((xid) => fullXid(xid, scanned)));
  const latest = BigInt(state.latestXid ?? '0') + 1n;
  const blocking = state.running.map(BigInt).filter((xid) => xid < latest && (xid >= scanned || local.has(xid)));
  const frontier = blocking.reduce((lowest, xid) => (xid < lowest ? xid : lowest), latest);
  return { f: frontier.toString() };
}

/** The book's `D:sync-token` (and `CS:getctag`) now. */
export async function bookSyncToken(deps: CardSyncDeps, ownerId: number): Promise<string> {
  return encode(deps.config.jwtSecret, ownerId, await currentState(deps, ownerId));
}

/** A sync-collection answer: cards changed (with their text), names removed, the token to go on from, and whether more is waiting. */
export interface CardChanges {
  changed: StoredCard[];
  removed: string[];
  token: string;
  truncated: boolean;
}

/**
 * The owner's changes since `token` (every card for an empty one), at most `limit` (none: all), in
 * the order they were made. SyncTokenRefused for a token that is malformed, another user's, or
 * below the purged tombstones; SyncLimitTooLow for a limit of 0 while changes wait.
 */
export async function cardChanges(deps: CardSyncDeps, ownerId: number, token: string, limit: number | null): Promise<CardChanges> {
  const secret = deps.config.jwtSecret;
  const now = deps.now().getTime();
  // Taken before anything is read: a change that lands meanwhile is read again next time, never missed.
  const current = await currentState(deps, ownerId);
  const currentToken = encode(secret, ownerId, current);
  const max = limit ?? Number.MAX_SAFE_INTEGER;
  const cards = (ids: number[]) => cardsByIds(deps, ownerId, ids);
  if (token === '') return firstListing(deps, ownerId, current, max, 0);
  if (token === currentToken) return { changed: [], removed: [], token: currentToken, truncated: false };
  const state = decode(secret, ownerId, token);
  if (!state) throw new SyncTokenRefused('Invalid sync token');
  await purgeTombstones(deps, now);
  if ('a' in state) return firstListing(deps, ownerId, state, max, state.a);
  const round = 'x' in state ? { next: { f: state.n }, after: { xid: state.x, id: state.i } } : { next: current, after: null };
  const changes = await repository.changesSince(deps.db, ownerId, state.f, round.after, max === Number.MAX_SAFE_INTEGER ? max : max + 1);
  // Read after the changes: a purge that took a tombstone from under that read is seen here.
  const horizon = await repository.purgedHorizon(deps.db, ownerId);
  if (horizon !== null && BigInt(horizon) >= BigInt(state.f))
    throw new SyncTokenRefused('Sync token expired: deletions since it was handed out are forgotten; start a full sync');
  const page = changes.slice(0, max);
  const truncated = changes.length > max;
  if (truncated && page.length === 0) throw new SyncLimitTooLow();
  const writtenIds = page.filter((change) => !change.deleted).map((change) => change.id);
  const byId = new Map((await cards(writtenIds)).map((card) => [card.id, card]));
  // In the order the changes were made; one deleted since it was read is told by the next round.
  const written = writtenIds.flatMap((id) => byId.get(id) ?? []);
  const last = page.at(-1);
  const next: TokenState = truncated && last ? { f: state.f, x: last.xid, i: last.id, n: round.next.f } : round.next;
  // A name a card was moved onto (RFC 4918 §9.9, Overwrite) is that card's now, not a removed one.
  const names = new Set(written.map((card) => card.name));
  return {
    changed: written,
    removed: page
      .filter((change) => change.deleted)
      .map((change) => change.card_name ?? derivedCardName(change.id))
      .filter((name) => !names.has(name)),
    token: encode(secret, ownerId, next),
    truncated,
  };
}

/** Every card after contact `afterId`, at most `max`; the rounds after it start at `from`. */
async function firstListing(deps: CardSyncDeps, ownerId: number, from: { f: string }, max: number, afterId: number): Promise<CardChanges> {
  const listed = await listCardsWithText(deps, ownerId, afterId, max === Number.MAX_SAFE_INTEGER ? max : max + 1);
  const changed = listed.slice(0, max);
  const truncated = listed.length > max;
  if (truncated && changed.length === 0) throw new SyncLimitTooLow();
  const next: TokenState = truncated ? { f: from.f, a: changed.at(-1)!.id } : { f: from.f };
  return { changed, removed: [], token: encode(deps.config.jwtSecret, ownerId, next), truncated };
}
