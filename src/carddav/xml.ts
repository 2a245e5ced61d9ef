import sax from 'sax';
import { XMLBuilder } from 'fast-xml-parser';

/*
 * XML in and out of the CardDAV face. Requests are read by `sax` (isaacs/sax-js: a maintained,
 * dependency-free streaming parser; prefixes are resolved here, see parseXml) in strict mode: it never fetches
 * anything, knows only XML's five predefined entities (an undeclared `&name;` is an error), and is
 * told to stop at a `<!DOCTYPE` before reading any of it, so no DTD, external entity or entity
 * expansion ("billion laughs") can take effect. Answers are built from plain objects by
 * `fast-xml-parser`'s XMLBuilder (maintained; escapes text and attributes), never by concatenating
 * markup: it writes a 10,000-card listing about ten times faster than xmlbuilder2 did here.
 */

export const DAV = 'DAV:';
export const CARDDAV = 'urn:ietf:params:xml:ns:carddav';
export const CALENDARSERVER = 'http://calendarserver.org/ns/';
export const SERVICE = 'urn:contacts-service:dav';

/** The prefixes answers use for the namespaces they know. */
export const PREFIXES: Record<string, string> = { [DAV]: 'D', [CARDDAV]: 'C', [CALENDARSERVER]: 'CS', [SERVICE]: 'X' };

/** One element of a request body: its namespace and local name, attributes by local name, children and text. */
export interface XmlElement {
  ns: string;
  name: string;
  attributes: Record<string, string>;
  children: XmlElement[];
  text: string;
}

/** Why a body is no usable XML; the CardDAV face answers 400. */
export class XmlError extends Error {}

/** A body over one of XML_BOUNDS; the CardDAV face answers 413. */
export class XmlTooLarge extends Error {}

/**
 * Bounds on a request body's XML (docs/limits.md, "CardDAV"), each checked as the parser reaches
 * it, so a body costs at most linear time before it is refused. A multiget of MAX_MULTIGET_HREFS
 * hrefs is the largest body a client sends: one element per href, and a few for the properties.
 */
export const XML_BOUNDS = {
  /** Elements may nest this deep: DAV bodies need a handful of levels. */
  depth: 64,
  /** Attributes of one element, namespace declarations included: clients declare a few namespaces. */
  attributesPerElement: 64,
  /** Elements of one body: 10,000 hrefs of a multiget and its properties, with room to spare. */
  elements: 20_000,
};

/** Characters parsed between two turns of the event loop: about a millisecond of parsing. */
const SLICE_CHARS = 64 * 1024;
const XML_NAMESPACE = 'http://www.w3.org/XML/1998/namespace';

/** The prefixes in scope: each element that declares one inherits the rest from its parent's. */
type Scope = Record<string, string>;

/**
 * Parses a request body; XmlError when it is not well-formed, holds a DTD, or passes a bound of
 * XML_BOUNDS. sax runs without its namespace mode, whose check of each attribute against the
 * element's earlier ones (`attribList.indexOf`) made an element with n attributes cost n²; the
 * prefixes are resolved here, with a scope per element that declares any. The text is fed in
 * slices with a turn of the event loop between them, so other requests are answered meanwhile.
 */
export async function parseXml(text: string): Promise<XmlElement> {
  const parser = sax.parser(true, { xmlns: false, trim: false, normalize: false });
  const stack: XmlElement[] = [];
  // No prototype: a prefix such as `constructor` finds nothing but what the body declared.
  const scopes: Scope[] = [Object.assign(Object.create(null) as Scope, { xml: XML_NAMESPACE, '': '' })];
  let root: XmlElement | null = null;
  let elements = 0;
  let attributes = 0;
  parser.ondoctype = () => {
    throw new XmlError('Malformed XML body');
  };
  parser.onerror = (error) => {
    throw new XmlError(`Malformed XML body: ${error.message.split('\n', 1)[0]}`);
  };
  parser.onopentagstart = () => {
    attributes = 0;
    if (++elements > XML_BOUNDS.elements) throw new XmlTooLarge(`The XML body holds more than ${XML_BOUNDS.elements} elements`);
    if (stack.length >= XML_BOUNDS.depth) throw new XmlError('Malformed XML body: nested too deeply');
  };
  parser.onattribute = () => {
    if (++attributes > XML_BOUNDS.attributesPerElement)
      throw new XmlTooLarge(`An XML element holds more than ${XML_BOUNDS.attributesPerElement} attributes`);
  };
  parser.onopentag = (tag) => {
    const declared = (tag as sax.Tag).attributes;
    let scope = scopes[scopes.length - 1]!;
    const plain: [string, string][] = [];
    for (const [name, value] of Object.entries(declared)) {
      if (NOT_XML_CHAR.test(value)) throw new XmlError('Malformed XML body: a character XML cannot hold');
      if (name === 'xmlns' || name.startsWith('xmlns:')) {
        const prefix = name === 'xmlns' ? '' : name.slice(6);
        // Namespaces in XML 1.0 §3: a prefix is never bound to no namespace; `xml` and `xmlns` are fixed.
        if (prefix !== '' && (value === '' || prefix === 'xmlns' || (prefix === 'xml') !== (value === XML_NAMESPACE)))
          throw new XmlError('Malformed XML body: a namespace declaration XML forbids');
        if (scope === scopes[scopes.length - 1]) scope = Object.create(scope) as Scope;
        scope[prefix] = value;
      } else plain.push([name, value]);
    }
    scopes.push(scope);
    const element: XmlElement = { ...qualifiedName(tag.name, scope, true), attributes: {}, children: [], text: '' };
    for (const [name, value] of plain) element.attributes[qualifiedName(name, scope, false).name] = value;
    if (stack.length > 0) stack[stack.length - 1]!.children.push(element);
    else if (root) throw new XmlError('Malformed XML body: more than one root element');
    else root = element;
    stack.push(element);
  };
  parser.onclosetag = () => {
    stack.pop();
    scopes.pop();
  };
  // sax lets control characters (raw, or as `&#0;`) through; XML 1.0 §2.2 has none of them.
  const onText = (value: string) => {
    if (NOT_XML_CHAR.test(value)) throw new XmlError('Malformed XML body: a character XML cannot hold');
    if (stack.length > 0) stack[stack.length - 1]!.text += value;
  };
  parser.ontext = onText;
  parser.oncdata = onText;
  try {
    for (let at = 0; at < text.length; at += SLICE_CHARS) {
      if (at > 0) await new Promise((resolve) => setImmediate(resolve));
      parser.write(text.slice(at, at + SLICE_CHARS));
    }
    parser.close();
  } catch (error) {
    if (error instanceof XmlError || error instanceof XmlTooLarge) throw error;
    throw new XmlError('Malformed XML body');
  }
  if (!root) throw new XmlError('Malformed XML body: no root element');
  return root;
}

/**
 * The namespace and local name of a qualified name in `scope`; an element without a prefix is in
 * the default namespace, an attribute in none. An undeclared prefix is XmlError.
 */
function qualifiedName(name: string, scope: Scope, isElement: boolean): { ns: string; name: string } {
  const colon = name.indexOf(':');
  if (colon < 0) return { ns: isElement ? scope['']! : '', name };
  const prefix = name.slice(0, colon);
  const local = name.slice(colon + 1);
  const ns = prefix === '' || local === '' || local.includes(':') ? undefined : scope[prefix];
  if (ns === undefined || prefix === 'xmlns') throw new XmlError('Malformed XML body: an undeclared namespace prefix');
  return { ns, name: local };
}

/** The first child of `element` named `name` in namespace `ns`. */
export function child(element: XmlElement, ns: string, name: string): XmlElement | undefined {
  return element.children.find((candidate) => candidate.ns === ns && candidate.name === name);
}

/** Every child of `element` named `name` in namespace `ns`. */
export function children(element: XmlElement, ns: string, name: string): XmlElement[] {
  return element.children.filter((candidate) => candidate.ns === ns && candidate.name === name);
}

/** A property name: its namespace and local name. */
export interface PropertyName {
  ns: string;
  name: string;
}

/** An element's content for the builder: text, or child elements by qualified name (a list repeats one). */
export type XmlValue = string | XmlNode;
export interface XmlNode {
  [name: string]: XmlValue | XmlValue[];
}

const builder = new XMLBuilder({
  ignoreAttributes: false,
  attributeNamePrefix: '@',
  suppressEmptyNode: true,
  processEntities: true,
  format: false,
});
/** Characters XML 1.0 cannot hold (C0 controls but tab, LF and CR; lone surrogates; U+FFFE/U+FFFF). */
const NOT_XML =
  // eslint-disable-next-line no-control-regex -- these are exactly the characters to find
  /[\u0000-\u0008\u000B\u000C\u000E-\u001F\uFFFE\uFFFF]|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

const NOT_XML_CHAR = new RegExp(NOT_XML.source);

/** Text as XML can hold it: a character it cannot is replaced by U+FFFD. */
export function xmlText(value: string): string {
  return value.replace(NOT_XML, '\uFFFD');
}

/** A document whose root is element `name` of namespace `ns`, with every known namespace declared on it. */
export function xmlDocument(ns: string, name: string, content: XmlNode): string {
  const declarations = Object.fromEntries(Object.entries(PREFIXES).map(([uri, prefix]) => [`@xmlns:${prefix}`, uri]));
  return builder.build({
    '?xml': { '@version': '1.0', '@encoding': 'UTF-8' },
    [`${PREFIXES[ns]}:${name}`]: { ...declarations, ...content },
  });
}

/** Content without a document around it: elements whose prefixes a document built by xmlDocument declares. */
export function xmlFragment(content: XmlNode): string {
  return builder.build(content);
}

/**
 * The qualified name and any declaration element `name` needs: a known namespace by its prefix, any
 * other by a prefix of its own (`N1`, `N2`, … unique within `index`), declared on the element.
 */
export function qualified({ ns, name }: PropertyName, index: number): { key: string; declaration: XmlNode } {
  const prefix = PREFIXES[ns];
  if (prefix) return { key: `${prefix}:${name}`, declaration: {} };
  // No namespace: unprefixed (no default namespace is declared), as no prefix may be bound to "".
  if (ns === '') return { key: name, declaration: {} };
  return { key: `N${index}:${name}`, declaration: { [`@xmlns:N${index}`]: ns } };
}
