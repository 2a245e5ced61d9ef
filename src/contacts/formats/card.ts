/**
 * A vCard kept verbatim: each content line remembers its exact text (folding and line end as
 * written), so a card that nobody edits is served back octet for octet, and an edit replaces only
 * the lines it changes. Parsing is linear in the card's length: a folded line's pieces are collected
 * and joined once.
 */

/** One logical content line: `[group.]NAME[;params]:value`. */
export interface CardLine {
  /** The exact text of the line, folding and line end included. */
  raw: string;
  /** Upper-case group (`ITEM1`), or null. */
  group: string | null;
  /** Upper-case property name, without its group. */
  name: string;
  /** Everything before the value's colon, unfolded, as written (`item1.TEL;TYPE=cell`). */
  prefix: string;
  /** The value, unfolded, still escaped. */
  value: string;
}

export interface Card {
  lines: CardLine[];
  /** The line end the card uses, for lines an edit adds. */
  eol: string;
}

/** Why a text is not exactly one well-formed vCard. */
export class CardError extends Error {}

const NAME = /^[A-Za-z0-9-]+$/;
/** RFC 6350 §3.2: lines longer than 75 octets (without the line end) are folded. */
const MAX_LINE_OCTETS = 75;

/** The logical line `text` as prefix and value, or null when it is no content line. */
function splitLine(text: string): { group: string | null; name: string; prefix: string; value: string } | null {
  let i = 0;
  while (i < text.length && text[i] !== ';' && text[i] !== ':') i++;
  const fullName = text.slice(0, i);
  const dot = fullName.lastIndexOf('.');
  const name = fullName.slice(dot + 1);
  const group = dot === -1 ? null : fullName.slice(0, dot);
  if (!NAME.test(name) || (group !== null && !group.split('.').every((part) => NAME.test(part)))) return null;
  // Parameters: a colon inside a quoted value does not end them.
  let quoted = false;
  for (; i < text.length; i++) {
    const char = text[i];
    if (char === '"') quoted = !quoted;
    else if (char === ':' && !quoted) break;
  }
  if (i >= text.length) return null;
  return { group: group && group.toUpperCase(), name: name.toUpperCase(), prefix: text.slice(0, i), value: text.slice(i + 1) };
}

/**
 * The content lines of `text` (CRLF, LF or a lone CR between lines; a line starting with a space
 * or tab continues the one before). Throws CardError when a non-blank line is no content line.
 */
export function parseCard(text: string): Card {
  const lines: CardLine[] = [];
  const breaks = /\r\n|\n|\r/g;
  let eol: string | null = null;
  let start = 0;
  let current: { start: number; pieces: string[] } | null = null;
  const finish = (end: number) => {
    if (!current) return;
    const logical = current.pieces.length === 1 ? current.pieces[0]! : current.pieces.join('');
    if (logical.trim() !== '') {
      const parts = splitLine(logical);
      if (!parts) throw new CardError(`line ${lines.length + 1} is not a property (NAME:value)`);
      lines.push({ raw: text.slice(current.start, end), ...parts });
    } else if (lines.length > 0) {
      // A blank line belongs to the line before, so nothing of the text is lost.
      lines[lines.length - 1]!.raw += text.slice(current.start, end);
    }
    current = null;
  };
  for (;;) {
    const found = breaks.exec(text);
    const lineEnd = found ? found.index : text.length;
    const next = found ? lineEnd + found[0].length : text.length;
    if (found) eol ??= found[0];
    const physical = text.slice(start, lineEnd);
    if (current && (physical.startsWith(' ') || physical.startsWith('\t'))) {
      current.pieces.push(physical.slice(1));
    } else {
      finish(start);
      current = { start, pieces: [physical] };
    }
    start = next;
    if (!found) break;
  }
  finish(text.length);
  return { lines, eol: eol ?? '\r\n' };
}

/** The card's text: every line as written, edited lines as rewritten. */
export function cardText(card: Card): string {
  return card.lines.map((line) => line.raw).join('');
}

/** Octets of one code point in UTF-8. */
function utf8Octets(codePoint: number): number {
  return codePoint < 0x80 ? 1 : codePoint < 0x800 ? 2 : codePoint < 0x10000 ? 3 : 4;
}

/** A logical line folded at 75 octets of UTF-8 (never inside a character), ending in `eol`. */
export function foldedLine(text: string, eol: string): string {
  const pieces: string[] = [];
  let pieceStart = 0;
  let used = 0;
  let room = MAX_LINE_OCTETS;
  let offset = 0;
  for (const char of text) {
    const size = utf8Octets(char.codePointAt(0)!);
    if (used + size > room) {
      pieces.push(text.slice(pieceStart, offset));
      pieceStart = offset;
      used = 0;
      room = MAX_LINE_OCTETS - 1;
    }
    used += size;
    offset += char.length;
  }
  pieces.push(text.slice(pieceStart));
  return pieces.join(`${eol} `) + eol;
}

/** A content line built from its prefix and (escaped) value, folded in the card's line end. */
export function contentLine(card: Card, prefix: string, value: string): CardLine {
  const parts = splitLine(`${prefix}:${value}`)!;
  return { raw: foldedLine(`${prefix}:${value}`, card.eol), ...parts };
}

/** RFC 6350 §3.4 unescaping (`\\`, `\,`, `\;`, `\n`); any other backslash is kept as written. */
export function unescapeValue(value: string): string {
  return value.replace(/\\([\\,;nN])/g, (_, char: string) => (char === 'n' || char === 'N' ? '\n' : char));
}

/** A TEXT value escaped as RFC 6350 §3.4 says; a CR (no escape exists for it) becomes `\n` as well. */
export function escapeValue(value: string): string {
  return value.replace(/\r\n|[\\,;\n\r]/g, (found) => (found === '\\' || found === ',' || found === ';' ? `\\${found}` : '\\n'));
}

/** The components of a structured value (N, ADR), split at unescaped semicolons, still escaped. */
export function componentsOf(value: string): string[] {
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

/**
 * Checks that `card` is exactly one vCard: BEGIN:VCARD first, END:VCARD last, no card inside.
 * Throws CardError otherwise.
 */
export function checkSingleCard(card: Card): void {
  const { lines } = card;
  const isMarker = (line: CardLine | undefined, name: string) =>
    line?.name === name && line.group === null && line.value.trim().toUpperCase() === 'VCARD';
  if (!isMarker(lines[0], 'BEGIN')) throw new CardError('the body does not start with BEGIN:VCARD');
  if (!isMarker(lines[lines.length - 1], 'END') || lines.length < 2) throw new CardError('the card has no END:VCARD at its end');
  for (let i = 1; i < lines.length - 1; i++) {
    const line = lines[i]!;
    if (line.name === 'BEGIN' || line.name === 'END') throw new CardError('the body holds more than one vCard');
  }
}

/** The first line named `name` (upper case), if any. */
export function firstLine(card: Card, name: string): CardLine | undefined {
  return card.lines.find((line) => line.name === name);
}
