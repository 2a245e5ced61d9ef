import { METHODS } from 'node:http';
import { Readable } from 'node:stream';
import { TextDecoder } from 'node:util';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { namesTag } from '../../plugins/http/conditional.js';
import { Unauthorized } from '../../plugins/http/errors.js';
import { bookSyncToken, cardChanges, SyncLimitTooLow, SyncTokenRefused } from '../contacts/card-sync.service.js';
import {
  CardQuotaExceeded,
  CardRefused,
  CardWriteRefused,
  checkPutPreconditions,
  deleteCard,
  findCard,
  BATCH_CARDS,
  cardBatches,
  cardIdsByName,
  listCardIds,
  putCard,
  type StoredCard,
} from '../contacts/cards.service.js';
import { ContactQuotaExceeded } from '../contacts/contacts.service.js';
import { findUserById } from '../users/users.repository.js';
import { verifyAppPassword } from '../users/app-passwords.service.js';
import { compileFilter, FilterRefused } from './address-data.js';
import { BASIC_CHALLENGE, davErrorHandler, DavError, sendDavError, shortened, XML_TYPE } from './errors.js';
import {
  bookProperties,
  boundedNames,
  cardResponse,
  homeProperties,
  key,
  multistatusChunks,
  multistatusDocument,
  principalProperties,
  type PropertyRequest,
  type PropertySet,
  propertyRequestOf,
  protectedResponse,
  rootProperties,
  setResponse,
  statusResponse,
  truncatedResponse,
  type UserContext,
} from './multistatus.js';
import {
  ALLOWED,
  cardNameOfHref,
  davSegments,
  hasControlCharacter,
  hasSeparator,
  hrefOf,
  hrefs,
  isOwnSpace,
  kindByShape,
  type Resource,
  resolve,
} from './resources.js';
import { ACL_REPORTS, aclReport, refuseAclChange, withAclProperties } from './acl.js';
import { copyOrMoveCard, refuseCollectionCopyOrMove } from './copy-move.js';
import { patchBook, withDeadProperties } from './dead-properties.js';
import { acceptedVersion, cardInVersion, requestedVersion, storedVersion } from './vcard-version.js';
import {
  CALENDARSERVER,
  CARDDAV,
  child,
  children,
  DAV,
  parseXml,
  xmlDocument,
  type XmlElement,
  XmlError,
  type XmlNode,
  XmlTooLarge,
} from './xml.js';

/*
 * The CardDAV face (RFC 6352 over RFC 4918, with RFC 6578 and RFC 6764): every rule is in
 * docs/carddav.md. One encapsulated context under /dav with its own body parsing, authentication
 * and XML error answers; the /api handlers stay as they are. Reads and writes go through the
 * contacts service (src/contacts/cards.service.ts), so REST and DAV share tags, caches and sync.
 */

/**
 * Methods Fastify 5 routes only once told of them: every one Node's HTTP parser reads (so that one
 * the face does not serve is 405 or 404 like the others), but CONNECT, which never reaches routes.
 */
const EXTRA_METHODS = METHODS.filter((method) => method !== 'CONNECT');
/** What the well-known URI answers (RFC 6764 §5); any other method is 405. */
const WELL_KNOWN_ALLOWED = ['OPTIONS', 'GET', 'HEAD', 'PROPFIND'];
const MAX_CARD_OCTETS = 262_144;
/** A multiget's href is echoed in its response: far above any path of this face, far below the body limit. */
const MAX_HREF_CHARS = 4096;
/** A multiget's hrefs: clients ask for a few hundred at a time; 10,000 is a 1 MiB body of short hrefs. */
const MAX_MULTIGET_HREFS = 10_000;
const XML_TYPES = new Set(['application/xml', 'text/xml']);
const CARD_TYPES = new Set(['text/vcard', 'text/x-vcard']);
const CARD_CONTENT_TYPE = 'text/vcard; charset=utf-8';
const CHANGED = 'Precondition Failed: the contact has changed';
const utf8 = new TextDecoder('utf-8', { fatal: true });

function mediaTypeOf(request: FastifyRequest): string | null {
  const header = request.headers['content-type'];
  return header === undefined ? null : header.split(';', 1)[0]!.trim().toLowerCase();
}

function bodyOf(request: FastifyRequest): Buffer {
  return Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
}

/**
 * The largest XML body of each method (docs/limits.md, "CardDAV"): a PROPFIND or PROPPATCH names at
 * most 100 properties of at most 4,096 characters together; a REPORT may list 10,000 hrefs.
 */
const XML_BODY_MAX_BYTES: Record<string, number> = { PROPFIND: 128 * 1024, PROPPATCH: 128 * 1024, REPORT: 1024 * 1024 };

/** The XML body of a request: null when there is none; 415 for another content type, 413 past a bound, 400 when it does not parse. */
async function xmlBody(request: FastifyRequest): Promise<XmlElement | null> {
  const body = bodyOf(request);
  if (body.length === 0) return null;
  const type = mediaTypeOf(request);
  if (type !== null && !XML_TYPES.has(type)) throw new DavError(415, `Unsupported Media Type: ${shortened(type)}`);
  const maxBytes = XML_BODY_MAX_BYTES[request.method]!;
  if (body.length > maxBytes) throw new DavError(413, `A ${request.method} body is at most ${maxBytes} bytes`);
  try {
    return await parseXml(utf8.decode(body));
  } catch (error) {
    if (error instanceof XmlError) throw new DavError(400, 'Malformed XML body');
    if (error instanceof XmlTooLarge) throw new DavError(413, error.message);
    if (error instanceof TypeError) throw new DavError(400, 'Malformed XML body: not UTF-8');
    throw error;
  }
}

/** The body's root, required to be `ns:name`: 400 otherwise. */
function expectRoot(root: XmlElement | null, ns: string, name: string): XmlElement {
  if (!root || root.ns !== ns || root.name !== name) throw new DavError(400, `Malformed XML body: the root element must be ${name}`);
  return root;
}

/** Who the request signs in as: HTTP Basic with an app password, or a REST access token; null otherwise. */
async function signedInUser(app: FastifyInstance, request: FastifyRequest): Promise<number | null> {
  const header = request.headers.authorization ?? '';
  const basic = /^Basic +([A-Za-z0-9+/=]+)\s*$/i.exec(header);
  if (basic) {
    const decoded = Buffer.from(basic[1]!, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    // No account's name or password holds a NUL, which PostgreSQL text cannot hold at all.
    if (colon <= 0 || decoded.includes('\u0000')) return null;
    return verifyAppPassword(app, decoded.slice(0, colon), decoded.slice(colon + 1));
  }
  if (/^Bearer /i.test(header)) {
    try {
      await app.authenticate(request);
      return request.userId;
    } catch (error) {
      if (error instanceof Unauthorized) return null;
      throw error;
    }
  }
  return null;
}

/** 401 with the Basic challenge; each one counts against the client address's anonymous limit (429 past it). */
async function refuseSignIn(app: FastifyInstance, request: FastifyRequest, reply: FastifyReply): Promise<never> {
  await app.countFailedSignIn(request, reply);
  throw new DavError(401, 'Not authenticated', undefined, { 'WWW-Authenticate': BASIC_CHALLENGE });
}

function methodNotAllowed(allowed: string[]): DavError {
  return new DavError(405, 'Method Not Allowed', undefined, { Allow: allowed.join(', ') });
}

/** The Depth header: 0, 1, or infinity (also when absent, RFC 4918 §9.1); 400 for anything else. */
function depthOf(request: FastifyRequest): '0' | '1' | 'infinity' | null {
  const depth = request.headers.depth;
  if (depth === undefined) return null;
  const value = String(depth).trim().toLowerCase();
  if (value === '0' || value === '1' || value === 'infinity') return value;
  throw new DavError(400, `Invalid Depth header '${shortened(String(depth))}'`);
}

function multistatus(reply: FastifyReply, body: string): FastifyReply {
  return reply.code(207).type('application/xml; charset=utf-8').send(body);
}

/** Bodies are read as bytes: each method decides what it takes (XML, a vCard) and answers 415 itself. */
function acceptAnyBody(app: FastifyInstance): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));
}

/** Registers the CardDAV face: `/.well-known/carddav` and everything under `/dav`. */
export async function carddavRoutes(app: FastifyInstance): Promise<void> {
  for (const method of EXTRA_METHODS) {
    if (!app.supportedMethods.includes(method)) app.addHttpMethod(method, { hasBody: true });
  }
  await app.register(wellKnown);
  await app.register(dav, { prefix: '/dav' });
}

/**
 * RFC 6764 §5: the well-known URI redirects to the DAV root, with or without credentials, unlimited.
 * It belongs to the DAV face, so every method routes here and its errors are `D:error` bodies too.
 */
async function wellKnown(app: FastifyInstance): Promise<void> {
  app.setErrorHandler(davErrorHandler);
  acceptAnyBody(app);
  app.route({
    method: app.supportedMethods,
    url: '/.well-known/carddav',
    exposeHeadRoute: false,
    config: { cors: false },
    handler: async (request, reply) => {
      if (request.method === 'OPTIONS') return reply.code(200).header('Allow', WELL_KNOWN_ALLOWED.join(', ')).send();
      if (!WELL_KNOWN_ALLOWED.includes(request.method)) throw methodNotAllowed(WELL_KNOWN_ALLOWED);
      return reply.code(301).header('Location', '/dav/').send();
    },
  });
}

async function dav(app: FastifyInstance): Promise<void> {
  app.setErrorHandler(davErrorHandler);
  app.setNotFoundHandler((_request, reply) => sendDavError(reply, new DavError(404, 'Not Found')));
  acceptAnyBody(app);

  // Authentication comes first (401 before 400, 413 and 415): before the body is read.
  app.addHook('onRequest', async (request, reply) => {
    if (request.method === 'OPTIONS') return;
    app.refuseWhileSignInsFull(request, reply);
    const userId = await signedInUser(app, request);
    if (userId === null) return refuseSignIn(app, request, reply);
    // The signed-in user, as on /api: the request's database connections count in their share (plugins/db.ts).
    request.userId = userId;
  });

  const handler = async (request: FastifyRequest, reply: FastifyReply) => {
    const segments = davSegments(request.url);
    if (segments?.some(hasControlCharacter)) throw new DavError(400, 'Invalid path: a segment holds a control character');
    if (segments?.some(hasSeparator)) throw new DavError(400, 'Invalid path: a segment holds an encoded slash or backslash');
    if (request.method === 'OPTIONS') {
      const kind = segments && kindByShape(segments);
      return reply
        .code(200)
        .header('DAV', '1, 3, access-control, addressbook')
        .header('Allow', ALLOWED[kind ?? 'other'].join(', '))
        .send();
    }
    const userId = request.userId!;
    if (request.method === 'PUT') checkCardType(request);
    const resource = segments && resolve(segments, userId);
    // RFC 4918 §9.3.1: no collection can be created at an unmapped URL of the caller's own space
    // (one fixed book per user, and a book holds no collection: RFC 6352 §5.2); a mapped one is 405 below.
    if (request.method === 'MKCOL' && segments && isOwnSpace(segments, userId)) {
      if (!resource || (resource.kind === 'card' && !(await findCard(app, userId, resource.name)))) {
        throw new DavError(403, 'No collection can be created here: every user has one address book, fixed', {
          ns: CARDDAV,
          name: 'addressbook-collection-location-ok',
        });
      }
    }
    if (!resource) throw new DavError(404, 'Not Found');
    const context: DavContext = { app, request, reply, userId, resource };
    switch (request.method) {
      case 'PROPFIND':
        return propfind(context);
      case 'PROPPATCH':
        if (resource.kind === 'principal' || resource.kind === 'home' || resource.kind === 'book') return proppatch(context);
        break;
      case 'REPORT':
        return report(context);
      case 'ACL':
        if (resource.kind === 'card' && !(await findCard(app, userId, resource.name))) throw new DavError(404, 'Not Found');
        return refuseAclChange(resource.kind);
      case 'GET':
      case 'HEAD':
        if (resource.kind === 'card') return getCard(context, resource.name);
        break;
      case 'PUT':
        if (resource.kind === 'card') return putCardRoute(context, resource.name);
        break;
      case 'DELETE':
        if (resource.kind === 'card') return deleteCardRoute(context, resource.name);
        break;
      case 'COPY':
      case 'MOVE':
        if (resource.kind === 'card') return copyOrMoveCard(app, request, reply, userId, resource.name);
        return refuseCollectionCopyOrMove();
    }
    // RFC 9110 §15.5.6: 405 names a resource that exists; a card that does not is 404 (MKCOL: above).
    if (resource.kind === 'card' && !(await findCard(app, userId, resource.name))) throw new DavError(404, 'Not Found');
    throw methodNotAllowed(ALLOWED[resource.kind]);
  };
  // No CORS: WebDAV clients are no browsers, and its OPTIONS is capability discovery, not a preflight.
  // Every method the server parses routes here, so an unrouted one is 405 or 404 like the others.
  const methods = app.supportedMethods;
  app.route({ method: methods, url: '/', exposeHeadRoute: false, config: { cors: false }, handler });
  app.route({ method: methods, url: '/*', exposeHeadRoute: false, config: { cors: false }, handler });
}

interface DavContext {
  app: FastifyInstance;
  request: FastifyRequest;
  reply: FastifyReply;
  userId: number;
  resource: Resource;
}

async function userContext({ app, userId }: DavContext): Promise<UserContext> {
  const user = await findUserById(app.db, userId);
  return { principalHref: hrefs.principal(userId), homeHref: hrefs.home(userId), username: user?.username ?? '' };
}

/** Whether the request needs the book's sync token (it asks for it, or for every name). */
function needsSyncToken(request: PropertyRequest): boolean {
  if (request.kind === 'allprop') return false;
  if (request.kind === 'propname') return true;
  return request.names.some(
    (name) => key(name) === key({ ns: DAV, name: 'sync-token' }) || key(name) === key({ ns: CALENDARSERVER, name: 'getctag' }),
  );
}

async function collectionProperties(
  context: DavContext,
  kind: Exclude<Resource['kind'], 'card'>,
  request: PropertyRequest,
): Promise<PropertySet> {
  const user = await userContext(context);
  switch (kind) {
    case 'root':
      return withAclProperties(rootProperties(user), kind, user);
    case 'principal':
      return withAclProperties(principalProperties(user), kind, user);
    case 'home':
      return withAclProperties(homeProperties(user), kind, user);
    case 'book':
      return withDeadProperties(
        context.app,
        context.userId,
        withAclProperties(
          bookProperties(user, needsSyncToken(request) ? await bookSyncToken(context.app, context.userId) : null),
          kind,
          user,
        ),
      );
  }
}

async function propfind(context: DavContext) {
  const { app, request, reply, userId, resource } = context;
  const depth = depthOf(request);
  if (depth === null || depth === 'infinity') {
    throw new DavError(403, 'Depth infinity is not supported: send Depth 0 or 1', { ns: DAV, name: 'propfind-finite-depth' });
  }
  const body = await xmlBody(request);
  const wanted = propertyRequestOf(body && expectRoot(body, DAV, 'propfind'));
  if (resource.kind === 'card') {
    const card = await findCard(app, userId, resource.name, 'own-writes');
    if (!card) throw new DavError(404, 'Not Found');
    return multistatus(reply, multistatusDocument([cardResponse(hrefOf(resource, userId), card, wanted)]));
  }
  const properties = await collectionProperties(context, resource.kind, wanted);
  const members =
    depth !== '1'
      ? []
      : resource.kind === 'home'
        ? [{ href: hrefs.book(userId), properties: await collectionProperties(context, 'book', wanted) }]
        : [];
  const listed = depth === '1' && resource.kind === 'book';
  const head = [
    setResponse(hrefOf(resource, userId), properties, wanted),
    ...members.map((member) => setResponse(member.href, member.properties, wanted)),
  ];
  if (!listed) return multistatus(reply, multistatusDocument(head));
  await countListing(context);
  const slot = takeStreamSlot(context);
  // Beside the book's sync token, the cards are read on the primary: a token ahead of them would skip a change.
  const freshness = needsSyncToken(wanted) ? 'latest' : 'own-writes';
  const ids = await listCardIds(app, userId, freshness);
  async function* responses(): AsyncGenerator<XmlNode[]> {
    yield head;
    for await (const batch of cardBatches(app, userId, ids, needsText(wanted), freshness))
      yield batch.map((card) => cardResponse(hrefs.card(userId, card.name), card, wanted));
  }
  return streamMultistatus(context, slot, responses());
}

/** Whether the request asks for `C:address-data`: only then is the cards' text read. */
function needsText(wanted: PropertyRequest): boolean {
  return wanted.kind === 'prop' && wanted.names.some((name) => name.ns === CARDDAV && name.name === 'address-data');
}

/**
 * Takes a slot for a streamed answer (src/carddav/stream-slots.ts): 429 past the user's share, 503
 * past the instance's, both with Retry-After. Given back when the answer ends, however it ends.
 */
function takeStreamSlot({ app, reply, userId }: Pick<DavContext, 'app' | 'reply' | 'userId'>): () => void {
  const release = app.davStreamSlots.take(userId);
  reply.raw.once('close', release);
  return release;
}

/**
 * Sends a 207 whose responses are written batch by batch as the client reads them (each batch read
 * only when the one before has been taken), then gives the slot back.
 */
function streamMultistatus(
  { reply }: Pick<DavContext, 'reply'>,
  release: () => void,
  responses: AsyncIterable<XmlNode[]>,
  syncToken?: () => string | undefined,
): FastifyReply {
  const body = Readable.from(multistatusChunks(responses, syncToken), { objectMode: false, highWaterMark: 1 });
  body.once('close', release);
  return reply.code(207).type('application/xml; charset=utf-8').send(body);
}

/**
 * The book takes dead properties and its displayname (dead-properties.ts); on the principal and the
 * home every property is protected (RFC 4918 §9.2), and nothing changes.
 */
async function proppatch(context: DavContext) {
  const { app, request, reply, userId, resource } = context;
  const update = expectRoot(await xmlBody(request), DAV, 'propertyupdate');
  if (resource.kind === 'book') {
    const live = bookProperties(await userContext(context), '');
    return multistatus(reply, multistatusDocument([await patchBook(app, userId, hrefOf(resource, userId), update, live)]));
  }
  const names = boundedNames(
    update.children
      .filter((action) => action.ns === DAV && (action.name === 'set' || action.name === 'remove'))
      .flatMap((action) => children(action, DAV, 'prop').flatMap((prop) => prop.children.map(({ ns, name }) => ({ ns, name })))),
  );
  return multistatus(reply, multistatusDocument([protectedResponse(hrefOf(resource, userId), names)]));
}

async function report(context: DavContext) {
  const { app, request, userId, resource } = context;
  if (resource.kind === 'card' && !(await findCard(app, userId, resource.name))) throw new DavError(404, 'Not Found');
  const body = await xmlBody(request);
  if (body?.ns === DAV && ACL_REPORTS.has(body.name)) return principalReport(context, body);
  const onCards = resource.kind === 'book' || resource.kind === 'card';
  if (onCards && body?.ns === CARDDAV && body.name === 'addressbook-multiget') return multiget(context, body);
  if (onCards && body?.ns === CARDDAV && body.name === 'addressbook-query') return query(context, body);
  // RFC 6578 §3.2: sync-collection is a report of collections; a card answers the other two (RFC 6352 §3).
  if (body?.ns === DAV && body.name === 'sync-collection' && context.resource.kind === 'book') return syncCollection(context, body);
  if (!body) throw new DavError(400, 'Malformed XML body: a REPORT needs a body');
  // RFC 3253 §3.6: a report the resource does not support is the precondition DAV:supported-report.
  throw new DavError(403, `The report ${shortened(body.name)} is not supported here`, { ns: DAV, name: 'supported-report' });
}

/** The ACL reports of RFC 3744 §9 (acl.ts), on any resource: their one principal is the user's own. */
async function principalReport(context: DavContext, body: XmlElement) {
  const user = await userContext(context);
  const answer = aclReport(
    body,
    depthOf(context.request),
    user,
    withAclProperties(principalProperties(user), 'principal', user),
    propertyRequestOf(body),
  );
  if ('multistatus' in answer) return multistatus(context.reply, multistatusDocument(answer.multistatus));
  return context.reply
    .code(200)
    .type(XML_TYPE)
    .send(xmlDocument(DAV, 'principal-search-property-set', answer.document));
}

/** RFC 6352 §8.7: the requested cards, each missing one as its own 404 response (Depth ignored). */
async function multiget(context: DavContext, body: XmlElement) {
  const { app, request, reply, userId } = context;
  const version = requestedVersion(body);
  const wanted = propertyRequestOf(body);
  // Each href answered once: a repeated one would repeat its card in the answer.
  const requested = [...new Set(children(body, DAV, 'href').map((href) => href.text.trim()))];
  if (requested.length > MAX_MULTIGET_HREFS)
    throw new DavError(400, `The multiget names ${requested.length} hrefs: at most ${MAX_MULTIGET_HREFS}`);
  const tooLong = requested.find((href) => href.length > MAX_HREF_CHARS);
  if (tooLong !== undefined) throw new DavError(400, `An href holds ${tooLong.length} characters: at most ${MAX_HREF_CHARS}`);
  await app.countPerUser(request, reply, 'multiget', userId);
  const slot = takeStreamSlot(context);
  const names = requested.map((href) => cardNameOfHref(href, userId));
  const found = await cardIdsByName(
    app,
    userId,
    names.filter((name): name is string => name !== null),
    'own-writes',
  );
  const ids = names.map((name) => (name === null ? undefined : found.get(name)));
  async function* responses(): AsyncGenerator<XmlNode[]> {
    let next = 0;
    // Up to `card` (or the end), the hrefs that name no card, or a card deleted since: 404 each.
    const missingUntil = (id: number | null) => {
      const missing: XmlNode[] = [];
      for (; next < requested.length && (id === null || ids[next] !== id); next++) missing.push(statusResponse(requested[next]!, 404));
      return missing;
    };
    const present = ids.filter((id): id is number => id !== undefined);
    for await (const batch of cardBatches(app, userId, present, needsText(wanted), 'own-writes')) {
      const answered: XmlNode[] = [];
      for (const card of batch) {
        answered.push(...missingUntil(card.id), cardResponse(hrefs.card(userId, card.name), cardInVersion(card, version), wanted));
        next++;
      }
      yield answered;
    }
    yield missingUntil(null);
  }
  return streamMultistatus(context, slot, responses());
}

/** `n` of a `limit`/`nresults` element in namespace `ns`, or null; 400 when it is no whole number. */
function limitOf(body: XmlElement, ns: string): number | null {
  const nresults = child(body, ns, 'limit') && child(child(body, ns, 'limit')!, ns, 'nresults');
  if (!nresults) return null;
  const text = nresults.text.trim();
  if (!/^\d{1,9}$/.test(text)) throw new DavError(400, 'Malformed XML body: nresults must be a whole number');
  return Number(text);
}

/** RFC 6352 §8.6: the cards matching the filter (Depth 1), at most `C:limit` of them. */
async function query(context: DavContext, body: XmlElement) {
  const { app, request, reply, userId, resource } = context;
  const depth = depthOf(request) ?? '0';
  const version = requestedVersion(body);
  const wanted = propertyRequestOf(body);
  let filter: ReturnType<typeof compileFilter>;
  try {
    filter = compileFilter(child(body, CARDDAV, 'filter'));
  } catch (error) {
    if (error instanceof FilterRefused) {
      const offending = error.offending && { [`C:${error.offending.element}`]: { '@name': error.offending.name } };
      throw new DavError(403, error.message, { ns: CARDDAV, name: error.precondition, ...(offending ? { content: offending } : {}) });
    }
    throw error;
  }
  const limit = limitOf(body, CARDDAV) ?? Number.MAX_SAFE_INTEGER;
  const respond = (card: StoredCard) => cardResponse(hrefs.card(userId, card.name), cardInVersion(card, version), wanted);
  // RFC 6352 §8.6: the scope of a non-collection is itself, at any Depth.
  if (resource.kind === 'card') {
    const card = await findCard(app, userId, resource.name, 'own-writes');
    if (!card) throw new DavError(404, 'Not Found');
    return multistatus(reply, multistatusDocument(limit > 0 && filter(card.text!) ? [respond(card)] : []));
  }
  // On the book, every card at Depth 1, none at Depth 0 (as in SabreDAV).
  if (depth === '0') return multistatus(reply, multistatusDocument([]));
  await countListing({ app, request, reply, userId });
  const slot = takeStreamSlot(context);
  const ids = await listCardIds(app, userId, 'own-writes');
  async function* responses(): AsyncGenerator<XmlNode[]> {
    let matched = 0;
    // Every card is read to test it; a batch's cards are parsed on one turn of the event loop.
    for await (const batch of cardBatches(app, userId, ids, true, 'own-writes')) {
      const answered: XmlNode[] = [];
      for (const card of batch.filter((candidate) => filter(candidate.text!))) {
        if (matched++ === limit) {
          yield [...answered, truncatedResponse(hrefOf(resource, userId))];
          return;
        }
        answered.push(respond(card));
      }
      yield answered;
    }
  }
  return streamMultistatus(context, slot, responses());
}

/**
 * Counts a request that reads the whole book or its changes (PROPFIND Depth 1 of the book, an
 * addressbook-query, a sync-collection) in the user's `sync` bucket, with the pages of
 * `GET /api/contacts/sync`: each may read every card (429 as a D:error). A client sends one such
 * request per book and sync.
 */
async function countListing({ app, request, reply, userId }: Pick<DavContext, 'app' | 'request' | 'reply' | 'userId'>): Promise<void> {
  await app.countPerUser(request, reply, 'sync', userId);
}

/** RFC 6578: changes since the token, on the frontier and tombstones of `GET /api/contacts/sync`. */
async function syncCollection(context: DavContext, body: XmlElement) {
  const { app, request, reply, userId, resource } = context;
  const depth = depthOf(request);
  if (depth !== null && depth !== '0') throw new DavError(400, 'sync-collection takes Depth 0');
  await countListing({ app, request, reply, userId });
  const token = child(body, DAV, 'sync-token')?.text.trim() ?? '';
  const wanted = propertyRequestOf(body);
  let changes;
  try {
    changes = await cardChanges(app, userId, token, limitOf(body, DAV));
  } catch (error) {
    if (error instanceof SyncTokenRefused) throw new DavError(403, error.message, { ns: DAV, name: 'valid-sync-token' });
    if (error instanceof SyncLimitTooLow) {
      throw new DavError(507, 'The limit of 0 holds none of the changes waiting: ask for at least 1', {
        ns: DAV,
        name: 'number-of-matches-within-limits',
      });
    }
    throw error;
  }
  const { changed, removed, truncated, token: next } = changes;
  const slot = takeStreamSlot(context);
  async function* responses(): AsyncGenerator<XmlNode[]> {
    const changedNames = new Set<string>();
    for await (const batch of cardBatches(app, userId, changed, needsText(wanted))) {
      if (removed.length > 0) for (const card of batch) changedNames.add(card.name);
      yield batch.map((card) => cardResponse(hrefs.card(userId, card.name), card, wanted));
    }
    // A name a card was moved onto (RFC 4918 §9.9, Overwrite) is that card's now, not a removed one.
    const gone = removed.filter((name) => !changedNames.has(name));
    for (let at = 0; at < gone.length; at += BATCH_CARDS)
      yield gone.slice(at, at + BATCH_CARDS).map((name) => statusResponse(hrefs.card(userId, name), 404));
    if (truncated) yield [truncatedResponse(hrefOf(resource, userId))];
  }
  return streamMultistatus(context, slot, responses(), () => next);
}

/** GET and HEAD of a card; HEAD sends the headers GET would, without the body. */
async function getCard({ app, request, reply, userId }: DavContext, name: string) {
  const found = await findCard(app, userId, name, 'own-writes');
  if (!found) throw new DavError(404, 'Not Found');
  // RFC 6352 §5.1.1: `Accept: text/vcard; version=…` naming only the other version converts the card.
  const card = cardInVersion(found, acceptedVersion(request.headers.accept, storedVersion(found.text!)));
  reply.header('ETag', card.etag).header('Last-Modified', card.updatedAt.toUTCString()).header('Vary', 'Accept');
  const ifNoneMatch = request.headers['if-none-match'];
  if (ifNoneMatch !== undefined && namesTag(ifNoneMatch, card.etag)) return reply.code(304).send();
  reply.code(200).type(CARD_CONTENT_TYPE);
  if (request.method === 'HEAD') return reply.header('Content-Length', card.octets()).send();
  return reply.send(card.text);
}

/**
 * 415 unless the body is declared a vCard (`text/vcard` or `text/x-vcard`, parameters allowed),
 * naming the precondition it breaks (RFC 6352 §6.3.2.1, RFC 4918 §16).
 */
function checkCardType(request: FastifyRequest): void {
  const type = mediaTypeOf(request);
  if (type === null || !CARD_TYPES.has(type))
    throw new DavError(415, `Unsupported Media Type: ${type === null ? 'none' : shortened(type)}`, {
      ns: CARDDAV,
      name: 'supported-address-data',
    });
}

async function putCardRoute({ app, request, reply, userId }: DavContext, name: string) {
  await app.countPerUser(request, reply, 'card-put', userId);
  const body = bodyOf(request);
  const conditions = { ifMatch: request.headers['if-match'], ifNoneMatch: request.headers['if-none-match'] };
  try {
    let text: string | null = null;
    if (body.length <= MAX_CARD_OCTETS) {
      try {
        text = utf8.decode(body);
      } catch {
        text = null;
      }
    }
    if (text === null) {
      // Preconditions come before the content (412 before 403).
      await checkPutPreconditions(app, userId, name, conditions);
      if (body.length > MAX_CARD_OCTETS) {
        throw new DavError(403, `The card is larger than ${MAX_CARD_OCTETS} octets`, { ns: CARDDAV, name: 'max-resource-size' });
      }
      throw new DavError(403, 'Not one well-formed vCard: the body is not UTF-8', { ns: CARDDAV, name: 'valid-address-data' });
    }
    // RFC 6350 §3.2: lines end in CRLF. A card with bare LF or CR ends is stored repaired; the
    // repaired octets are what GET serves, so the PUT answer carries no ETag (RFC 6352 §6.3.2.3).
    const stored = text.replace(/\r\n|\r|\n/g, '\r\n');
    const { created, card } = await putCard(app, userId, name, stored, conditions);
    if (stored === text) reply.header('ETag', card.etag);
    return reply.code(created ? 201 : 204).send();
  } catch (error) {
    if (error instanceof CardWriteRefused && error.reason === 'precondition') throw new DavError(412, CHANGED);
    if (error instanceof CardWriteRefused) {
      throw new DavError(409, 'A card of this address book already has this UID', {
        ns: CARDDAV,
        name: 'no-uid-conflict',
        hrefs: [hrefs.card(userId, error.holder!)],
      });
    }
    if (error instanceof CardRefused) throw new DavError(403, error.message, { ns: CARDDAV, name: error.precondition });
    // RFC 4331 §6: a quota is DAV:quota-not-exceeded with 507.
    if (error instanceof ContactQuotaExceeded || error instanceof CardQuotaExceeded) {
      throw new DavError(507, error.message, { ns: DAV, name: 'quota-not-exceeded' });
    }
    throw error;
  }
}

async function deleteCardRoute({ app, request, reply, userId }: DavContext, name: string) {
  const outcome = await deleteCard(app, userId, name, request.headers['if-match']);
  if (outcome === 'missing') throw new DavError(404, 'Not Found');
  if (outcome === 'precondition') throw new DavError(412, CHANGED);
  return reply.code(204).send();
}
