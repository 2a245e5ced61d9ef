/**
 * The filter language of `GET /api/contacts/?query=` (openapi.yaml, the `query` parameter), parsed into
 * a typed condition list. Pure: no database, no I/O; filter-sql.ts turns the list into SQL.
 */
import { unstorableCharacter } from '../../plugins/http/input-guard.js';
import { schemaFields } from '../generated/schemas.js';

const { filters, kinds, searched } = schemaFields.Contact;

/** The fields the language filters on, and each one's operators: `x-filter` in openapi.yaml. */
export type Field = keyof typeof filters;
type Kind<F extends Field> = (typeof kinds)[F];
/** Fields holding a date (`format: date`) or an instant (`format: date-time`): compared as ranges. */
export type DateField = { [F in Field]: Kind<F> extends 'date' | 'timestamp' ? F : never }[Field];
export type TextField = Exclude<Field, DateField>;
const OPERATORS: Readonly<Record<Field, readonly string[]>> = filters;

/** Fields a bare term searches (`x-search`). */
export const SEARCHED_FIELDS = searched;
/** The phone's filter values lose the separators stored phones lose. */
export const PHONE_FIELD = 'phone' satisfies TextField;

/** Whether `field` holds a calendar date (`YYYY-MM-DD` values), rather than an instant. */
export function isDayField(field: DateField): boolean {
  return kinds[field] === 'date';
}

const MAX_EXPRESSION_LENGTH = 2000;
const MAX_CONDITIONS = 20;

/**
 * One bound of a range. Birthday bounds are `YYYY-MM-DD`; timestamp bounds are
 * `YYYY-MM-DDTHH:MM:SS.mmmZ` (timestamps are stored at millisecond precision, so "before the next
 * day" is "at most .999 of this day").
 */
export interface Bound {
  value: string;
  inclusive: boolean;
}

export type Condition =
  /** A bare term: case-insensitive substring of a searched field; the phone is also searched for `phonePattern`, the term without separators (null when what is left cannot be part of a stored phone). */
  | { type: 'search'; pattern: string; phonePattern: string | null }
  | { type: 'eq'; field: TextField; value: string }
  | { type: 'in'; field: TextField; values: string[] }
  /** A LIKE pattern with `\` as its escape character (PostgreSQL's default). */
  | { type: 'like'; field: TextField; pattern: string; caseInsensitive: boolean }
  | { type: 'range'; field: DateField; lower: Bound | null; upper: Bound | null };

/** A filter expression that cannot be used; `message` is the API's `detail`. */
export class FilterError extends Error {}

const CONDITION_START = /[A-Za-z_][A-Za-z0-9_]*:[A-Za-z_]+:/y;
const PHONE_SEPARATORS = /[ ().-]/g;
/** A stored phone is E.164 (`+` and digits): a term with anything else left cannot be part of one. */
const STORED_PHONE_CHARACTERS = /^[+0-9]+$/;

const malformed = (why: string) => new FilterError(`Malformed filter expression: ${why}`);
/** PostgreSQL text cannot hold NUL or an unpaired surrogate, so such a value could never match and must not reach the database. */
const unstorable = (text: string) => unstorableCharacter(text) !== null;
const invalidValue = (value: string, field: string) => new FilterError(`Invalid filter value '${value}' for field '${field}'`);

/** Escapes `\`, `%` and `_` so LIKE matches the text literally. */
export function likeLiteral(text: string): string {
  return text.replace(/[\\%_]/g, '\\$&');
}

/** A user's like/ilike pattern in LIKE syntax: `\%` and `\_` stay escapes; any other backslash is a literal one. */
export function likePattern(text: string): string {
  let out = '';
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!;
    if (ch !== '\\') out += ch;
    else if (text[i + 1] === '%' || text[i + 1] === '_') out += `\\${text[++i]}`;
    else out += '\\\\';
  }
  return out;
}

/** A phone number without the separators people type (spaces, `-`, `.`, `(`, `)`). */
export function stripPhoneSeparators(phone: string): string {
  return phone.replace(PHONE_SEPARATORS, '');
}

/** Whether `text` is a real calendar date `YYYY-MM-DD` from year 1. */
function isRealDate(text: string): boolean {
  const match = /^(\d{4})-(\d{2})-(\d{2})$/.exec(text);
  if (!match) return false;
  const [year, month, day] = [Number(match[1]), Number(match[2]), Number(match[3])];
  return year >= 1 && month >= 1 && month <= 12 && day >= 1 && day <= daysInMonth(year, month);
}

const DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

function daysInMonth(year: number, month: number): number {
  return month === 2 && isLeapYear(year) ? 29 : DAYS_IN_MONTH[month - 1]!;
}

/** Gregorian leap year. */
export function isLeapYear(year: number): boolean {
  return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
}

type Segment =
  | { kind: 'bare'; text: string }
  | { kind: 'condition'; field: string; operator: string; value: string; unterminated: boolean }
  | { kind: 'incomplete' }
  | { kind: 'overflow' };

/** End of a JSON list starting at `start` (`[`), skipping brackets inside strings; -1 when it never closes. */
function listEnd(text: string, start: number): number {
  let depth = 0;
  let inString = false;
  for (let i = start; i < text.length; i++) {
    const ch = text[i];
    if (inString) {
      if (ch === '\\') i++;
      else if (ch === '"') inString = false;
    } else if (ch === '"') inString = true;
    else if (ch === '[') depth++;
    else if (ch === ']' && --depth === 0) return i;
  }
  return -1;
}

/** Index of the comma that starts the next condition at or after `from`, or -1. */
function nextConditionComma(text: string, from: number): number {
  for (let i = text.indexOf(',', from); i !== -1; i = text.indexOf(',', i + 1)) {
    // Sticky: matched right after the comma, with no window on how long a name may be.
    CONDITION_START.lastIndex = i + 1;
    if (CONDITION_START.test(text)) return i;
  }
  return -1;
}

/**
 * Splits an expression into bare terms and conditions. Bare terms end at any comma; a condition's
 * value ends only at a comma that starts another condition, and an `in_` list first runs to its `]`.
 * Stops after MAX_CONDITIONS + 1 segments.
 */
function split(text: string): Segment[] {
  const segments: Segment[] = [];
  let i = 0;
  let bare = true;
  while (i <= text.length) {
    if (segments.length === MAX_CONDITIONS) {
      segments.push({ kind: 'overflow' });
      break;
    }
    if (bare) {
      const comma = text.indexOf(',', i);
      const piece = text.slice(i, comma === -1 ? text.length : comma);
      if (!piece.includes(':')) {
        segments.push({ kind: 'bare', text: piece });
        if (comma === -1) break;
        i = comma + 1;
        continue;
      }
      bare = false;
    }
    const firstColon = text.indexOf(':', i);
    const secondColon = text.indexOf(':', firstColon + 1);
    const comma = text.indexOf(',', i);
    if (secondColon === -1 || (comma !== -1 && comma < secondColon)) {
      segments.push({ kind: 'incomplete' });
      break;
    }
    const field = text.slice(i, firstColon);
    const operator = text.slice(firstColon + 1, secondColon);
    const valueStart = secondColon + 1;
    let searchFrom = valueStart;
    if (operator === 'in_' && text[valueStart] === '[') {
      const end = listEnd(text, valueStart);
      if (end === -1) {
        segments.push({ kind: 'condition', field, operator, value: text.slice(valueStart), unterminated: true });
        break;
      }
      searchFrom = end + 1;
    }
    const next = nextConditionComma(text, searchFrom);
    segments.push({
      kind: 'condition',
      field,
      operator,
      value: text.slice(valueStart, next === -1 ? text.length : next),
      unterminated: false,
    });
    if (next === -1) break;
    i = next + 1;
  }
  return segments;
}

/** Parses a filter expression into conditions (AND-ed); throws FilterError for the first bad condition from the left. */
export function parseFilter(expression: string): Condition[] {
  if (expression.length > MAX_EXPRESSION_LENGTH) throw malformed(`longer than ${MAX_EXPRESSION_LENGTH} characters`);
  if (expression.trim() === '') return [];
  return split(expression).map((segment, index) => toCondition(segment, index + 1));
}

function toCondition(segment: Segment, position: number): Condition {
  switch (segment.kind) {
    case 'overflow':
      throw malformed(`more than ${MAX_CONDITIONS} conditions`);
    case 'incomplete':
      throw malformed(`condition ${position} is not field:operator:value`);
    case 'bare': {
      const term = segment.text.trim();
      if (term === '') throw malformed(`empty condition ${position}`);
      const character = unstorableCharacter(term);
      if (character) throw malformed(`${character} in condition ${position}`);
      const phone = stripPhoneSeparators(term);
      return { type: 'search', pattern: `%${likeLiteral(term)}%`, phonePattern: STORED_PHONE_CHARACTERS.test(phone) ? `%${phone}%` : null };
    }
    case 'condition': {
      const { field, operator, value } = segment;
      if (!isField(field)) throw new FilterError(`Invalid filter field '${field}'`);
      if (!OPERATORS[field].includes(operator)) throw new FilterError(`Invalid filter operator '${operator}' for field '${field}'`);
      if (segment.unterminated) throw malformed(`unterminated list in condition ${position}`);
      return isDateField(field) ? rangeCondition(field, operator, value) : textCondition(field, operator, value);
    }
  }
}

/** Own keys only: `constructor`, `__proto__` or `toString` are inherited from Object.prototype, not fields. */
function isField(name: string): name is Field {
  return Object.hasOwn(OPERATORS, name);
}

function isDateField(field: Field): field is DateField {
  return kinds[field] === 'date' || kinds[field] === 'timestamp';
}

function textCondition(field: TextField, operator: string, raw: string): Condition {
  const clean = (text: string) => (field === PHONE_FIELD ? stripPhoneSeparators(text) : text);
  if (operator === 'in_') {
    let list: unknown;
    try {
      list = JSON.parse(raw);
    } catch {
      throw invalidValue(raw, field);
    }
    // An escaped `\u0000` or `\ud800` in the JSON is unstorable too.
    if (!Array.isArray(list) || !list.every((item): item is string => typeof item === 'string' && !unstorable(item))) {
      throw invalidValue(raw, field);
    }
    return { type: 'in', field, values: list.map(clean) };
  }
  const value = clean(raw);
  if (value === '' || unstorable(value)) throw invalidValue(raw, field);
  switch (operator) {
    case 'eq':
      return { type: 'eq', field, value };
    case 'like':
    case 'ilike':
      return { type: 'like', field, pattern: likePattern(value), caseInsensitive: operator === 'ilike' };
    case 'startswith':
      return { type: 'like', field, pattern: `${likeLiteral(value)}%`, caseInsensitive: false };
    case 'endswith':
      return { type: 'like', field, pattern: `%${likeLiteral(value)}`, caseInsensitive: false };
    default:
      return { type: 'like', field, pattern: `%${likeLiteral(value)}%`, caseInsensitive: false };
  }
}

/** The instants a date or datetime value covers: a whole UTC day for a date, one millisecond for a datetime. */
interface Span {
  first: string;
  last: string;
}

function rangeCondition(field: DateField, operator: string, raw: string): Condition {
  const span = (text: string): Span => {
    const parsed = isDayField(field) ? (isRealDate(text) ? { first: text, last: text } : null) : timestampSpan(text);
    if (!parsed) throw invalidValue(raw, field);
    return parsed;
  };
  switch (operator) {
    case 'eq': {
      const { first, last } = span(raw);
      return { type: 'range', field, lower: { value: first, inclusive: true }, upper: { value: last, inclusive: true } };
    }
    case 'gt':
      return { type: 'range', field, lower: { value: span(raw).last, inclusive: false }, upper: null };
    case 'lt':
      return { type: 'range', field, lower: null, upper: { value: span(raw).first, inclusive: false } };
    default: {
      const parts = raw.split(',');
      if (parts.length !== 2) throw invalidValue(raw, field);
      const lower = span(parts[0]!);
      const upper = span(parts[1]!);
      return { type: 'range', field, lower: { value: lower.first, inclusive: true }, upper: { value: upper.last, inclusive: true } };
    }
  }
}

const DATETIME = /^(\d{4}-\d{2}-\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?(Z|[+ -](\d{2}):?(\d{2}))$/;
const MIN_INSTANT = utcMillis('0001-01-01');
const MAX_INSTANT = utcMillis('9999-12-31') + 86_400_000 - 1;

/** A date (`YYYY-MM-DD`, the whole UTC day) or an ISO 8601 datetime with `Z` or an offset; null otherwise. */
export function timestampSpan(text: string): Span | null {
  if (isRealDate(text)) {
    const start = utcMillis(text);
    return { first: iso(start), last: iso(start + 86_400_000 - 1) };
  }
  const match = DATETIME.exec(text);
  if (!match) return null;
  const [, date, hh, mm, ss = '00', fraction = '', zone, offH = '00', offM = '00'] = match;
  const [hours, minutes, seconds, offsetHours, offsetMinutes] = [hh, mm, ss, offH, offM].map(Number) as [
    number,
    number,
    number,
    number,
    number,
  ];
  if (!isRealDate(date!) || hours > 23 || minutes > 59 || seconds > 59 || offsetHours > 23 || offsetMinutes > 59) return null;
  // Digits past the millisecond are dropped, not rounded.
  const millis = Number(fraction.slice(0, 3).padEnd(3, '0'));
  // A space stands for `+`: an unencoded `+` in a query string arrives as one.
  const sign = zone === 'Z' ? 0 : zone!.startsWith('-') ? -1 : 1;
  const instant =
    utcMillis(date!) + ((hours * 60 + minutes) * 60 + seconds) * 1000 + millis - sign * (offsetHours * 60 + offsetMinutes) * 60_000;
  if (instant < MIN_INSTANT || instant > MAX_INSTANT) return null;
  return { first: iso(instant), last: iso(instant) };
}

function utcMillis(date: string): number {
  const moment = new Date(0);
  moment.setUTCFullYear(Number(date.slice(0, 4)), Number(date.slice(5, 7)) - 1, Number(date.slice(8, 10)));
  return moment.getTime();
}

function iso(millis: number): string {
  return new Date(millis).toISOString();
}
