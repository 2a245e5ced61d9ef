import type { XMLBuilderCB } from 'xmlbuilder2/lib/interfaces.js';
import { filterCardProperties } from './address-data.js';
import type { StoredCard } from '../contacts/cards.service.js';
import { CALENDARSERVER, CARDDAV, DAV, element, type PropertyName, type XmlElement } from './xml.js';

/*
 * Properties of the CardDAV resources (docs/carddav.md, "Properties") and the 207 Multi-Status
 * answers that carry them (RFC 4918 §13).
 */

/** Writes a property's value inside its (already opened) element. */
export type PropertyValue = (into: XMLBuilderCB) => void;

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
const STATUS = { 200: 'HTTP/1.1 200 OK', 403: 'HTTP/1.1 403 Forbidden', 404: 'HTTP/1.1 404 Not Found', 507: 'HTTP/1.1 507 Insufficient Storage' };

/** The properties a `D:prop` element names. */
export function requestedProperties(prop: XmlElement): RequestedProperty[] {
  return prop.children.map((requested) => {
    if (requested.ns !== CARDDAV || requested.name !== 'address-data') return { ns: requested.ns, name: requested.name };
    const names = requested.children.filter((c) => c.ns === CARDDAV && c.name === 'prop').map((c) => (c.attributes.name ?? '').toUpperCase());
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

const text =
  (value: string): PropertyValue =>
  (into) =>
    void into.txt(value);
const href =
  (value: string): PropertyValue =>
  (into) =>
    void into.ele('D:href').txt(value).up();
const elements =
  (...names: string[]): PropertyValue =>
  (into) => {
    for (const name of names) into.ele(name).up();
  };

const CARD_TYPE = 'text/vcard; charset=utf-8';
const PRIVILEGES = ['read', 'write', 'write-content', 'bind', 'unbind'];

/** `D:current-user-privilege-set`: what iOS and DAVx5 read to decide that the book is writable. */
const privileges: PropertyValue = (into) => {
  for (const privilege of PRIVILEGES) into.ele('D:privilege').ele(`D:${privilege}`).up().up();
};

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
      (into) => {
        for (const report of ['C:addressbook-multiget', 'C:addressbook-query', 'D:sync-collection']) into.ele('D:supported-report').ele('D:report').ele(report).up().up().up();
      },
    ],
    [
      C('supported-address-data'),
      (into) => {
        for (const version of ['3.0', '4.0']) into.ele('C:address-data-type').att('content-type', 'text/vcard').att('version', version).up();
      },
    ],
    [C('max-resource-size'), text('262144')],
    [
      C('supported-collation-set'),
      (into) => {
        for (const collation of ['i;ascii-casemap', 'i;octet', 'i;unicode-casemap']) into.ele('C:supported-collation').txt(collation).up();
      },
    ],
  ];
  if (syncToken !== null) entries.push([D('sync-token'), text(syncToken)], [{ ns: CALENDARSERVER, name: 'getctag' }, text(syncToken)]);
  return set(entries, [D('resourcetype'), D('displayname'), D('owner')]);
}

const CARD_NAMES = [D('getetag'), D('getcontenttype'), D('getcontentlength'), D('getlastmodified'), D('resourcetype')];
const ADDRESS_DATA = key(C('address-data'));

/** A card's value of property `name`, or undefined when a card has no such property. */
function cardValue(card: StoredCard, requested: RequestedProperty): PropertyValue | undefined {
  if (requested.ns === DAV) {
    switch (requested.name) {
      case 'getetag':
        return text(card.etag);
      case 'getcontenttype':
        return text(CARD_TYPE);
      case 'getcontentlength':
        return text(String(card.octets));
      case 'getlastmodified':
        return text(card.updatedAt.toUTCString());
      case 'resourcetype':
        return () => undefined;
    }
    return undefined;
  }
  if (key(requested) === ADDRESS_DATA && card.text !== undefined) {
    const data = requested.cardProperties ? filterCardProperties(card.text, requested.cardProperties) : card.text;
    return text(data);
  }
  return undefined;
}

/** The properties the request asks of `card` (allprop: the D: ones), as found and missing lists. */
function cardPropstats(card: StoredCard, request: PropertyRequest): { found: [PropertyName, PropertyValue][]; missing: PropertyName[] } {
  const names: RequestedProperty[] = request.kind === 'prop' ? request.names : CARD_NAMES;
  const found: [PropertyName, PropertyValue][] = [];
  const missing: PropertyName[] = [];
  for (const name of names) {
    const value = request.kind === 'propname' ? () => undefined : cardValue(card, name);
    if (value) found.push([name, value]);
    else missing.push(name);
  }
  return { found, missing };
}

/** The properties the request asks of a collection's set, as found and missing lists. */
function setPropstats(properties: PropertySet, request: PropertyRequest): { found: [PropertyName, PropertyValue][]; missing: PropertyName[] } {
  if (request.kind === 'propname') {
    return { found: [...properties.values.keys()].map((k) => [nameOfKey(k), () => undefined]), missing: [] };
  }
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

function writePropstat(response: XMLBuilderCB, properties: [PropertyName, PropertyValue | null][], status: string, error?: PropertyName): void {
  response.ele('D:propstat').ele('D:prop');
  for (const [name, value] of properties) {
    const opened = element(response, name);
    value?.(opened);
    opened.up();
  }
  response.up().ele('D:status').txt(status).up();
  if (error) element(response.ele('D:error'), error).up().up();
  response.up();
}

/** One `D:response` with its propstats: 200 for what was found, 404 for what the resource lacks. */
function writeResponse(multistatus: XMLBuilderCB, href: string, { found, missing }: ReturnType<typeof cardPropstats>): void {
  const response = multistatus.ele('D:response');
  response.ele('D:href').txt(href).up();
  if (found.length > 0 || missing.length === 0) writePropstat(response, found, STATUS[200]);
  if (missing.length > 0) writePropstat(response, missing.map((name) => [name, null]), STATUS[404]);
  response.up();
}

/** A collection's `D:response` for the request. */
export function writeSetResponse(multistatus: XMLBuilderCB, href: string, properties: PropertySet, request: PropertyRequest): void {
  writeResponse(multistatus, href, setPropstats(properties, request));
}

/** A card's `D:response` for the request. */
export function writeCardResponse(multistatus: XMLBuilderCB, href: string, card: StoredCard, request: PropertyRequest): void {
  writeResponse(multistatus, href, cardPropstats(card, request));
}

/** A `D:response` with a bare status (a card missing from a multiget, or removed since a sync token). */
export function writeStatusResponse(multistatus: XMLBuilderCB, href: string, status: 404): void {
  multistatus.ele('D:response').ele('D:href').txt(href).up().ele('D:status').txt(STATUS[status]).up().up();
}

/** The `D:response` for the request-URI when a limit cut the answer short (RFC 6352 §8.6.2, RFC 6578 §3.6). */
export function writeTruncatedResponse(multistatus: XMLBuilderCB, href: string): void {
  multistatus
    .ele('D:response')
    .ele('D:href')
    .txt(href)
    .up()
    .ele('D:status')
    .txt(STATUS[507])
    .up()
    .ele('D:error')
    .ele('D:number-of-matches-within-limits')
    .up()
    .up()
    .up();
}

/** PROPPATCH's answer: every property refused in a 403 propstat holding `D:cannot-modify-protected-property` (RFC 4918 §9.2). */
export function writeProtectedResponse(multistatus: XMLBuilderCB, href: string, names: PropertyName[]): void {
  const response = multistatus.ele('D:response');
  response.ele('D:href').txt(href).up();
  writePropstat(response, names.map((name) => [name, null]), STATUS[403], D('cannot-modify-protected-property'));
  response.up();
}
