import sax from 'sax';
import { createCB } from 'xmlbuilder2';
import type { XMLBuilderCB } from 'xmlbuilder2/lib/interfaces.js';

/*
 * XML in and out of the CardDAV face. Requests are read by `sax` (isaacs/sax-js: a maintained,
 * dependency-free streaming parser with namespace support) in strict mode: it never fetches
 * anything, knows only XML's five predefined entities (an undeclared `&name;` is an error), and is
 * told to stop at a `<!DOCTYPE` before reading any of it, so no DTD, external entity or entity
 * expansion ("billion laughs") can take effect. Answers are written by `xmlbuilder2`'s callback
 * builder (maintained; escapes text and attributes, drops characters XML cannot hold), chunk by
 * chunk, never by concatenating markup.
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
      if (attribute.prefix !== 'xmlns' && attribute.name !== 'xmlns') element.attributes[attribute.local] = attribute.value;
    }
    if (stack.length >= MAX_DEPTH) throw new XmlError('Malformed XML body: nested too deeply');
    if (stack.length > 0) stack[stack.length - 1]!.children.push(element);
    else if (root) throw new XmlError('Malformed XML body: more than one root element');
    else root = element;
    stack.push(element);
  };
  parser.onclosetag = () => void stack.pop();
  const onText = (value: string) => {
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

/**
 * A document written by xmlbuilder2's callback builder into an array of chunks. `root` opens the
 * root element in `ns` with every known namespace declared on it.
 */
export function xmlDocument(ns: string, name: string, build: (root: XMLBuilderCB) => void): string {
  const chunks: string[] = [];
  const writer = createCB({ data: (chunk: string) => void chunks.push(chunk), prettyPrint: false });
  const root = writer.dec({ version: '1.0', encoding: 'UTF-8' }).ele(`${PREFIXES[ns]}:${name}`);
  for (const [uri, prefix] of Object.entries(PREFIXES)) root.att(`xmlns:${prefix}`, uri);
  build(root);
  root.up();
  writer.end();
  return chunks.join('');
}

/** Opens element `name` of namespace `ns` under `parent`: a known namespace by its prefix, any other by a default namespace declaration. */
export function element(parent: XMLBuilderCB, { ns, name }: PropertyName): XMLBuilderCB {
  const prefix = PREFIXES[ns];
  return prefix ? parent.ele(`${prefix}:${name}`) : parent.ele(name).att('xmlns', ns);
}
