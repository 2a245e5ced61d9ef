import { additionalDataOf, type Contact, type ImportEntry, type ImportFields, type ImportOptions, type ImportResult } from './entries.js';

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
 * One CSV row for `contact`, CRLF-terminated. Cells starting with `=`, `+`, `-` or `@` are not
 * defused against spreadsheet formulas: a `'` prefix would break the import round trip (and every phone starts with `+`).
 */
export function csvRowOf(contact: Contact): string {
  const additional = contact.additional_data == null ? '' : JSON.stringify(contact.additional_data);
  // A null field (a card stored over CardDAV) is an empty cell.
  return [contact.first_name, contact.last_name, contact.email ?? '', contact.phone ?? '', contact.birthday ?? '', additional].map(quote).join(',') + CRLF;
}

function quote(value: string): string {
  return /[",\r\n]/.test(value) ? `"${value.replaceAll('"', '""')}"` : value;
}

interface Row {
  cells: string[];
  /** The first thing wrong with the row's quoting ("has ..."), if anything. */
  problem: string | null;
  /** A line with nothing on it but blanks: skipped, not counted. */
  blank: boolean;
}

/**
 * The rows of a CSV body (RFC 4180; LF or lone CR line ends and a UTF-8 BOM tolerated) as entries
 * numbered from 1 after the header. Header names are matched trimmed and ignoring case, the first of
 * a repeated name wins, and unknown columns are ignored. A missing required column, or a header whose
 * quoting is broken, is `ok: false`. Never throws.
 */
export function parseCsv(text: string, options: ImportOptions = {}): ImportResult {
  const rows = rowsOf(text.startsWith('\uFEFF') ? text.slice(1) : text);
  let next = rows.next();
  while (!next.done && next.value.blank) next = rows.next();
  const header = next.done ? { cells: [], problem: null, blank: true } : next.value;
  if (header.problem !== null) return { ok: false, detail: `CSV header ${header.problem}` };
  const names = header.cells.map((name) => name.trim().toLowerCase());
  const index = new Map<Column, number>();
  for (const column of COLUMNS) {
    const at = names.indexOf(column);
    if (at !== -1) index.set(column, at);
  }
  const missing = REQUIRED.find((column) => !index.has(column));
  if (missing) return { ok: false, detail: `Missing CSV column '${missing}'` };

  const maxEntries = options.maxEntries ?? Infinity;
  const entries: ImportEntry[] = [];
  for (const row of rows) {
    if (entries.length >= maxEntries) break;
    if (row.blank) continue;
    const entry = entries.length + 1;
    if (row.problem !== null) entries.push({ entry, detail: `CSV row ${row.problem}` });
    else if (row.cells.length !== names.length) {
      entries.push({ entry, detail: `CSV row has ${fieldCount(row.cells.length)}; the header has ${names.length}` });
    } else entries.push(entryOf(entry, row.cells, index));
  }
  return { ok: true, entries };
}

const fieldCount = (count: number) => (count === 1 ? '1 field' : `${count} fields`);

function entryOf(entry: number, cells: string[], index: Map<Column, number>): ImportEntry {
  const fields: ImportFields = {};
  for (const column of REQUIRED) fields[column] = cells[index.get(column)!]!;
  const at = index.get('additional_data');
  const additional = at === undefined ? '' : cells[at]!;
  if (additional !== '') {
    const parsed = additionalDataOf(additional);
    if ('detail' in parsed) return { entry, detail: parsed.detail };
    fields.additional_data = parsed.value;
  }
  return { entry, fields };
}

/**
 * RFC 4180 records. A quote inside an unquoted cell is kept as text; text after a closing quote, or
 * a quote never closed (which runs to the end of the body), is the row's problem.
 */
function* rowsOf(text: string): Generator<Row> {
  let i = 0;
  while (i < text.length) {
    const cells: string[] = [];
    let problem: string | null = null;
    let quoted: boolean;
    for (;;) {
      let cell = '';
      quoted = text[i] === '"';
      if (quoted) {
        i++;
        for (;;) {
          const close = text.indexOf('"', i);
          if (close === -1) {
            cell += text.slice(i);
            i = text.length;
            problem ??= 'has a quoted field that is never closed';
            break;
          }
          cell += text.slice(i, close);
          i = close + 1;
          if (text[i] !== '"') break;
          cell += '"';
          i++;
        }
      }
      const end = endOfCell(text, i);
      if (end > i) {
        if (quoted) problem ??= 'has text after a closing quote';
        cell += text.slice(i, end);
        i = end;
      }
      cells.push(cell);
      if (text[i] !== ',') break;
      i++;
    }
    if (text[i] === '\r' && text[i + 1] === '\n') i += 2;
    else if (i < text.length) i++;
    yield { cells, problem, blank: cells.length === 1 && !quoted && cells[0]!.trim() === '' };
  }
}

/** Where the cell starting at `from` ends: the next comma, CR or LF, or the end of the text. */
function endOfCell(text: string, from: number): number {
  let i = from;
  while (i < text.length && text[i] !== ',' && text[i] !== '\r' && text[i] !== '\n') i++;
  return i;
}
