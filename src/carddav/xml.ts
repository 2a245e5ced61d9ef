import sax from 'sax';
import { XMLBuilder } from 'fast-xml-parser';

/*
 * XML in and out of the CardDAV face. Requests are read by `sax` (isaacs/sax-js: a maintained,
 * dependency-free streaming parser with namespace support) in strict mode: it never fetches
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

/** Elements may nest this deep: DAV bodies need a handful of levels. */
const MAX_DEPTH = 64;

/** Parses a request body; XmlError when it is not well-formed, holds a DTD, or nests too deeply. */
export function parseXml(text: string): XmlElement {
  const parser = sax.parser(true, { xmlns: true, trim: false, normalize: false });
  const stack: XmlElement[] = [];
  let root: XmlElement | null = null;
  parser.ondoctype = () => {
    throw new XmlError('Malformed XML body');
  };
  parser.onerror = (error) => {
    throw new XmlError(`Malformed XML body: ${error.message.split('\n', 1)[0]}`);
  };
  parser.onopentag = (tag) => {
    const { uri, local, attributes } = tag as sax.QualifiedTag;
    const element: XmlElement = { ns: uri, name: local, attributes: {}, children: [], text: '' };
    for (const attribute of Object.values(attributes)) {
      if (NOT_XML_CHAR.test(attribute.value)) throw new XmlError('Malformed XML body: a character XML cannot hold');
      if (attribute.prefix !== 'xmlns' && attribute.name !== 'xmlns') element.attributes[attribute.local] = attribute.value;
    }
    if (stack.length >= MAX_DEPTH) throw new XmlError('Malformed XML body: nested too deeply');
    if (stack.length > 0) stack[stack.length - 1]!.children.push(element);
    else if (root) throw new XmlError('Malformed XML body: more than one root element');
    else root = element;
    stack.push(element);
  };
  parser.onclosetag = () => void stack.pop();
  // sax lets control characters (raw, or as `&#0;`) through; XML 1.0 §2.2 has none of them.
  const onText = (value: string) => {
    if (NOT_XML_CHAR.test(value)) throw new XmlError('Malformed XML body: a character XML cannot hold');
    if (stack.length > 0) stack[stack.length - 1]!.text += value;
  };
  parser.ontext = onText;
  parser.oncdata = onText;
  try {
    parser.write(text).close();
  } catch (error) {
    if (error instanceof XmlError) throw error;
    throw new XmlError('Malformed XML body');
  }
  if (!root) throw new XmlError('Malformed XML body: no root element');
  return root;
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
