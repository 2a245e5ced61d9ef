import type { FastifyInstance } from 'fastify';
import { BadRequest, HttpError } from '../../plugins/http/errors.js';
import type { components } from '../generated/openapi.js';
import { toContact } from './contacts.service.js';
import { decodeSyncToken, encodeSyncToken, type SyncState, SyncTokenError } from './sync-token.js';
import * as repository from './sync.repository.js';

/*
 * Incremental sync that misses no change, however writes interleave. Each owner's address book
 * counts the owner's changes: every contact row carries the position of its last write, and every
 * deletion leaves a tombstone with its position (triggers: migration 033). A round reads all
 * changes from its frontier on, where a frontier is one past the owner's latest position when it
 * was taken (sync.repository.ts ownerFrontier). An owner's writes take the book's row lock in turn,
 * so a change below the frontier had committed, and the round before saw it; one at or above it is
 * read by the round that starts there, whenever it commits and through whichever instance or node.
 * Each round's frontier for the next one is taken before the round reads anything. A change can
 * therefore be read twice (harmless: the client puts the same state again), never not at all.
 */

type SyncPage = components['schemas']['SyncPage'];

/** What sync needs from the app. */
type SyncDeps = Pick<FastifyInstance, 'db' | 'config' | 'now'>;

const DAY_MS = 86_400_000;
/**
 * Tombstones outlive the tokens that may need them by a day. A deletion is stamped with the
 * database's clock when its transaction began, which can be well before the frontier that needs it
 * (a transaction open for a while), and each instance judges a token's age by its own clock, which
 * differs from the database's and from the other instances'. Purged at exactly the retention, a
 * tombstone could go while some instance still accepts a token whose next delta must tell it.
 */
const PURGE_MARGIN_MS = DAY_MS;

/** Forgets the owner's tombstones past the retention (and its margin), as every sync of either face does. */
export async function purgeTombstones(deps: SyncDeps, ownerId: number, now: number): Promise<void> {
  await repository.purgeTombstones(deps.db, ownerId, new Date(now - deps.config.syncTombstoneDays * DAY_MS - PURGE_MARGIN_MS));
}

/** A page of the owner's changes since `token` (everything without one); see the comment above. */
export async function syncContacts(deps: SyncDeps, ownerId: number, token: string | undefined, limit: number): Promise<SyncPage> {
  const now = deps.now().getTime();
  const retentionMs = deps.config.syncTombstoneDays * DAY_MS;
  let state: SyncState;
  try {
    state =
      token === undefined
        ? await fullSyncStart(deps, ownerId, now)
        : decodeSyncToken(deps.config.jwtSecret, token, ownerId, now, retentionMs);
  } catch (error) {
    if (error instanceof SyncTokenError) throw error.expired ? new HttpError(410, error.message) : new BadRequest(error.message);
    throw error;
  }
  await purgeTombstones(deps, ownerId, now);
  const { contacts, deleted, next, hasMore } =
    state.phase === 'full' ? await fullPage(deps, ownerId, state, limit) : await deltaPage(deps, ownerId, state, limit, now);
  return { contacts, deleted, next_token: encodeSyncToken(deps.config.jwtSecret, ownerId, next), has_more: hasMore };
}

interface Page {
  contacts: SyncPage['contacts'];
  deleted: number[];
  next: SyncState;
  hasMore: boolean;
}

/** A full sync: its delta rounds will start from the frontier taken before its first page is read. */
async function fullSyncStart(deps: SyncDeps, ownerId: number, now: number): Promise<SyncState> {
  return { phase: 'full', since: await repository.ownerFrontier(deps.db, ownerId), sinceAt: now, afterId: 0 };
}

async function fullPage(deps: SyncDeps, ownerId: number, state: Extract<SyncState, { phase: 'full' }>, limit: number): Promise<Page> {
  const rows = await repository.contactsAfter(deps.db, ownerId, state.afterId, limit + 1);
  const page = rows.slice(0, limit);
  const hasMore = rows.length > limit;
  const next: SyncState = hasMore
    ? { ...state, afterId: page.at(-1)!.id }
    : { phase: 'delta', since: state.since, sinceAt: state.sinceAt, after: null, next: null, nextAt: null };
  return { contacts: page.map(toContact), deleted: [], next, hasMore };
}

async function deltaPage(
  deps: SyncDeps,
  ownerId: number,
  state: Extract<SyncState, { phase: 'delta' }>,
  limit: number,
  now: number,
): Promise<Page> {
  // A round begins: the next round's frontier is taken before this round reads anything.
  const round =
    state.next === null
      ? { next: await repository.ownerFrontier(deps.db, ownerId), nextAt: now }
      : { next: state.next, nextAt: state.nextAt! };
  const changes = await repository.changesSince(deps.db, ownerId, state.since, state.after, limit + 1);
  const page = changes.slice(0, limit);
  const hasMore = changes.length > limit;
  const written = await repository.contactsByIds(
    deps.db,
    ownerId,
    page.filter((change) => !change.deleted).map((change) => change.id),
  );
  const last = page.at(-1);
  const next: SyncState =
    hasMore && last
      ? { ...state, after: { position: last.position, id: last.id }, ...round }
      : { phase: 'delta', since: round.next, sinceAt: round.nextAt, after: null, next: null, nextAt: null };
  return {
    // Deleted since the change was read: its tombstone is at or above the next frontier, so the next round says so.
    contacts: written.sort((a, b) => a.id - b.id).map(toContact),
    // A negative id is the tombstone of a card's old name (a CardDAV MOVE): the contact lives on.
    deleted: page.filter((change) => change.deleted && change.id > 0).map((change) => change.id),
    next,
    hasMore,
  };
}
