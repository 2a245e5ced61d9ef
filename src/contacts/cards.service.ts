import { listedTags } from '../../plugins/http/conditional.js';
import {
  CardRefused,
  derivedCardName,
  derivedUid,
  idOfDerivedCardName,
  idOfDerivedUid,
  type ReadCard,
  readCard,
  renderedCard,
} from './cards.js';
import * as repository from './contacts.repository.js';
import type { CardRow, CardSummary, ContactFields } from './contacts.repository.js';
import { type ContactsDeps, contactTag, createFromCard, type Freshness, invalidate, readingOwner, toContact } from './contacts.service.js';

/*
 * The contacts as cards: what the CardDAV face (src/carddav/) reads and writes, through the same
 * repository, tags, cache invalidation and sync frontier as the REST face (docs/carddav.md).
 */

export { CardRefused };

/** A card as the CardDAV face serves it. */
export interface StoredCard {
  id: number;
  /** The resource name in the book. */
  name: string;
  /** The strong tag, the same as REST's ETag of the contact. */
  etag: string;
  updatedAt: Date;
  /** The card's text; undefined when only its length was read. */
  text?: string;
  /** Octets of the text (worked out when asked: a listing rarely needs it). */
  octets: () => number;
}

/** A PUT that could not be done, for the CardDAV face to answer (412, or 409 naming a card). */
export class CardWriteRefused extends Error {
  constructor(
    readonly reason: 'precondition' | 'uid-conflict',
    /** For a UID conflict: the resource name of the card holding the UID. */
    readonly holder?: string,
  ) {
    super(reason);
  }
}

function nameOf(row: Pick<CardRow, 'id' | 'card_name'>): string {
  return row.card_name ?? derivedCardName(row.id);
}

/** A card row as served: a client's text as stored, else the card rendered from the fields. */
export function storedCard(row: CardRow): StoredCard {
  const contact = toContact(row);
  const text = row.card ?? renderedCard(contact);
  return {
    id: row.id,
    name: nameOf(row),
    etag: contactTag(contact),
    updatedAt: row.updated_at,
    text,
    octets: () => Buffer.byteLength(text),
  };
}

function summarized(row: CardSummary): StoredCard {
  const contact = toContact(row);
  const octets = () => row.card_octets ?? Buffer.byteLength(renderedCard(contact));
  return { id: row.id, name: nameOf(row), etag: contactTag(contact), updatedAt: row.updated_at, octets };
}

/** The owner's card named `name`, or undefined. */
export async function findCard(
  deps: ContactsDeps,
  ownerId: number,
  name: string,
  freshness: Freshness = 'latest',
): Promise<StoredCard | undefined> {
  const row = await readingOwner(deps, ownerId, freshness, (db) =>
    repository.findCardRowByName(db, ownerId, name, idOfDerivedCardName(name)),
  );
  return row && storedCard(row);
}

/** The owner's contact ids of the cards with these names, by name (a name that is none is left out). */
export async function cardIdsByName(
  deps: ContactsDeps,
  ownerId: number,
  names: readonly string[],
  freshness: Freshness = 'latest',
): Promise<Map<string, number>> {
  const derived = names.flatMap((name) => {
    const id = idOfDerivedCardName(name);
    return id === null ? [] : [id];
  });
  const wanted = new Set(names);
  const rows = await readingOwner(deps, ownerId, freshness, (db) => repository.findCardNames(db, ownerId, derived, names));
  return new Map(rows.filter((row) => wanted.has(nameOf(row))).map((row) => [nameOf(row), row.id]));
}

/** Up to `limit` of the owner's contact ids after `afterId`, in id order. */
export async function listCardIds(
  deps: ContactsDeps,
  ownerId: number,
  freshness: Freshness = 'latest',
  afterId = 0,
  limit = Number.MAX_SAFE_INTEGER,
): Promise<number[]> {
  return readingOwner(deps, ownerId, freshness, (db) => repository.listCardIds(db, ownerId, afterId, limit));
}

/**
 * A batch of a streamed answer (docs/limits.md, "CardDAV"): at most 500 cards and 256 KiB of card
 * text (one card more when a single one is larger), so that the cards in flight of a read never
 * grow with the book. Without the text, 100 cards: each row still holds its `additional_data`.
 */
export const BATCH_CARDS = 500;
export const BATCH_OCTETS = 256 * 1024;
const SUMMARY_BATCH_CARDS = 100;

/**
 * The owner's cards with these contact ids, in their order, batch by batch (with the text when
 * `withText`); an id that is no longer a contact is left out. Each batch is read and its
 * connection released before it is yielded, so a slow reader holds no database connection.
 */
export async function* cardBatches(
  deps: ContactsDeps,
  ownerId: number,
  ids: readonly number[],
  withText: boolean,
  freshness: Freshness = 'latest',
): AsyncGenerator<StoredCard[]> {
  for (let at = 0; at < ids.length;) {
    let batch: readonly number[];
    if (withText) {
      const window = ids.slice(at, at + BATCH_CARDS);
      const octets = await readingOwner(deps, ownerId, freshness, (db) => repository.cardOctets(db, ownerId, window));
      let total = 0;
      let take = 0;
      for (const id of window) {
        total += octets.get(id) ?? 0;
        if (take > 0 && total > BATCH_OCTETS) break;
        take++;
      }
      batch = window.slice(0, take);
    } else batch = ids.slice(at, at + SUMMARY_BATCH_CARDS);
    at += batch.length;
    const distinct = [...new Set(batch)];
    const cards = await readingOwner(deps, ownerId, freshness, async (db) =>
      withText
        ? (await repository.findCardRows(db, ownerId, distinct)).map(storedCard)
        : (await repository.findCardSummaries(db, ownerId, distinct)).map(summarized),
    );
    const byId = new Map(cards.map((card) => [card.id, card]));
    yield batch.flatMap((id) => byId.get(id) ?? []);
  }
}

/** Preconditions of a card PUT (RFC 7232): `If-Match` tags, `If-None-Match: *`. */
export interface PutConditions {
  ifMatch?: string;
  ifNoneMatch?: string;
}

/** Whether the `If-Match` header lets a write of `card` through (strong comparison; `*` any existing card). */
export function ifMatchHolds(ifMatch: string | undefined, card: StoredCard | undefined): boolean {
  if (ifMatch === undefined) return true;
  if (!card) return false;
  const tags = listedTags(ifMatch);
  return tags === '*' || tags.includes(card.etag);
}

/** Whether `If-None-Match` (`*`, or tags) lets a write of `card` through. */
function ifNoneMatchHolds(ifNoneMatch: string | undefined, card: StoredCard | undefined): boolean {
  if (ifNoneMatch === undefined || !card) return true;
  const tags = listedTags(ifNoneMatch);
  return tags !== '*' && !tags.map((tag) => tag.replace(/^W\//, '')).includes(card.etag);
}

/** Throws CardWriteRefused('precondition') when a PUT of `name` under `conditions` would fail them. */
export async function checkPutPreconditions(deps: ContactsDeps, ownerId: number, name: string, conditions: PutConditions): Promise<void> {
  const existing = await findCard(deps, ownerId, name);
  if (!ifMatchHolds(conditions.ifMatch, existing) || !ifNoneMatchHolds(conditions.ifNoneMatch, existing))
    throw new CardWriteRefused('precondition');
}

/**
 * The contact fields of a card: the mapped ones, with `email` the first address no other contact
 * of the owner holds (ignoring case), or null (docs/carddav.md). `held` maps addresses to holders.
 */
function fieldsOf(read: ReadCard, held: Map<string, number>, selfId: number | null): ContactFields {
  const { emails, ...fields } = read.fields;
  const email = emails.find((candidate) => [undefined, selfId].includes(held.get(candidate.toLowerCase()))) ?? null;
  return { ...fields, email };
}

/**
 * A card PUT that would take the owner's stored card text past CARDS_MAX_BYTES_PER_USER: 507 with
 * DAV:quota-not-exceeded (RFC 4331 §6). Nothing was written.
 */
export class CardQuotaExceeded extends Error {}

/**
 * Refuses a write that replaces `oldOctets` of the owner's card text with `newOctets` when the
 * owner would then store more than `max`. A write that does not grow the text always passes, so a
 * card can be made smaller (or deleted) even past a lowered quota. The check reads before the
 * write: the owner's PUTs in flight at once may pass it together, each by one card at most
 * (docs/limits.md).
 */
async function checkCardQuota(deps: ContactsDeps, ownerId: number, oldOctets: number, newOctets: number): Promise<void> {
  const growth = newOctets - oldOctets;
  if (growth <= 0) return;
  const max = deps.config.cardsMaxBytesPerUser;
  const used = await repository.storedCardOctets(deps.db, ownerId);
  if (used + growth > max) {
    throw new CardQuotaExceeded(
      `Card storage limit reached: a user may store at most ${max} octets of cards, and ${used} are stored; this card needs ${growth} more`,
    );
  }
}

/** A write of a stored card found by a unique index to collide: which one. */
async function attempt<T>(write: () => Promise<T>): Promise<T | 'retry' | 'uid'> {
  try {
    return await write();
  } catch (error) {
    if (repository.isDuplicateEmail(error)) return 'retry';
    const index = repository.cardUniquenessRefused(error);
    if (index === 'card_name') return 'retry';
    if (index === 'uid') return 'uid';
    throw error;
  }
}

/**
 * Stores `text` as the owner's card `name`: a create (`created: true`) or a replace. Order of
 * refusals (docs/carddav.md): preconditions (CardWriteRefused 'precondition', 412), then the card's
 * content (CardRefused, 403), then its UID (CardWriteRefused 'uid-conflict', 409). A write of any
 * face that lands between the checks and this write is retried against; under If-Match it then
 * fails the precondition, so of two conditional writers holding the same tag exactly one wins.
 */
export async function putCard(
  deps: ContactsDeps,
  ownerId: number,
  name: string,
  text: string,
  conditions: PutConditions,
): Promise<{ created: boolean; card: StoredCard }> {
  for (;;) {
    const now = deps.now();
    let read: ReadCard | null = null;
    let refused: unknown = null;
    try {
      read = readCard(text, now);
    } catch (error) {
      refused = error;
    }
    // The three reads are independent: one round trip's wait on a pool of connections.
    const [row, holders, held] = await Promise.all([
      repository.findCardRowByName(deps.db, ownerId, name, idOfDerivedCardName(name)),
      read ? repository.findUidHolders(deps.db, ownerId, read.uid, idOfDerivedUid(read.uid)) : [],
      read ? repository.heldEmails(deps.db, ownerId, read.fields.emails) : new Map<string, number>(),
    ]);
    const existing = row && storedCard(row);
    if (!ifMatchHolds(conditions.ifMatch, existing) || !ifNoneMatchHolds(conditions.ifNoneMatch, existing))
      throw new CardWriteRefused('precondition');
    if (!read) throw refused;
    const currentUid = row ? (row.uid ?? derivedUid(row.id)) : null;
    if (currentUid !== null && currentUid !== read.uid) throw new CardWriteRefused('uid-conflict', name);
    const holder = holders.find((candidate) => candidate.id !== row?.id);
    if (holder) throw new CardWriteRefused('uid-conflict', nameOf(holder));
    await checkCardQuota(deps, ownerId, row?.card ? Buffer.byteLength(row.card) : 0, Buffer.byteLength(text));
    const fields = fieldsOf(read, held, row?.id ?? null);
    const outcome = await attempt(async () => {
      if (existing) {
        // The version read above: a write in between sends this PUT round again.
        const uid = read.uid === derivedUid(existing.id) ? null : read.uid;
        const written = await repository.updateCardContact(deps.db, ownerId, existing.id, fields, { card: text, uid }, now, [
          existing.updatedAt,
        ]);
        return written && { created: false, card: storedCard(written) };
      }
      const inserted = await createFromCard(deps, ownerId, fields, { card: text, card_name: name, uid: read.uid }, now);
      return { created: true, card: storedCard(inserted) };
    });
    if (outcome === 'uid') continue;
    if (outcome !== 'retry' && outcome !== undefined) {
      await invalidate(deps, ownerId);
      return outcome;
    }
  }
}

/** Deletes the owner's card `name` if `If-Match` holds: 'missing' (404), 'precondition' (412) or 'deleted'. */
export async function deleteCard(
  deps: ContactsDeps,
  ownerId: number,
  name: string,
  ifMatch: string | undefined,
): Promise<'deleted' | 'missing' | 'precondition'> {
  for (;;) {
    const existing = await findCard(deps, ownerId, name);
    if (!existing) return 'missing';
    if (!ifMatchHolds(ifMatch, existing)) return 'precondition';
    if (await repository.deleteContact(deps.db, ownerId, existing.id, [existing.updatedAt])) {
      await invalidate(deps, ownerId);
      return 'deleted';
    }
  }
}

/**
 * What a MOVE of a card did, or why it did not: no source (404), a failed If-Match or Overwrite: F
 * onto a card (412), or a destination that is the source under another name (403).
 */
export type MoveOutcome = { created: boolean; card: StoredCard } | 'missing' | 'precondition' | 'exists' | 'same';

/**
 * Renames the owner's card `from` to `to` (RFC 4918 §9.9 within one book): the contact keeps its
 * id, fields and ETag; a card at `to` is deleted first when `overwrite` allows it. Sync reports
 * `from` removed and the card added at `to`. Retried when a write of either card lands in between.
 */
export async function moveCard(
  deps: ContactsDeps,
  ownerId: number,
  from: string,
  to: string,
  conditions: { ifMatch?: string; overwrite: boolean },
): Promise<MoveOutcome> {
  for (;;) {
    const [source, target] = await Promise.all([findCard(deps, ownerId, from), findCard(deps, ownerId, to)]);
    if (!source) return 'missing';
    if (target?.id === source.id) return 'same';
    if (!ifMatchHolds(conditions.ifMatch, source)) return 'precondition';
    if (target && !conditions.overwrite) return 'exists';
    try {
      const moved = await deps.db.transaction().execute(async (trx) => {
        if (target && !(await repository.deleteContact(trx, ownerId, target.id, [target.updatedAt]))) return undefined;
        return repository.renameCard(trx, ownerId, source.id, [source.updatedAt], to, from);
      });
      if (moved) {
        await invalidate(deps, ownerId);
        return { created: !target, card: storedCard(moved) };
      }
    } catch (error) {
      // A card PUT at `to` meanwhile: round again, to find it.
      if (repository.cardUniquenessRefused(error) !== 'card_name') throw error;
    }
  }
}
