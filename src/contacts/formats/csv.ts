import { parse } from 'csv-parse/sync';
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
const COLUMNS = ['first_name', 'last_name', 'email', 'phone', 'birthday', 'additional_data'] as const;
/** The order in which a missing column is reported; `additional_data` may be left out. */
const REQUIRED = ['first_name', 'last_name', 'email', 'phone', 'birthday'] as const;
type Column = (typeof COLUMNS)[number];

/** The CSV header line (RFC 4180), CRLF-terminated. */
export function csvHeader(): string {
  return COLUMNS.join(',') + CRLF;
}

/**
 * One CSV row for `contact`, CRLF-terminated. A cell a spreadsheet would run as a formula is
 * defused (see `defuse`); a phone is written as it is stored, `+` and digits, which a spreadsheet
 * reads as a number and never as a call.
 */
export function csvRowOf(contact: Contact): string {
  const additional = contact.additional_data == null ? '' : JSON.stringify(contact.additional_data);
  // A null field (a card stored over CardDAV) is an empty cell; a phone is E.164 and needs no escape.
  const phone = contact.phone === null || E164.test(contact.phone) ? (contact.phone ?? '') : defuse(contact.phone);
  const cells = [
    defuse(contact.first_name),
    defuse(contact.last_name),
    defuse(contact.email ?? ''),
    phone,
    defuse(contact.birthday ?? ''),
    defuse(additional),
  ];
  return cells.map(quote).join(',') + CRLF;
}

function quote(value: string): string {
  return /[",\r\n]/.test(value) ? `"${value.replaceAll('"', '""')}"` : value;
}

/** What a stored phone is (openapi.yaml, `Contact.phone`). */
const E164 = /^\+[1-9][0-9]{6,14}$/;

/** First characters that make a spreadsheet read a cell as a formula (OWASP, "CSV Injection"). */
const FORMULA_START = new Set(['=', '+', '-', '@', '\t', '\r', '\0']);
const ESCAPE = "'";

/** A cell `undefuse` shortens: a `'` before a formula character or before another `'`. */
const isEscaped = (cell: string) => cell.startsWith(ESCAPE) && (FORMULA_START.has(cell.charAt(1)) || cell.charAt(1) === ESCAPE);

/**
 * A value as a cell a spreadsheet shows rather than runs: a `'` before a leading formula character.
 * A value that already looks escaped gets one more `'`, so that `undefuse` reads every value back exactly.
 */
export function defuse(value: string): string {
  return FORMULA_START.has(value.charAt(0)) || isEscaped(value) ? ESCAPE + value : value;
}

/** The value of a cell `defuse` wrote, as a spreadsheet reads it too: the escaping `'` dropped. */
export function undefuse(cell: string): string {
  return isEscaped(cell) ? cell.slice(1) : cell;
}

interface Row {
  cells: string[];
  /** The first thing wrong with the row ("has ..."), if anything. */
  problem: string | null;
  /** A line with nothing on it but blanks: skipped, not counted. */
  blank: boolean;
}

/**
 * The rows of a CSV body (RFC 4180; LF or lone CR line ends and a UTF-8 BOM tolerated) as entries
 * numbered from 1 after the header. Header names are matched trimmed and ignoring case, the first of
 * a repeated name wins, and unknown columns are ignored. A missing required column, or a header whose
 * quoting is broken, is `ok: false`; so is a body with more than MAX_BLANK_LINES blank lines
 * (`tooLarge`). A cell `defuse` escaped is read back unescaped. Never throws.
 */
export function parseCsv(text: string, options: ImportOptions = {}): ImportResult {
  const maxEntries = options.maxEntries ?? Infinity;
  const entries: ImportEntry[] = [];
  const index = new Map<Column, number>();
  // Set from inside readRows' callback, where TypeScript does not follow assignments to locals.
  const read: { names: string[] | null; refusal: { detail: string; tooLarge?: true } | null; blankLines: number } = {
    names: null,
    refusal: null,
    blankLines: 0,
  };

  readRows(text, (row) => {
    if (row.blank) {
      if (++read.blankLines <= MAX_BLANK_LINES) return true;
      read.refusal = { detail: `Too many blank lines in one import (max ${MAX_BLANK_LINES})`, tooLarge: true };
      return false;
    }
    if (read.names === null) {
      if (row.problem !== null) {
        read.refusal = { detail: `CSV header ${row.problem}` };
        return false;
      }
      read.names = row.cells.map((name) => name.trim().toLowerCase());
      for (const column of COLUMNS) {
        const at = read.names.indexOf(column);
        if (at !== -1) index.set(column, at);
      }
      const missing = REQUIRED.find((column) => !index.has(column));
      if (missing) read.refusal = { detail: `Missing CSV column '${missing}'` };
      return !missing;
    }
    if (entries.length >= maxEntries) return false;
    const entry = entries.length + 1;
    if (row.problem !== null) entries.push({ entry, detail: `CSV row ${row.problem}` });
    else if (row.cells.length !== read.names.length) {
      entries.push({ entry, detail: `CSV row has ${fieldCount(row.cells.length)}; the header has ${read.names.length}` });
    } else entries.push(entryOf(entry, row.cells, index));
    return true;
  });
  if (read.refusal) return { ok: false, ...read.refusal };
  if (read.names === null) return { ok: false, detail: `Missing CSV column '${REQUIRED[0]}'` };
  return { ok: true, entries };
}

const fieldCount = (count: number) => (count === 1 ? '1 field' : `${count} fields`);

function entryOf(entry: number, cells: string[], index: Map<Column, number>): ImportEntry {
  const fields: ImportFields = {};
  for (const column of REQUIRED) fields[column] = undefuse(cells[index.get(column)!]!);
  const at = index.get('additional_data');
  const additional = at === undefined ? '' : undefuse(cells[at]!);
  if (additional !== '') {
    const parsed = additionalDataOf(additional);
    if ('detail' in parsed) return { entry, detail: parsed.detail };
    fields.additional_data = parsed.value;
  }
  return { entry, fields };
}

/** Thrown from csv-parse's callbacks to stop reading. */
class StopReading extends Error {}

const QUOTE = 0x22;
const COMMA = 0x2c;
const CR = 0x0d;
const LF = 0x0a;
const UTF8_BOM = Buffer.from([0xef, 0xbb, 0xbf]);

/**
 * RFC 4180 records, read by csv-parse, handed to `visit` in order until it answers false; empty
 * lines as one `blank` row each. A quote inside an unquoted cell is kept as text (csv-parse's
 * `relax_quotes`). Text after a closing quote, a quote never closed (which runs to the end of the
 * body), and a record over MAX_LINE_BYTES are the row's problem: csv-parse reads the first one as
 * text too, so each record is checked against its bytes in the body (`rawLength`).
 */
function readRows(text: string, visit: (row: Row) => boolean): void {
  const body = Buffer.from(text);
  let next = body.subarray(0, 3).equals(UTF8_BOM) ? 3 : 0;
  let emptyLines = 0;
  const stopUnless = (goOn: boolean) => {
    if (!goOn) throw new StopReading();
  };
  const emptyLinesUpTo = (count: number) => {
    for (; emptyLines < count; emptyLines++) stopUnless(visit({ cells: [''], problem: null, blank: true }));
  };
  // csv-parse makes an Error for every record whose field count is not the header's, and throws it
  // away (relax_column_count); capturing their stacks took most of the time of a body of such rows.
  const stackTraceLimit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    parse(body, {
      bom: true,
      record_delimiter: ['\r\n', '\n', '\r'],
      relax_quotes: true,
      relax_column_count: true,
      // Counted in `empty_lines` for almost nothing; csv-parse would otherwise make each one a record.
      skip_empty_lines: true,
      // Only a quote still open at the end of the body is left to skip; on_skip reports it.
      skip_records_with_error: true,
      on_record: (record, context) => {
        emptyLinesUpTo(context.empty_lines);
        // Empty lines skipped before the record are CR and LF bytes.
        while (body[next] === CR || body[next] === LF) next++;
        const cells = record;
        const length = rawLength(body, next, cells);
        const quoted = body[next] === QUOTE;
        next = context.bytes;
        const problem =
          length === null ? 'has text after a closing quote' : length > MAX_LINE_BYTES ? `is longer than ${MAX_LINE_BYTES} bytes` : null;
        stopUnless(visit({ cells, problem, blank: cells.length === 1 && !quoted && cells[0]!.trim() === '' }));
        return null;
      },
      on_skip: () => {
        stopUnless(visit({ cells: [], problem: 'has a quoted field that is never closed', blank: false }));
        return undefined;
      },
    });
    // Empty lines after the last record: what is left is CR and LF bytes, and CRLF is one line end.
    let trailing = emptyLines;
    for (let at = next; at < body.length; at++) if (body[at] === LF || (body[at] === CR && body[at + 1] !== LF)) trailing++;
    emptyLinesUpTo(trailing);
  } catch (error) {
    if (!(error instanceof StopReading)) throw error;
  } finally {
    Error.stackTraceLimit = stackTraceLimit;
  }
}

/**
 * The bytes the record `cells` takes in `body` from `start` up to its line end, or null when it is
 * not what csv-parse read it from verbatim: an unquoted cell is its own bytes, a quoted one is a
 * quote, the value with each quote doubled, and a quote. Only a closing quote followed by more text
 * in the cell (which csv-parse keeps, quote and all) breaks the match.
 */
function rawLength(body: Buffer, start: number, cells: string[]): number | null {
  let at = start;
  for (const [index, cell] of cells.entries()) {
    if (index > 0) {
      if (body[at] !== COMMA) return null;
      at++;
    }
    if (body[at] !== QUOTE) {
      at += Buffer.byteLength(cell);
      continue;
    }
    const escaped = Buffer.from(cell.replaceAll('"', '""'));
    if (at + escaped.length + 2 > body.length) return null;
    if (body.compare(escaped, 0, escaped.length, at + 1, at + 1 + escaped.length) !== 0 || body[at + 1 + escaped.length] !== QUOTE)
      return null;
    at += escaped.length + 2;
  }
  return body[at] === undefined || body[at] === CR || body[at] === LF ? at - start : null;
}
