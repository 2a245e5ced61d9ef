import { TextDecoder } from 'node:util';
import { additionalDataOf, type Contact, type ImportEntry, type ImportFields, type ImportOptions, type ImportResult } from './entries.js';

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
 * Text outside cards is ignored; only a body with no BEGIN:VCARD at all is `ok: false`. Never throws.
 */
export function parseVcards(text: string, options: ImportOptions = {}): ImportResult {
  const lines = logicalLines(text.startsWith('\uFEFF') ? text.slice(1) : text);
  const maxEntries = options.maxEntries ?? Infinity;
  const entries: ImportEntry[] = [];
  let card: OpenCard | null = null;
  let cards = 0;
  for (let k = 0; k < lines.length && entries.length < maxEntries; k++) {
    const line = lines[k]!;
    if (line.text.trim() === '') continue;
    const property = propertyOf(line.text);
    if (property && isMarker(property, 'BEGIN')) {
      if (card) entries.push({ entry: card.entry, detail: `vCard has no END:VCARD before the BEGIN:VCARD on line ${line.number}` });
      card = { entry: ++cards, found: new Map(), problem: null };
      if (entries.length >= maxEntries) break;
    } else if (!card) {
      // Outside a card: not part of any entry.
    } else if (property && isMarker(property, 'END')) {
      entries.push(card.problem === null ? entryOf(card) : { entry: card.entry, detail: card.problem });
      card = null;
    } else if (!property) {
      card.problem ??= `vCard line ${line.number} is not a property (NAME:value)`;
    } else {
      if (isQuotedPrintable(property)) {
        // Quoted-printable soft line breaks: a value ending in '=' goes on on the next line.
        while (property.value.endsWith('=') && k + 1 < lines.length) property.value = property.value.slice(0, -1) + lines[++k]!.text;
      }
      if (READ.has(property.name) && !card.found.has(property.name)) card.found.set(property.name, property);
    }
  }
  if (card && entries.length < maxEntries) entries.push({ entry: card.entry, detail: 'vCard has no END:VCARD' });
  return cards === 0 ? { ok: false, detail: NO_CARD } : { ok: true, entries };
}

/** Physical lines (CRLF, LF or a lone CR) joined into logical ones: a line starting with a space or tab continues the one before. */
function logicalLines(text: string): Line[] {
  const lines: Line[] = [];
  text.split(/\r\n|\n|\r/).forEach((physical, index) => {
    const last = lines[lines.length - 1];
    if (last && (physical.startsWith(' ') || physical.startsWith('\t'))) last.text += physical.slice(1);
    else lines.push({ text: physical, number: index + 1 });
  });
  return lines;
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
