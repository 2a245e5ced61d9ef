import { createHmac, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { listCardIds } from './cards.service.js';
import { derivedCardName } from './cards.js';
import { purgeTombstones } from './sync.service.js';
import * as repository from './sync.repository.js';

/*
 * The book's sync token (RFC 6578) and getctag, on the change frontier and tombstones of
 * `GET /api/contacts/sync` (sync.service.ts explains why reading every change from a frontier on
 * misses none). The frontier is one past the position of the owner's latest change, which only the
 * owner's next change moves; signed, it is the token: the same text for the same state.
 *
 * A token is refused as expired only when a tombstone it would have to report is gone: a purge
 * (after SYNC_TOMBSTONE_DAYS and a day) records per owner the newest position it forgot, and a
 * token whose frontier is at or below that cannot be answered. A token's age alone decides nothing:
 * a quiet book hands out the same token for months, and the one just handed out must work. A token
 * handed out before positions (signed under the key label of transaction ids) is refused too.
 */

/** What the card sync needs from the app. */
type CardSyncDeps = Pick<FastifyInstance, 'db' | 'replicas' | 'cache' | 'config' | 'now' | 'largeOwners'>;

const PREFIX = 'urn:contacts-service:sync:';
const MAC_BYTES = 16;

/** Where a client stands: the frontier and, mid-round, how far the round got (positions as decimal text). */
type TokenState =
  /** A book state: every change from frontier `f` on is new to the holder. */
  | { f: string }
  /** Mid-way through the first listing, after contact `a`; the rounds after it start at `f`. */
  | { f: string; a: number }
  /** Mid-way through a round of changes from `f` on, after change (`p`, `i`); the next round starts at `n`. */
  | { f: string; p: string; i: number; n: string };

export class SyncTokenRefused extends Error {}

/** A `D:limit` of 0 while changes wait: no answer within it makes progress (RFC 6578 §3.7). */
export class SyncLimitTooLow extends Error {}

/** The key label of tokens that carry positions; the one before signed tokens of transaction ids. */
const LABEL = 'contacts dav sync token: positions';
const TRANSACTION_ID_LABEL = 'contacts dav sync token';

function mac(secret: string, payload: string, label = LABEL): Buffer {
  const key = createHmac('sha256', secret).update(label).digest();
  return createHmac('sha256', key).update(payload).digest().subarray(0, MAC_BYTES);
}

function encode(secret: string, ownerId: number, state: TokenState): string {
  const payload = Buffer.from(JSON.stringify({ u: ownerId, ...state })).toString('base64url');
  return `${PREFIX}${payload}.${mac(secret, payload).toString('base64url')}`;
}

const POSITION = /^\d{1,20}$/;
const isPosition = (value: unknown): value is string => typeof value === 'string' && POSITION.test(value);
const isCount = (value: unknown): value is number => Number.isSafeInteger(value) && (value as number) >= 0;

/** The owner's claims in `token` if it is well-formed and signed with `secret` under `label`. */
function claimsOf(secret: string, ownerId: number, token: string, label: string): Record<string, unknown> | null {
  if (!token.startsWith(PREFIX)) return null;
  const [payload, signature, ...rest] = token.slice(PREFIX.length).split('.');
  if (!payload || !signature || rest.length > 0) return null;
  const given = Buffer.from(signature, 'base64url');
  if (given.length !== MAC_BYTES || !timingSafeEqual(given, mac(secret, payload, label))) return null;
  let claims: Record<string, unknown>;
  try {
    claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as Record<string, unknown>;
  } catch {
    return null;
  }
  return claims.u === ownerId ? claims : null;
}

function decode(secret: string, ownerId: number, token: string): TokenState | null {
  const claims = claimsOf(secret, ownerId, token, LABEL);
  if (!claims || !isPosition(claims.f)) return null;
  const base = { f: claims.f };
  if ('a' in claims) return isCount(claims.a) ? { ...base, a: claims.a } : null;
  if ('p' in claims)
    return isPosition(claims.p) && isCount(claims.i) && isPosition(claims.n) ? { ...base, p: claims.p, i: claims.i, n: claims.n } : null;
  return base;
}

/** The book's state now, as a token state. */
async function currentState(deps: CardSyncDeps, ownerId: number): Promise<{ f: string }> {
  return { f: await repository.ownerFrontier(deps.db, ownerId) };
}

/** The book's `D:sync-token` (and `CS:getctag`) now. */
export async function bookSyncToken(deps: CardSyncDeps, ownerId: number): Promise<string> {
  return encode(deps.config.jwtSecret, ownerId, await currentState(deps, ownerId));
}

/** A sync-collection answer: contact ids of the cards changed (read by the answer batch by batch), names removed, the token to go on from, and whether more is waiting. */
export interface CardChanges {
  changed: number[];
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
  if (token === '') return firstListing(deps, ownerId, current, max, 0);
  if (token === currentToken) return { changed: [], removed: [], token: currentToken, truncated: false };
  const state = decode(secret, ownerId, token);
  if (!state && claimsOf(secret, ownerId, token, TRANSACTION_ID_LABEL))
    throw new SyncTokenRefused('Sync token from before sync positions: start a full sync');
  if (!state) throw new SyncTokenRefused('Invalid sync token');
  await purgeTombstones(deps, ownerId, now);
  if ('a' in state) return firstListing(deps, ownerId, state, max, state.a);
  const round = 'p' in state ? { next: { f: state.n }, after: { position: state.p, id: state.i } } : { next: current, after: null };
  const changes = await repository.changesSince(deps.db, ownerId, state.f, round.after, max === Number.MAX_SAFE_INTEGER ? max : max + 1);
  // Read after the changes: a purge that took a tombstone from under that read is seen here.
  const horizon = await repository.purgedHorizon(deps.db, ownerId);
  if (horizon !== null && BigInt(horizon) >= BigInt(state.f))
    throw new SyncTokenRefused('Sync token expired: deletions since it was handed out are forgotten; start a full sync');
  const page = changes.slice(0, max);
  const truncated = changes.length > max;
  if (truncated && page.length === 0) throw new SyncLimitTooLow();
  // In the order the changes were made; one deleted since it was read is told by the next round.
  const written = page.filter((change) => !change.deleted).map((change) => change.id);
  const last = page.at(-1);
  const next: TokenState = truncated && last ? { f: state.f, p: last.position, i: last.id, n: round.next.f } : round.next;
  return {
    changed: written,
    removed: page.filter((change) => change.deleted).map((change) => change.card_name ?? derivedCardName(change.id)),
    token: encode(secret, ownerId, next),
    truncated,
  };
}

/** Every card after contact `afterId`, at most `max`; the rounds after it start at `from`. */
async function firstListing(deps: CardSyncDeps, ownerId: number, from: { f: string }, max: number, afterId: number): Promise<CardChanges> {
  const listed = await listCardIds(deps, ownerId, 'latest', afterId, max === Number.MAX_SAFE_INTEGER ? max : max + 1);
  const changed = listed.slice(0, max);
  const truncated = listed.length > max;
  if (truncated && changed.length === 0) throw new SyncLimitTooLow();
  const next: TokenState = truncated ? { f: from.f, a: changed.at(-1)! } : { f: from.f };
  return { changed, removed: [], token: encode(deps.config.jwtSecret, ownerId, next), truncated };
}
