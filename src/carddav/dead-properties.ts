import type { FastifyInstance } from 'fastify';
import { type BookPropertyRow, listBookProperties, withBookPropertiesLocked, writeBookProperties } from './book-properties.repository.js';
import { boundedNames, key, type PropertySet } from './multistatus.js';
import { DAV, type PropertyName, qualified, type XmlElement, type XmlNode, type XmlValue, xmlText } from './xml.js';

/*
 * PROPPATCH of the address book (RFC 4918 §9.2): the properties the service computes are protected
 * (403 DAV:cannot-modify-protected-property); any other is a dead property, stored as sent and
 * returned by PROPFIND; `DAV:displayname` is one too (§15.2: it SHOULD NOT be protected). A
 * PROPPATCH is all or nothing: when one instruction fails, the others fail with 424. The dead
 * properties of a book are bounded (docs/limits.md): past the bound the sets are 507.
 */

/** Dead properties one book may hold, and their names, namespaces and values together in octets. */
export const MAX_BOOK_PROPERTIES = 32;
export const MAX_BOOK_PROPERTY_BYTES = 16 * 1024;

/** Live properties of WebDAV, its ACL, quota and sync extensions: never dead, whatever the book lists. */
const ALWAYS_LIVE = [
  'creationdate',
  'getcontentlanguage',
  'getcontentlength',
  'getcontenttype',
  'getetag',
  'getlastmodified',
  'lockdiscovery',
  'supportedlock',
  'resourcetype',
  'sync-token',
  'acl',
  'acl-restrictions',
  'inherited-acl-set',
  'principal-collection-set',
  'supported-privilege-set',
  'current-user-privilege-set',
  'current-user-principal',
  'owner',
  'group',
  'quota-available-bytes',
  'quota-used-bytes',
  'supported-report-set',
].map((name) => key({ ns: DAV, name }));

const DISPLAYNAME = key({ ns: DAV, name: 'displayname' });

/** A stored property element: its content as the request sent it (text, attributes, children). */
interface StoredElement {
  ns: string;
  name: string;
  attributes: Record<string, string>;
  text: string;
  children: StoredElement[];
}

function stored({ ns, name, attributes, text, children }: XmlElement): StoredElement {
  return { ns, name, attributes, text, children: children.map(stored) };
}

/** An element's content for the builder; children in a namespace of their own declare it on themselves. */
function contentOf(element: StoredElement): XmlValue {
  const attributes = Object.entries(element.attributes);
  if (element.children.length === 0 && attributes.length === 0) return xmlText(element.text);
  const node: XmlNode = Object.fromEntries(attributes.map(([name, value]) => [`@${name}`, xmlText(value)]));
  element.children.forEach((child, index) => {
    const { key: qualifiedName, declaration } = qualified(child, index);
    const content = contentOf(child);
    const value: XmlValue =
      Object.keys(declaration).length === 0
        ? content
        : typeof content === 'string'
          ? { ...declaration, '#text': content }
          : { ...declaration, ...content };
    const existing = node[qualifiedName];
    node[qualifiedName] = existing === undefined ? value : Array.isArray(existing) ? [...existing, value] : [existing, value];
  });
  if (element.text.trim() !== '') node['#text'] = xmlText(element.text);
  return node;
}

/** The book's properties with its dead ones: each answered as stored, and in allprop (RFC 4918 §9.1). */
export async function withDeadProperties(app: FastifyInstance, ownerId: number, live: PropertySet): Promise<PropertySet> {
  const rows = await listBookProperties(app.db, ownerId);
  if (rows.length === 0) return live;
  const values = new Map(live.values);
  const allprop = [...live.allprop];
  for (const row of rows) {
    const element = JSON.parse(row.value) as StoredElement;
    const name = { ns: row.ns, name: row.name };
    if (!values.has(key(name)) || key(name) === DISPLAYNAME) {
      if (!allprop.some((listed) => key(listed) === key(name))) allprop.push(name);
      values.set(key(name), () => contentOf(element));
    }
  }
  return { values, allprop };
}

const STATUS = {
  200: 'HTTP/1.1 200 OK',
  403: 'HTTP/1.1 403 Forbidden',
  424: 'HTTP/1.1 424 Failed Dependency',
  507: 'HTTP/1.1 507 Insufficient Storage',
} as const;

type Status = keyof typeof STATUS;

function propstat(names: PropertyName[], status: Status, error?: string): XmlNode {
  const prop: XmlNode = {};
  names.forEach((name, index) => {
    const { key: qualifiedName, declaration } = qualified(name, index);
    prop[qualifiedName] = declaration;
  });
  return { 'D:prop': prop, 'D:status': STATUS[status], ...(error ? { 'D:error': { [error]: '' } } : {}) };
}

interface Instruction {
  remove: boolean;
  element: XmlElement;
}

/** The set and remove instructions of a `D:propertyupdate`, in document order (RFC 4918 §14.19). */
function instructionsOf(update: XmlElement): Instruction[] {
  return update.children
    .filter((action) => action.ns === DAV && (action.name === 'set' || action.name === 'remove'))
    .flatMap((action) =>
      action.children
        .filter((prop) => prop.ns === DAV && prop.name === 'prop')
        .flatMap((prop) => prop.children.map((element) => ({ remove: action.name === 'remove', element }))),
    );
}

/**
 * Applies a PROPPATCH of the owner's book (the `D:propertyupdate` `update`), all or nothing, and
 * returns the `D:response` for `href`. `live` names the book's computed properties.
 */
export async function patchBook(
  app: FastifyInstance,
  ownerId: number,
  href: string,
  update: XmlElement,
  live: PropertySet,
): Promise<XmlNode> {
  const instructions = instructionsOf(update);
  const names = boundedNames(instructions.map(({ element }) => ({ ns: element.ns, name: element.name })));
  const isProtected = (name: PropertyName) => key(name) !== DISPLAYNAME && (live.values.has(key(name)) || ALWAYS_LIVE.includes(key(name)));
  const refused = names.filter(isProtected);
  const answer = (propstats: XmlNode[]) => ({ 'D:href': xmlText(href), 'D:propstat': propstats });
  if (refused.length > 0) {
    const others = names.filter((name) => !isProtected(name));
    return answer([propstat(refused, 403, 'D:cannot-modify-protected-property'), ...(others.length > 0 ? [propstat(others, 424)] : [])]);
  }
  return withBookPropertiesLocked(app.db, ownerId, async (trx, current) => {
    const state = new Map<string, BookPropertyRow>(current.map((row) => [key(row), row]));
    for (const { remove, element } of instructions) {
      const name = { ns: element.ns, name: element.name };
      if (remove) state.delete(key(name));
      else {
        const value = JSON.stringify(stored(element));
        state.set(key(name), { ...name, value, bytes: Buffer.byteLength(name.ns + name.name + value) });
      }
    }
    const bytes = [...state.values()].reduce((sum, row) => sum + row.bytes, 0);
    if (state.size > MAX_BOOK_PROPERTIES || bytes > MAX_BOOK_PROPERTY_BYTES) {
      const setNames = names.filter((name) => instructions.some(({ remove, element }) => !remove && key(element) === key(name)));
      const others = names.filter((name) => !setNames.some((set) => key(set) === key(name)));
      return answer([propstat(setNames, 507), ...(others.length > 0 ? [propstat(others, 424)] : [])]);
    }
    const removed = current.filter((row) => !state.has(key(row)));
    const written = [...state.values()].filter((row) => !current.some((old) => key(old) === key(row) && old.value === row.value));
    await writeBookProperties(trx, ownerId, written, removed);
    return answer([propstat(names, 200)]);
  });
}
