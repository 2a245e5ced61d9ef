import { TextDecoder } from 'node:util';
import {
  additionalDataOf,
  type Contact,
  type ImportEntry,
  type ImportFields,
  type ImportOptions,
  type ImportResult,
  MAX_BLANK_LINES,
  MAX_LINE_BYTES,
} from './entries.js';

const CRLF = '\r\n';
/** RFC 6350 §3.2: lines longer than 75 octets (without the CRLF) are folded. */
const MAX_LINE_OCTETS = 75;
const NAME = /^[A-Za-z0-9_-]+$/;
const BARE_ENCODINGS = new Set(['QUOTED-PRINTABLE', 'BASE64', '8BIT', '7BIT']);
const NO_CARD = 'No vCard in the body: it has no BEGIN:VCARD line';

/** One vCard 4.0 (RFC 6350) for `contact`: CRLF line ends, folded at 75 octets, ending in CRLF. */
export function vcardOf(contact: Contact): string {
  const lines = [
    'BEGIN:VCARD',
    'VERSION:4.0',
    // One of the names may be empty (a card stored over CardDAV): no blank stands for it.
    `FN:${escapeText([contact.first_name, contact.last_name].filter((name) => name !== '').join(' '))}`,
    `N:${escapeText(contact.last_name)};${escapeText(contact.first_name)};;;`,
    // A field a card stored over CardDAV left null has no line (openapi.yaml, Contact).
    ...(contact.email === null ? [] : [`EMAIL:${escapeText(contact.email)}`]),
    ...(contact.phone === null ? [] : [`TEL;VALUE=uri:tel:${contact.phone}`]),
    ...(contact.birthday === null ? [] : [`BDAY:${contact.birthday.replaceAll('-', '')}`]),
    `REV:${timestampOf(contact.updated_at)}`,
  ];
  if (contact.additional_data != null) lines.push(`X-ADDITIONAL-DATA:${escapeText(JSON.stringify(contact.additional_data))}`);
  lines.push('END:VCARD');
  return lines.map(foldLine).join(CRLF) + CRLF;
}

/**
 * A TEXT value escaped as RFC 6350 §3.4 says: backslash, comma, semicolon and newline. vCard has no
 * escape for a carriage return, so CRLF and a lone CR become `\n` too.
 */
export function escapeText(value: string): string {
  return value.replace(/\r\n|[\\,;\n\r]/g, (found) => (found === '\\' || found === ',' || found === ';' ? `\\${found}` : '\\n'));
}

/** A content line folded at 75 octets of UTF-8 (the leading space counts), never inside a character. */
export function foldLine(line: string): string {
  if (Buffer.byteLength(line) <= MAX_LINE_OCTETS) return line;
  let folded = '';
  let used = 0;
  let room = MAX_LINE_OCTETS;
  for (const char of line) {
    const size = utf8Octets(char.codePointAt(0)!);
    if (used + size > room) {
      folded += `${CRLF} `;
      used = 0;
      room = MAX_LINE_OCTETS - 1;
    }
    folded += char;
    used += size;
  }
  return folded;
}

/** Octets of one code point in UTF-8 (a lone surrogate is written as U+FFFD: 3). */
function utf8Octets(codePoint: number): number {
  return codePoint < 0x80 ? 1 : codePoint < 0x800 ? 2 : codePoint < 0x10000 ? 3 : 4;
}

/** `2025-01-31T09:30:00.123Z` as an RFC 6350 timestamp, `20250131T093000Z` (no fractions). */
function timestampOf(iso: string): string {
  return `${new Date(iso).toISOString().slice(0, 19).replace(/[-:]/g, '')}Z`;
}

interface Line {
  text: string;
  /** Physical line number (from 1) where this logical line starts. */
  number: number;
  /** Where the line starts in the body, and where its last physical line ends (before its line end). */
  start: number;
  end: number;
  /** Characters this line takes in the body, from its first to its last physical line, line ends included. */
  span: number;
  /** Over MAX_LINE_BYTES as written: `text` is not kept. */
  tooLong: boolean;
}

interface Property {
  /** Upper case, without its group. */
  name: string;
  /** Upper-case parameter names; 2.1-style bare parameters (`TEL;CELL`) are TYPE or ENCODING values. */
  params: Map<string, string[]>;
  value: string;
}

interface OpenCard {
  entry: number;
  /** The first of each property this import reads. */
  found: Map<string, Property>;
  /** The first structural problem, reported instead of the fields. */
  problem: string | null;
}

const READ = new Set(['N', 'FN', 'EMAIL', 'TEL', 'BDAY', 'X-ADDITIONAL-DATA']);

/**
 * The cards of a vCard 3.0/4.0 body (2.1 quoted-printable too), one entry per BEGIN:VCARD in order.
 * Text outside cards is ignored; only a body with no BEGIN:VCARD at all is `ok: false`, and one with
 * more than MAX_BLANK_LINES blank lines and lines outside cards (`tooLarge`). A logical line over
 * MAX_LINE_BYTES is its card's error. Each line is read once, so the time is linear in the body.
 * Never throws.
 */
export function parseVcards(body: string, options: ImportOptions = {}): ImportResult {
  const text = body.startsWith('\uFEFF') ? body.slice(1) : body;
  const lines = logicalLines(text);
  const maxEntries = options.maxEntries ?? Infinity;
  const entries: ImportEntry[] = [];
  let card: OpenCard | null = null;
  let cards = 0;
  let ignoredLines = 0;
  for (let next = lines.next(); !next.done && entries.length < maxEntries;) {
    const line = next.value;
    next = lines.next();
    const property = line.tooLong ? null : propertyOf(line.text);
    if (property && isMarker(property, 'BEGIN')) {
      if (card) entries.push({ entry: card.entry, detail: `vCard has no END:VCARD before the BEGIN:VCARD on line ${line.number}` });
      card = { entry: ++cards, found: new Map(), problem: null };
      continue;
    }
    if (!card || (!line.tooLong && line.text.trim() === '')) {
      // A line outside any card, or a blank one: part of no entry.
      if (++ignoredLines > MAX_BLANK_LINES) return { ok: false, detail: TOO_MANY_IGNORED_LINES, tooLarge: true };
      continue;
    }
    if (line.tooLong) {
      card.problem ??= tooLongLine(line);
    } else if (!property) {
      card.problem ??= `vCard line ${line.number} is not a property (NAME:value)`;
    } else if (isMarker(property, 'END')) {
      entries.push(card.problem === null ? entryOf(card) : { entry: card.entry, detail: card.problem });
      card = null;
    } else {
      if (isQuotedPrintable(property) && property.value.endsWith('=')) {
        // Quoted-printable soft line breaks: a value ending in '=' goes on on the next line. The
        // lines it goes on to are cut from the body once, and their breaks removed in one pass.
        let last = line;
        let span = line.span;
        while (last.text.endsWith('=') && !next.done && span <= MAX_LINE_BYTES) {
          last = next.value;
          next = lines.next();
          span += last.tooLong ? Infinity : last.span;
        }
        const value =
          span > MAX_LINE_BYTES ? null : property.value.slice(0, -1) + softBreaksRemoved(text.slice(line.start + line.span, last.end));
        // At most 3 UTF-8 bytes per UTF-16 unit: only a value a third as long as the limit needs counting.
        if (value === null || (span > MAX_LINE_BYTES / 3 && Buffer.byteLength(value) > MAX_LINE_BYTES)) {
          card.problem ??= tooLongLine(line);
          continue;
        }
        property.value = value;
      }
      if (READ.has(property.name) && !card.found.has(property.name)) card.found.set(property.name, property);
    }
  }
  if (card && entries.length < maxEntries) entries.push({ entry: card.entry, detail: 'vCard has no END:VCARD' });
  return cards === 0 ? { ok: false, detail: NO_CARD } : { ok: true, entries };
}

const tooLongLine = (line: Line) => `vCard line ${line.number} is longer than ${MAX_LINE_BYTES} bytes`;
const TOO_MANY_IGNORED_LINES = `Too many blank lines or lines outside cards in one import (max ${MAX_BLANK_LINES})`;

const SPACE = 0x20;
const TAB = 0x09;
const CR = 0x0d;
const LF = 0x0a;

/**
 * Physical lines (CRLF, LF or a lone CR) joined into logical ones: a line starting with a space or
 * tab continues the one before (RFC 6350 §3.2). The pieces of a line are joined once; a line
 * longer than MAX_LINE_BYTES as written is `tooLong`, and its text is not kept.
 */
function* logicalLines(text: string): Generator<Line> {
  let current: { first: string; rest: string[] | null; number: number; start: number; end: number; span: number } | null = null;
  const finish = ({ first, rest, number, start, end, span }: NonNullable<typeof current>): Line => {
    // At most 3 UTF-8 bytes per UTF-16 unit: only a line a third as long as the limit needs counting.
    const tooLong =
      span > MAX_LINE_BYTES || (span > MAX_LINE_BYTES / 3 && Buffer.byteLength(text.slice(start, start + span)) > MAX_LINE_BYTES);
    return { text: tooLong ? '' : rest ? first + rest.join('') : first, number, start, end, span, tooLong };
  };
  // The next CR and LF at or after `at`, each searched for again only once passed: one pass in all.
  let nextCr = text.indexOf('\r');
  let nextLf = text.indexOf('\n');
  let number = 0;
  for (let at = 0; at < text.length;) {
    if (nextCr !== -1 && nextCr < at) nextCr = text.indexOf('\r', at);
    if (nextLf !== -1 && nextLf < at) nextLf = text.indexOf('\n', at);
    const end = Math.min(nextCr === -1 ? text.length : nextCr, nextLf === -1 ? text.length : nextLf);
    const next = end === text.length ? end : text.charCodeAt(end) === CR && text.charCodeAt(end + 1) === LF ? end + 2 : end + 1;
    number++;
    const first = text.charCodeAt(at);
    if (current && (first === SPACE || first === TAB)) {
      current.span += next - at;
      current.end = end;
      if (current.span <= MAX_LINE_BYTES) (current.rest ??= []).push(text.slice(at + 1, end));
    } else {
      if (current) yield finish(current);
      current = { first: text.slice(at, end), rest: null, number, start: at, end, span: next - at };
    }
    at = next;
  }
  if (current) yield finish(current);
}

/**
 * The lines a quoted-printable value goes on to, as written, made one: folds undone (RFC 6350
 * §3.2), then each soft line break, an '=' that ends a line, removed with its line end.
 */
function softBreaksRemoved(written: string): string {
  return written.replace(/(?:\r\n|\n|\r)[ \t]/g, '').replace(/=(?:\r\n|\n|\r)/g, '');
}

function isMarker(property: Property, name: 'BEGIN' | 'END'): boolean {
  return property.name === name && property.value.trim().toUpperCase() === 'VCARD';
}

/** `[group.]NAME[;PARAM=value[,value]...]:value`, or null when the line is not one. */
function propertyOf(line: string): Property | null {
  let i = 0;
  while (i < line.length && line[i] !== ';' && line[i] !== ':') i++;
  const fullName = line.slice(0, i);
  if (!fullName.split('.').every((part) => NAME.test(part))) return null;
  const params = new Map<string, string[]>();
  const add = (name: string, value: string) => {
    const values = params.get(name);
    if (values) values.push(value);
    else params.set(name, [value]);
  };
  while (line[i] === ';') {
    const start = ++i;
    while (i < line.length && line[i] !== ';' && line[i] !== ':' && line[i] !== '=') i++;
    const param = line.slice(start, i).toUpperCase();
    if (line[i] !== '=') {
      add(BARE_ENCODINGS.has(param) ? 'ENCODING' : 'TYPE', param);
      continue;
    }
    i++;
    for (;;) {
      if (line[i] === '"') {
        const end = line.indexOf('"', i + 1);
        if (end === -1) return null;
        add(param, line.slice(i + 1, end));
        i = end + 1;
      } else {
        const begin = i;
        while (i < line.length && line[i] !== ',' && line[i] !== ';' && line[i] !== ':') i++;
        add(param, line.slice(begin, i));
      }
      if (line[i] !== ',') break;
      i++;
    }
  }
  if (line[i] !== ':') return null;
  return { name: fullName.slice(fullName.lastIndexOf('.') + 1).toUpperCase(), params, value: line.slice(i + 1) };
}

function isQuotedPrintable(property: Property): boolean {
  return (property.params.get('ENCODING') ?? []).some((value) => value.toUpperCase() === 'QUOTED-PRINTABLE');
}

/** The value as text: quoted-printable decoded in its CHARSET (UTF-8 when absent or unknown). */
function rawValue(property: Property): string {
  if (!isQuotedPrintable(property)) return property.value;
  const input = Buffer.from(property.value);
  const bytes = new Uint8Array(input.length);
  let length = 0;
  for (let i = 0; i < input.length; i++) {
    const hex = input[i] === 0x3d ? input.subarray(i + 1, i + 3).toString('latin1') : '';
    if (/^[0-9A-Fa-f]{2}$/.test(hex)) {
      bytes[length++] = Number.parseInt(hex, 16);
      i += 2;
    } else {
      bytes[length++] = input[i]!;
    }
  }
  return decoderFor(property.params.get('CHARSET')?.[0]).decode(bytes.subarray(0, length));
}

function decoderFor(charset: string | undefined): TextDecoder {
  try {
    return new TextDecoder(charset ?? 'utf-8');
  } catch {
    return new TextDecoder('utf-8');
  }
}

/** RFC 6350 §3.4 unescaping; any other backslash sequence is kept as written. */
function unescapeText(value: string): string {
  return value.replace(/\\([\\,;nN])/g, (_, char: string) => (char === 'n' || char === 'N' ? '\n' : char));
}

/** The components of a compound value (N), split at unescaped semicolons, still escaped. */
function componentsOf(value: string): string[] {
  const components: string[] = [];
  let start = 0;
  for (let i = 0; i < value.length; i++) {
    if (value[i] === '\\') i++;
    else if (value[i] === ';') {
      components.push(value.slice(start, i));
      start = i + 1;
    }
  }
  components.push(value.slice(start));
  return components;
}

function entryOf(card: OpenCard): ImportEntry {
  const fields: ImportFields = {};
  const text = (name: string) => {
    const property = card.found.get(name);
    return property && rawValue(property);
  };
  Object.assign(fields, namesOf(text('N'), text('FN')));
  const email = text('EMAIL');
  if (email !== undefined) fields.email = unescapeText(email);
  const tel = text('TEL');
  if (tel !== undefined) fields.phone = tel.replace(/^tel:/i, '');
  const bday = text('BDAY');
  if (bday !== undefined) fields.birthday = /^\d{8}$/.test(bday) ? `${bday.slice(0, 4)}-${bday.slice(4, 6)}-${bday.slice(6)}` : bday;
  const additional = text('X-ADDITIONAL-DATA');
  if (additional !== undefined) {
    const parsed = additionalDataOf(unescapeText(additional));
    if ('detail' in parsed) return { entry: card.entry, detail: parsed.detail };
    fields.additional_data = parsed.value;
  }
  return { entry: card.entry, fields };
}

/**
 * Names from N (family;given;...) when it has either; else from FN, split at its last blank: the
 * last word is the last name, the rest the first name, and a single word is a first name only.
 */
function namesOf(n: string | undefined, fn: string | undefined): Pick<ImportFields, 'first_name' | 'last_name'> {
  if (n !== undefined) {
    const [family = '', given = ''] = componentsOf(n).map(unescapeText);
    if (family !== '' || given !== '') return { first_name: given, last_name: family };
  }
  const full = unescapeText(fn ?? '').trim();
  if (full === '') return {};
  let cut = full.length - 1;
  while (cut >= 0 && !/\s/.test(full[cut]!)) cut--;
  return cut < 0 ? { first_name: full } : { first_name: full.slice(0, cut).trimEnd(), last_name: full.slice(cut + 1) };
}
