/**
 * Property: for random filter expressions over random contacts, what the database returns equals an
 * independent TypeScript reading of the filter rules (openapi.yaml, the `query` parameter) applied to the same rows.
 */
import fc from 'fast-check';
import t from 'tap';
import * as repository from '../../src/contacts/contacts.repository.js';
import { parseFilter } from '../../src/contacts/filter.js';
import { findsByGrams } from '../../src/contacts/filter-sql.js';
import { parseSort } from '../../src/contacts/sort.js';
import { buildContactsApp, createUser } from './fixtures.js';

interface Row {
  id: number;
  first_name: string;
  last_name: string;
  email: string;
  phone: string;
  birthday: string;
  created_at: number;
  updated_at: number;
}

type TextField = 'first_name' | 'last_name' | 'email' | 'phone';
type DateField = 'birthday' | 'created_at' | 'updated_at';

/** A generated condition, kept structured so the reference reads it without the parser. */
type Spec =
  | { kind: 'bare'; term: string }
  | { kind: 'text'; field: TextField; op: string; value: string }
  | { kind: 'in'; field: TextField; values: string[] }
  | { kind: 'date'; field: DateField; op: string; values: string[] };

const DAY = 86_400_000;
const BASE = Date.parse('2025-01-01T00:00:00.000Z');

// Small alphabets make matches likely; `%`, `_` and `\` test escaping, `é` and `,` the splitter.
// Only one case of `é` occurs anywhere, so case folding beyond ASCII never matters.
const nameChars = fc.constantFrom('a', 'A', 'b', 'B', 'z', '%', '_', '\\', '.', 'é', ',', ' ');
const nameArb = fc.string({ unit: nameChars, minLength: 1, maxLength: 4 }).filter((s) => s.trim() === s && s.length > 0);
const phoneDigits = fc.string({ unit: fc.constantFrom('1', '2', '5', '0'), minLength: 7, maxLength: 9 });
const dateArb = fc
  .record({ y: fc.integer({ min: 1990, max: 1993 }), m: fc.integer({ min: 1, max: 3 }), d: fc.integer({ min: 1, max: 28 }) })
  .map(({ y, m, d }) => `${y}-${String(m).padStart(2, '0')}-${String(d).padStart(2, '0')}`);

const SEED = 20250101;
const data = fc.sample(
  fc.record({
    first_name: nameArb,
    last_name: nameArb,
    local: fc.string({ unit: fc.constantFrom('a', 'B', '_', '%', '.'), minLength: 1, maxLength: 3 }),
    domain: fc.constantFrom('ex.com', 'EX.com', 'b_c.org'),
    phone: phoneDigits,
    birthday: dateArb,
    created: fc.integer({ min: 0, max: 4 * DAY - 1 }),
    updatedAfter: fc.integer({ min: 0, max: 2 * DAY }),
  }),
  { seed: SEED, numRuns: 60 },
);

const app = await buildContactsApp(t);
const user = await createUser(app);
const other = await createUser(app);
const rows: Row[] = [];
for (const [i, d] of data.entries()) {
  const created = BASE + d.created;
  const inserted = await app.db
    .insertInto('contacts')
    .values({
      owner_id: user.id,
      first_name: d.first_name,
      last_name: d.last_name,
      email: `${d.local}${i}@${d.domain}`,
      phone: `+1${d.phone}`,
      birthday: d.birthday,
      created_at: new Date(created),
      updated_at: new Date(created + d.updatedAfter),
    })
    .returning(['id', 'first_name', 'last_name', 'email', 'phone', 'birthday'])
    .executeTakeFirstOrThrow();
  rows.push({ ...(inserted as Omit<Row, 'created_at' | 'updated_at'>), created_at: created, updated_at: created + d.updatedAfter });
}
// Someone else's matching rows must never appear.
await app.db
  .insertInto('contacts')
  .values(
    rows
      .slice(0, 5)
      .map((r) => ({ ...r, id: undefined, owner_id: other.id, created_at: new Date(r.created_at), updated_at: new Date(r.updated_at) })),
  )
  .execute();

// ---- the reference, read from openapi.yaml's `query` parameter ----

const stripPhone = (s: string) => s.replace(/[ ().-]/g, '');

/** A like/ilike pattern as a RegExp: `%` any run, `_` one character, `\%`/`\_` literal, other `\` literal. */
function likeRegExp(pattern: string, ignoreCase: boolean): RegExp {
  let source = '';
  for (let i = 0; i < pattern.length; i++) {
    const ch = pattern[i]!;
    if (ch === '\\' && (pattern[i + 1] === '%' || pattern[i + 1] === '_')) source += `\\${pattern[++i]}`;
    else if (ch === '%') source += '.*';
    else if (ch === '_') source += '.';
    else source += ch.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
  }
  return new RegExp(`^${source}$`, ignoreCase ? 'isu' : 'su');
}

const isDate = (v: string) => /^\d{4}-\d{2}-\d{2}$/.test(v);
/** [first, last] instant covered by a date (whole UTC day) or a datetime (digits past ms dropped). */
function instants(v: string): [number, number] {
  if (isDate(v)) {
    const start = Date.parse(`${v}T00:00:00.000Z`);
    return [start, start + DAY - 1];
  }
  const truncated = v.replace(/(\.\d{3})\d+/, '$1');
  const at = Date.parse(truncated);
  return [at, at];
}

function matches(row: Row, spec: Spec): boolean {
  switch (spec.kind) {
    case 'bare': {
      const term = spec.term.toLowerCase();
      const phoneTerm = stripPhone(spec.term);
      return (
        [row.first_name, row.last_name, row.email].some((v) => v.toLowerCase().includes(term)) ||
        (phoneTerm !== '' && row.phone.toLowerCase().includes(phoneTerm.toLowerCase()))
      );
    }
    case 'in': {
      const clean = spec.field === 'phone' ? spec.values.map(stripPhone) : spec.values;
      return clean.includes(row[spec.field]);
    }
    case 'text': {
      const value = spec.field === 'phone' ? stripPhone(spec.value) : spec.value;
      const actual = row[spec.field];
      switch (spec.op) {
        case 'eq':
          return actual === value;
        case 'contains':
          return actual.includes(value);
        case 'startswith':
          return actual.startsWith(value);
        case 'endswith':
          return actual.endsWith(value);
        default:
          return likeRegExp(value, spec.op === 'ilike').test(actual);
      }
    }
    case 'date': {
      if (spec.field === 'birthday') {
        const [a, b] = spec.values as [string, string?];
        const v = row.birthday;
        return spec.op === 'eq' ? v === a : spec.op === 'gt' ? v > a : spec.op === 'lt' ? v < a : v >= a && v <= b!;
      }
      const ts = row[spec.field];
      const [a, b] = spec.values.map(instants) as [[number, number], [number, number]?];
      switch (spec.op) {
        case 'eq':
          return ts >= a[0] && ts <= a[1];
        case 'gt':
          return ts > a[1];
        case 'lt':
          return ts < a[0];
        default:
          return ts >= a[0] && ts <= b![1];
      }
    }
  }
}

// ---- random expressions ----

const sampleInstant = fc.constantFrom(...rows.flatMap((r) => [r.created_at, r.updated_at]));
const offsetArb = fc.constantFrom('Z', '+00:00', '+02:00', '-05:30', '+14:00');
/** A datetime in the data's range, written with an offset (sometimes exactly a stored instant, sometimes with extra digits). */
const datetimeArb = fc
  .record({ at: fc.oneof(sampleInstant, fc.integer({ min: BASE - DAY, max: BASE + 6 * DAY })), offset: offsetArb, micros: fc.boolean() })
  .map(({ at, offset, micros }) => {
    const minutes = offset === 'Z' ? 0 : (offset.startsWith('-') ? -1 : 1) * (Number(offset.slice(1, 3)) * 60 + Number(offset.slice(4, 6)));
    const local = new Date(at + minutes * 60_000).toISOString().slice(0, 23);
    return `${local}${micros ? '789' : ''}${offset}`;
  });
const dayArb = fc.integer({ min: -1, max: 6 }).map((d) => new Date(BASE + d * DAY).toISOString().slice(0, 10));
const stampArb = fc.oneof(dayArb, datetimeArb);
/** Substrings of stored values make hits likely. */
const pieceOf = (field: TextField) =>
  fc.record({ row: fc.constantFrom(...rows), start: fc.nat(6), length: fc.integer({ min: 1, max: 4 }) }).map(({ row, start, length }) => {
    const value = row[field];
    const from = Math.min(start, value.length - 1);
    return value.slice(from, from + length);
  });
const textValue = (field: TextField) =>
  fc.oneof(
    pieceOf(field),
    field === 'phone' ? phoneDigits : nameArb,
    pieceOf(field).map((piece) => `%${piece}%`),
  );

const textSpec: fc.Arbitrary<Spec> = fc
  .constantFrom<TextField>('first_name', 'last_name', 'email', 'phone')
  .chain((field) => {
    const ops = field === 'phone' ? ['eq', 'like', 'startswith'] : ['eq', 'like', 'ilike', 'startswith', 'endswith', 'contains'];
    return fc.oneof(
      fc.record({ kind: fc.constant('text' as const), field: fc.constant(field), op: fc.constantFrom(...ops), value: textValue(field) }),
      fc.record({ kind: fc.constant('in' as const), field: fc.constant(field), values: fc.array(textValue(field), { maxLength: 3 }) }),
    );
  })
  .filter((s) => s.kind !== 'text' || stripPhone(s.value) !== '');

const dateSpec: fc.Arbitrary<Spec> = fc.constantFrom<DateField>('birthday', 'created_at', 'updated_at').chain((field) => {
  const value = field === 'birthday' ? dateArb : stampArb;
  return fc.oneof(
    fc.record({
      kind: fc.constant('date' as const),
      field: fc.constant(field),
      op: fc.constantFrom('eq', 'gt', 'lt'),
      values: fc.tuple(value).map((v) => [...v]),
    }),
    fc.record({
      kind: fc.constant('date' as const),
      field: fc.constant(field),
      op: fc.constant('between'),
      values: fc.tuple(value, value).map((v) => [...v]),
    }),
  );
});

const bareSpec: fc.Arbitrary<Spec> = fc
  .oneof(pieceOf('first_name'), pieceOf('last_name'), pieceOf('email'), pieceOf('phone'))
  .filter((term) => term.trim() === term && term !== '' && !/[,:]/.test(term))
  .map((term) => ({ kind: 'bare' as const, term }));

function write(spec: Spec): string {
  switch (spec.kind) {
    case 'bare':
      return spec.term;
    case 'in':
      return `${spec.field}:in_:${JSON.stringify(spec.values)}`;
    case 'text':
      return `${spec.field}:${spec.op}:${spec.value}`;
    case 'date':
      return `${spec.field}:${spec.op}:${spec.values.join(',')}`;
  }
}

const expressionArb = fc
  .tuple(fc.array(bareSpec, { maxLength: 2 }), fc.array(fc.oneof(textSpec, dateSpec), { minLength: 0, maxLength: 3 }))
  .map(([bare, conditions]) => [...bare, ...conditions]);

t.test('SQL filtering equals the reference evaluation', async (t) => {
  let nonEmpty = 0;
  await fc.assert(
    fc.asyncProperty(expressionArb, async (specs) => {
      const expression = specs.map(write).join(',');
      const page = await repository.listContacts(app.db, user.id, parseFilter(expression), { skip: 0, limit: 1000 });
      const expected = rows.filter((row) => specs.every((spec) => matches(row, spec))).map((r) => r.id);
      const actual = page.rows.map((r) => r.id);
      if (expected.length > 0) nonEmpty++;
      if (page.total !== expected.length || JSON.stringify(actual) !== JSON.stringify(expected)) {
        throw new Error(`${expression}\nexpected ${JSON.stringify(expected)}\nactual   ${JSON.stringify(actual)} (total ${page.total})`);
      }
    }),
    { numRuns: 150, seed: SEED },
  );
  t.ok(nonEmpty > 30, `enough expressions matched something (${nonEmpty} of 150)`);
});

// ---- pages ----

type SortedField = 'first_name' | 'last_name' | 'birthday';
/** The `sort` parameter's order (openapi.yaml): text by its lower-cased value, then the value, code point by code point; then id. */
function compareBy(sort: string): (a: Row, b: Row) => number {
  const keys =
    sort === '' ? [] : sort.split(',').map((key) => ({ field: key.replace('-', '') as SortedField, sign: key.startsWith('-') ? -1 : 1 }));
  const byCodePoint = (x: string, y: string) => (x < y ? -1 : x > y ? 1 : 0);
  return (a, b) => {
    for (const { field, sign } of keys) {
      const order = byCodePoint(a[field].toLowerCase(), b[field].toLowerCase()) || byCodePoint(a[field], b[field]);
      if (order !== 0) return sign * order;
    }
    return a.id - b.id;
  };
}

t.test('any page in any order is that slice of the reference, whether the matches are walked or fetched', async (t) => {
  // For a filter with a short run, listContacts fetches every match by its grams and sorts it when
  // 3·total² <= (skip + limit) · the owner's contacts (search-grams.test.ts), else walks.
  const ways = { walked: 0, fetched: 0 };
  const pageArb = fc.record({
    specs: expressionArb,
    sort: fc.constantFrom('', 'last_name', '-first_name', 'birthday,-last_name'),
    // Where the page starts, as a share of the matches (so it mostly falls among them).
    at: fc.double({ min: 0, max: 1, noNaN: true }),
    limit: fc.integer({ min: 1, max: 10 }),
  });
  await fc.assert(
    fc.asyncProperty(pageArb, async ({ specs, sort, at, limit }) => {
      const expression = specs.map(write).join(',');
      const matched = rows.filter((row) => specs.every((spec) => matches(row, spec))).sort(compareBy(sort));
      const skip = Math.floor(at * matched.length);
      const page = await repository.listContacts(
        app.db,
        user.id,
        parseFilter(expression),
        { skip, limit },
        sort === '' ? [] : parseSort(sort),
      );
      const expected = matched.slice(skip, skip + limit).map((r) => r.id);
      const actual = page.rows.map((r) => r.id);
      if (findsByGrams(parseFilter(expression))) ways[3 * matched.length ** 2 <= (skip + limit) * rows.length ? 'fetched' : 'walked']++;
      if (page.total !== matched.length || JSON.stringify(actual) !== JSON.stringify(expected)) {
        throw new Error(
          `${expression} sort=${sort} skip=${skip} limit=${limit}\nexpected ${JSON.stringify(expected)}\nactual   ${JSON.stringify(actual)} (total ${page.total})`,
        );
      }
    }),
    { numRuns: 400, seed: SEED },
  );
  t.ok(ways.walked > 10 && ways.fetched > 10, `both ways were taken often enough (${JSON.stringify(ways)})`);
});
