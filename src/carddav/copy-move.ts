import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { findCard, ifMatchHolds, moveCard } from '../contacts/cards.service.js';
import { DavError, shortened } from './errors.js';
import { cardNameOfHref, hrefs } from './resources.js';
import { CARDDAV } from './xml.js';

/*
 * COPY and MOVE (RFC 4918 §9.8, §9.9) of a card within its book, the only place a card can go
 * (docs/carddav.md). A MOVE renames: the contact keeps its id. A COPY would put a second card with
 * the same UID into the book, which RFC 6352 §6.3.2.1 (CARDDAV:no-uid-conflict) forbids, so it is
 * always 409 once its other preconditions hold. Collections are neither copied nor moved (403).
 */

/** A Destination is echoed nowhere, but read whole: far above any path of this face. */
const MAX_DESTINATION_CHARS = 4096;

/** The card name the Destination header names in the caller's book: 400 when missing or malformed, 502 on another server, 403 elsewhere here. */
function destinationName(request: FastifyRequest, userId: number): string {
  const header = request.headers.destination;
  if (typeof header !== 'string' || header.trim() === '') throw new DavError(400, 'COPY and MOVE need a Destination header');
  if (header.length > MAX_DESTINATION_CHARS)
    throw new DavError(400, `The Destination holds ${header.length} characters: at most ${MAX_DESTINATION_CHARS}`);
  let here: URL;
  let url: URL;
  try {
    here = new URL(`http://${request.headers.host ?? 'localhost'}`);
    url = new URL(header.trim(), here);
  } catch {
    throw new DavError(400, `Malformed Destination '${shortened(header)}'`);
  }
  // RFC 4918 §9.8.5, §9.9.4: 502 when the destination is on another server (behind a proxy, the scheme and port may differ).
  if (url.hostname !== here.hostname) throw new DavError(502, 'The Destination is on another server');
  const name = cardNameOfHref(url.pathname, userId);
  if (name === null) throw new DavError(403, 'A card can only be copied or moved to a card of its own address book');
  return name;
}

/** RFC 4918 §10.6: `Overwrite` is T (the default) or F; anything else is 400. */
function overwriteOf(request: FastifyRequest): boolean {
  const header = request.headers.overwrite;
  if (header === undefined) return true;
  const value = String(header).trim().toUpperCase();
  if (value === 'T' || value === 'F') return value === 'T';
  throw new DavError(400, `Invalid Overwrite header '${shortened(String(header))}': T or F`);
}

const SAME = 'The source and the destination are the same card';
const EXISTS = 'Precondition Failed: the destination exists and Overwrite is F';
const CHANGED = 'Precondition Failed: the contact has changed';

/** COPY or MOVE of the caller's card `name` (the request's method says which). */
export async function copyOrMoveCard(
  app: FastifyInstance,
  request: FastifyRequest,
  reply: FastifyReply,
  userId: number,
  name: string,
): Promise<FastifyReply> {
  const to = destinationName(request, userId);
  // A COPY or MOVE writes a card as a PUT does, and counts in its bucket.
  await app.countPerUser(request, reply, 'card-put', userId);
  const overwrite = overwriteOf(request);
  const ifMatch = request.headers['if-match'];
  if (request.method === 'COPY') {
    const [source, target] = await Promise.all([findCard(app, userId, name), findCard(app, userId, to)]);
    if (!source) throw new DavError(404, 'Not Found');
    if (target?.id === source.id) throw new DavError(403, SAME);
    if (!ifMatchHolds(ifMatch, source)) throw new DavError(412, CHANGED);
    if (target && !overwrite) throw new DavError(412, EXISTS);
    throw new DavError(409, 'A card of this address book already has this UID: the card being copied', {
      ns: CARDDAV,
      name: 'no-uid-conflict',
      hrefs: [hrefs.card(userId, source.name)],
    });
  }
  const outcome = await moveCard(app, userId, name, to, { ifMatch, overwrite });
  if (outcome === 'missing') throw new DavError(404, 'Not Found');
  if (outcome === 'same') throw new DavError(403, SAME);
  if (outcome === 'precondition') throw new DavError(412, CHANGED);
  if (outcome === 'exists') throw new DavError(412, EXISTS);
  return reply
    .code(outcome.created ? 201 : 204)
    .header('ETag', outcome.card.etag)
    .send();
}

/** RFC 4918 §9.8.5, §9.9.4: a collection (the root, a principal, the home, the book) is neither copied nor moved. */
export function refuseCollectionCopyOrMove(): never {
  throw new DavError(403, 'Collections cannot be copied or moved');
}
