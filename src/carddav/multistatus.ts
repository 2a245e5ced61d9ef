import { filterCardProperties } from './address-data.js';
import { DavError } from './errors.js';
import type { StoredCard } from '../contacts/cards.service.js';
import {
  CALENDARSERVER,
  CARDDAV,
  DAV,
  type PropertyName,
  qualified,
  xmlDocument,
  type XmlElement,
  type XmlNode,
  type XmlValue,
  xmlFragment,
  xmlText,
} from './xml.js';

/*
 * Properties of the CardDAV resources (docs/carddav.md, "Properties") and the 207 Multi-Status
 * answers that carry them (RFC 4918 §13), as the objects the XML builder writes.
 */

/** A property's value: the content of its element. */
export type PropertyValue = () => XmlValue;

/** A resource's properties: values by `ns name`, and which of them allprop returns. */
export interface PropertySet {
  values: Map<string, PropertyValue>;
  /** The names allprop returns: none of the `C:`, `CS:` and sync properties (RFC 6352 §6.2, RFC 6578 §4). */
  allprop: PropertyName[];
}

/** What a PROPFIND or REPORT asks for: named properties, every name, or allprop. */
export type PropertyRequest = { kind: 'prop'; names: RequestedProperty[] } | { kind: 'propname' } | { kind: 'allprop' };

/** A requested property; for `C:address-data`, the vCard properties asked for (none: all). */
export interface RequestedProperty extends PropertyName {
  cardProperties?: string[];
}

export const key = ({ ns, name }: PropertyName): string => `${ns} ${name}`;
const STATUS = {
  200: 'HTTP/1.1 200 OK',
  403: 'HTTP/1.1 403 Forbidden',
  404: 'HTTP/1.1 404 Not Found',
  507: 'HTTP/1.1 507 Insufficient Storage',
};

/**
 * Bounds on the names a request may list: each is echoed in every response of a multistatus (a
 * missing one in a 404 propstat), so a Depth 1 listing multiplies them by the cards of the book.
 */
export const MAX_PROPERTIES = 100;
export const MAX_PROPERTY_NAME_CHARS = 4096;

/** Each name once; 400 past MAX_PROPERTIES names, or names and namespaces over MAX_PROPERTY_NAME_CHARS characters together. */
export function boundedNames<T extends PropertyName>(names: readonly T[]): T[] {
  const seen = new Set<string>();
  const distinct = names.filter((name) => !seen.has(key(name)) && seen.add(key(name)));
  if (distinct.length > MAX_PROPERTIES)
    throw new DavError(400, `The request names ${distinct.length} properties: at most ${MAX_PROPERTIES}`);
  const chars = distinct.reduce((sum, { ns, name }) => sum + ns.length + name.length, 0);
  if (chars > MAX_PROPERTY_NAME_CHARS) {
    throw new DavError(
      400,
      `The property names and namespaces of the request hold ${chars} characters: at most ${MAX_PROPERTY_NAME_CHARS}`,
    );
  }
  return distinct;
}

/** The properties a `D:prop` element names, each once (bounded: boundedNames). */
export function requestedProperties(prop: XmlElement): RequestedProperty[] {
  return boundedNames(prop.children).map((requested): RequestedProperty => {
    if (requested.ns !== CARDDAV || requested.name !== 'address-data') return { ns: requested.ns, name: requested.name };
    const names = requested.children
      .filter((c) => c.ns === CARDDAV && c.name === 'prop')
      .map((c) => (c.attributes.name ?? '').toUpperCase());
    if (names.length > MAX_PROPERTIES)
      throw new DavError(400, `address-data names ${names.length} vCard properties: at most ${MAX_PROPERTIES}`);
    return { ns: requested.ns, name: requested.name, ...(names.length > 0 ? { cardProperties: names } : {}) };
  });
}

/** What a `D:propfind` (or a REPORT's children) asks for; allprop when nothing is named. */
export function propertyRequestOf(parent: XmlElement | null): PropertyRequest {
  if (!parent) return { kind: 'allprop' };
  const prop = parent.children.find((c) => c.ns === DAV && c.name === 'prop');
  if (prop) return { kind: 'prop', names: requestedProperties(prop) };
  if (parent.children.some((c) => c.ns === DAV && c.name === 'propname')) return { kind: 'propname' };
  return { kind: 'allprop' };
}

const EMPTY = () => '';
const text =
  (value: string): PropertyValue =>
  () =>
    xmlText(value);
const href =
  (value: string): PropertyValue =>
  () => ({ 'D:href': xmlText(value) });
const elements =
  (...names: string[]): PropertyValue =>
  () =>
    Object.fromEntries(names.map((name) => [name, '']));

const CARD_TYPE = 'text/vcard; charset=utf-8';

/** `D:current-user-privilege-set`: what iOS and DAVx5 read to decide that the book is writable. */
const privileges: PropertyValue = () => ({
  'D:privilege': ['read', 'write', 'write-content', 'bind', 'unbind'].map((privilege) => ({ [`D:${privilege}`]: '' })),
});

/** Values shared by every resource of the user. */
export interface UserContext {
  principalHref: string;
  homeHref: string;
  username: string;
}

function set(entries: [PropertyName, PropertyValue][], allprop: PropertyName[]): PropertySet {
  return { values: new Map(entries.map(([name, value]) => [key(name), value])), allprop };
}

const D = (name: string): PropertyName => ({ ns: DAV, name });
const C = (name: string): PropertyName => ({ ns: CARDDAV, name });

/** The root `/dav/`: a collection that names the current user's principal. */
export function rootProperties(user: UserContext): PropertySet {
  return set(
    [
      [D('resourcetype'), elements('D:collection')],
      [D('current-user-principal'), href(user.principalHref)],
    ],
    [D('resourcetype')],
  );
}

/** The principal: names the user and the address-book home. */
export function principalProperties(user: UserContext): PropertySet {
  return set(
    [
      [D('resourcetype'), elements('D:collection', 'D:principal')],
      [D('displayname'), text(user.username)],
      [D('principal-URL'), href(user.principalHref)],
      [D('current-user-principal'), href(user.principalHref)],
      [C('addressbook-home-set'), href(user.homeHref)],
    ],
    [D('resourcetype'), D('displayname')],
  );
}

/** The home: a plain collection holding the one book. */
export function homeProperties(user: UserContext): PropertySet {
  return set(
    [
      [D('resourcetype'), elements('D:collection')],
      [D('current-user-principal'), href(user.principalHref)],
      [D('owner'), href(user.principalHref)],
      [D('current-user-privilege-set'), privileges],
    ],
    [D('resourcetype')],
  );
}

/** The book, with its sync token (also its ctag) when the request needs it. */
export function bookProperties(user: UserContext, syncToken: string | null): PropertySet {
  const entries: [PropertyName, PropertyValue][] = [
    [D('resourcetype'), elements('D:collection', 'C:addressbook')],
    [D('displayname'), text('Contacts')],
    [D('current-user-principal'), href(user.principalHref)],
    [D('owner'), href(user.principalHref)],
    [D('current-user-privilege-set'), privileges],
    [
      D('supported-report-set'),
      () => ({
        'D:supported-report': ['C:addressbook-multiget', 'C:addressbook-query', 'D:sync-collection'].map((report) => ({
          'D:report': { [report]: '' },
        })),
      }),
    ],
    [
      C('supported-address-data'),
      () => ({ 'C:address-data-type': ['3.0', '4.0'].map((version) => ({ '@content-type': 'text/vcard', '@version': version })) }),
    ],
    [C('max-resource-size'), text('262144')],
    [C('supported-collation-set'), () => ({ 'C:supported-collation': ['i;ascii-casemap', 'i;octet', 'i;unicode-casemap'] })],
  ];
  if (syncToken !== null) entries.push([D('sync-token'), text(syncToken)], [{ ns: CALENDARSERVER, name: 'getctag' }, text(syncToken)]);
  return set(entries, [D('resourcetype'), D('displayname'), D('owner')]);
}

/** RFC 6352 §3: a card answers the address-book reports too (sync-collection is the book's alone). */
const cardReports: PropertyValue = () => ({
  'D:supported-report': ['C:addressbook-multiget', 'C:addressbook-query'].map((report) => ({ 'D:report': { [report]: '' } })),
});

const CARD_NAMES = [D('getetag'), D('getcontenttype'), D('getcontentlength'), D('getlastmodified'), D('resourcetype')];
const ADDRESS_DATA = key(C('address-data'));

/** A card's value of property `requested`, or undefined when a card has no such property. */
function cardValue(card: StoredCard, requested: RequestedProperty): PropertyValue | undefined {
  if (requested.ns === DAV) {
    switch (requested.name) {
      case 'getetag':
        return text(card.etag);
      case 'getcontenttype':
        return text(CARD_TYPE);
      case 'getcontentlength':
        return () => String(card.octets());
      case 'getlastmodified':
        return text(card.updatedAt.toUTCString());
      case 'resourcetype':
        return EMPTY;
      case 'supported-report-set':
        return cardReports;
    }
    return undefined;
  }
  if (key(requested) === ADDRESS_DATA && card.text !== undefined) {
    const data = card.text;
    return () => xmlText(requested.cardProperties ? filterCardProperties(data, requested.cardProperties) : data);
  }
  return undefined;
}

type Found = { found: [PropertyName, PropertyValue][]; missing: PropertyName[] };

/** The properties the request asks of `card` (allprop: the D: ones), as found and missing lists. */
function cardPropstats(card: StoredCard, request: PropertyRequest): Found {
  const names: RequestedProperty[] = request.kind === 'prop' ? request.names : CARD_NAMES;
  const found: [PropertyName, PropertyValue][] = [];
  const missing: PropertyName[] = [];
  for (const name of names) {
    const value = request.kind === 'propname' ? EMPTY : cardValue(card, name);
    if (value) found.push([name, value]);
    else missing.push(name);
  }
  return { found, missing };
}

/** The properties the request asks of a collection's set, as found and missing lists. */
function setPropstats(properties: PropertySet, request: PropertyRequest): Found {
  if (request.kind === 'propname') return { found: [...properties.values.keys()].map((k) => [nameOfKey(k), EMPTY]), missing: [] };
  const names = request.kind === 'prop' ? request.names : properties.allprop;
  const found: [PropertyName, PropertyValue][] = [];
  const missing: PropertyName[] = [];
  for (const name of names) {
    const value = properties.values.get(key(name));
    if (value) found.push([name, value]);
    else missing.push(name);
  }
  return { found, missing };
}

function nameOfKey(k: string): PropertyName {
  const at = k.lastIndexOf(' ');
  return { ns: k.slice(0, at), name: k.slice(at + 1) };
}

/** A `D:propstat` with these properties (valued, or empty) and status, and an error element if given. */
function propstat(properties: [PropertyName, PropertyValue | null][], status: string, error?: PropertyName): XmlNode {
  const prop: XmlNode = {};
  properties.forEach(([name, value], index) => {
    const { key: qualifiedName, declaration } = qualified(name, index);
    const content = value ? value() : '';
    prop[qualifiedName] =
      Object.keys(declaration).length === 0
        ? content
        : typeof content === 'string'
          ? { ...declaration, '#text': content }
          : { ...declaration, ...content };
  });
  return { 'D:prop': prop, 'D:status': status, ...(error ? { 'D:error': { [qualified(error, 0).key]: '' } } : {}) };
}

/** One `D:response` with its propstats: 200 for what was found, 404 for what the resource lacks. */
function response(href: string, { found, missing }: Found): XmlNode {
  const propstats: XmlNode[] = [];
  if (found.length > 0 || missing.length === 0) propstats.push(propstat(found, STATUS[200]));
  if (missing.length > 0)
    propstats.push(
      propstat(
        missing.map((name) => [name, null]),
        STATUS[404],
      ),
    );
  return { 'D:href': xmlText(href), 'D:propstat': propstats };
}

/** A collection's `D:response` for the request. */
export function setResponse(href: string, properties: PropertySet, request: PropertyRequest): XmlNode {
  return response(href, setPropstats(properties, request));
}

/** A card's `D:response` for the request. */
export function cardResponse(href: string, card: StoredCard, request: PropertyRequest): XmlNode {
  return response(href, cardPropstats(card, request));
}

/** A `D:response` with a bare status (a card missing from a multiget, or removed since a sync token). */
export function statusResponse(href: string, status: 404): XmlNode {
  return { 'D:href': xmlText(href), 'D:status': STATUS[status] };
}

/** The `D:response` for the request-URI when a limit cut the answer short (RFC 6352 §8.6.2, RFC 6578 §3.6). */
export function truncatedResponse(href: string): XmlNode {
  return { 'D:href': xmlText(href), 'D:status': STATUS[507], 'D:error': { 'D:number-of-matches-within-limits': '' } };
}

/** PROPPATCH's answer: every property refused in a 403 propstat holding `D:cannot-modify-protected-property` (RFC 4918 §9.2). */
export function protectedResponse(href: string, names: PropertyName[]): XmlNode {
  return {
    'D:href': xmlText(href),
    'D:propstat': [
      propstat(
        names.map((name) => [name, null]),
        STATUS[403],
        D('cannot-modify-protected-property'),
      ),
    ],
  };
}

/** Where a multistatus document's responses go, between its head and its tail. */
const RESPONSES_MARK = '<X:responses/>';

/**
 * A `D:multistatus` document written as it is read: its head, each batch of responses as it comes,
 * and its tail with the `D:sync-token` when given. Nothing is built whole, so an answer's memory is
 * one batch's, whatever the book holds (docs/limits.md, "CardDAV").
 */
export async function* multistatusChunks(batches: AsyncIterable<XmlNode[]>, syncToken?: () => string | undefined): AsyncGenerator<string> {
  const document = xmlDocument(DAV, 'multistatus', { 'X:responses': '' });
  const at = document.indexOf(RESPONSES_MARK);
  yield document.slice(0, at);
  for await (const responses of batches) if (responses.length > 0) yield xmlFragment({ 'D:response': responses });
  const token = syncToken?.();
  yield (token === undefined ? '' : xmlFragment({ 'D:sync-token': xmlText(token) })) + document.slice(at + RESPONSES_MARK.length);
}

/** A `D:multistatus` document of these responses, built whole (an answer of a few responses). */
export function multistatusDocument(responses: XmlNode[]): string {
  return xmlDocument(DAV, 'multistatus', { 'D:response': responses });
}
