/**
 * Sorting the list (openapi.yaml, the `sort` parameter) against the database: every key in both
 * directions, text keys by lower(value) then value byte-wise, ties by id ascending, up to three keys,
 * with query, skip, limit and the Link header, and the errors in their order.
 */
import t from 'tap';
import { as, buildContactsApp, createUser } from './fixtures.js';
import { seededRandom } from '../helper.js';

let clock = new Date('2025-01-01T00:00:00.000Z');
const app = await buildContactsApp(t, { now: () => clock });
const alice = as(app, await createUser(app));
const bob = as(app, await createUser(app));

type Contact = Record<string, any> & { id: number };
const FIELDS = ['id', 'first_name', 'last_name', 'email', 'birthday', 'created_at', 'updated_at'] as const;
type Field = (typeof FIELDS)[number];
const TEXT: readonly Field[] = ['first_name', 'last_name', 'email'];

// Names chosen to tell byte-wise (C) order from a locale's: case pairs, '_' (between 'Z' and 'a'),
// a space, accents (two UTF-8 bytes from 0xC3, after every ASCII letter), Greek and an astral letter.
// Several values repeat, and several instants, so ties fall to id.
const rows: [createdAt: string, first: string, last: string, email: string, birthday: string][] = [
  ['2025-01-01T00:00:00.000Z', 'b', 'Same', 'Zed@example.com', '1990-05-17'],
  ['2025-01-01T00:00:00.000Z', 'B', 'same', 'alice@example.com', '1990-05-17'],
  ['2025-01-02T00:00:00.000Z', 'a', 'Same', 'bob@example.com', '1985-01-01'],
  ['2025-01-02T00:00:00.000Z', 'A', 'Other', '_x@example.com', '2001-12-31'],
  ['2025-01-03T00:00:00.000Z', 'é', 'Other', 'Bob_2@example.com', '1990-05-17'],
  ['2025-01-03T00:00:00.000Z', 'É', 'Über', 'bob.b@example.com', '1970-01-01'],
  ['2025-01-04T00:00:00.000Z', 'z', 'uber', 'ZZ@example.com', '1985-01-01'],
  ['2025-01-04T00:00:00.000Z', 'Z', 'Uber', 'a1@example.com', '2001-12-31'],
  ['2025-01-05T00:00:00.000Z', 'ä', 'über', 'A2@example.com', '1999-02-28'],
  ['2025-01-05T00:00:00.000Z', 'a', 'Same', 'Eve@example.com', '1990-05-17'],
  ['2025-01-06T00:00:00.000Z', 'Ω', 'Alpha', 'omega@example.com', '1960-07-07'],
  ['2025-01-06T00:00:00.000Z', 'ab', 'alpha', 'Omega2@example.com', '1960-07-07'],
  ['2025-01-07T00:00:00.000Z', 'a b', 'Alpha', 'OMEGA3@example.com', '1990-05-17'],
  ['2025-01-07T00:00:00.000Z', '𝒜x', 'same', 'b@example.com', '1999-02-28'],
];
let phone = 4155550100;
const created: Contact[] = [];
for (const [at, first_name, last_name, email, birthday] of rows) {
  clock = new Date(at);
  const res = await alice('POST', '/api/contacts/', { first_name, last_name, email, phone: `+1${phone++}`, birthday });
  if (res.statusCode !== 201) throw new Error(`create ${email}: ${res.statusCode} ${res.body}`);
  created.push(res.json());
}
// updated_at: some contacts written later, two of them at one instant.
for (const [index, at] of [
  [0, '2025-03-01T00:00:00.000Z'],
  [5, '2025-02-01T00:00:00.000Z'],
  [9, '2025-02-01T00:00:00.000Z'],
  [13, '2025-01-20T00:00:00.000Z'],
] as const) {
  clock = new Date(at);
  created[index] = (await alice('PATCH', `/api/contacts/${created[index]!.id}`, { additional_data: { touched: at } })).json();
}
// Bob's contact must never appear in alice's lists.
await bob('POST', '/api/contacts/', {
  first_name: 'a',
  last_name: 'Same',
  email: 'bob-own@example.com',
  phone: '+14155550999',
  birthday: '1990-05-17',
});

const utf8 = (value: string) => Buffer.from(value, 'utf8');

/** The rule of one key, ascending: text by lower(value) then value, both as UTF-8 bytes; the rest by value. */
function compareBy(field: Field, a: Contact, b: Contact): number {
  if (field === 'id') return a.id - b.id;
  if (TEXT.includes(field)) {
    return Buffer.compare(utf8(a[field].toLowerCase()), utf8(b[field].toLowerCase())) || Buffer.compare(utf8(a[field]), utf8(b[field]));
  }
  // Dates (YYYY-MM-DD) and timestamps (ISO, UTC, ms) compare in time order as strings.
  return a[field] < b[field] ? -1 : a[field] > b[field] ? 1 : 0;
}

/** The contract's order for `sort`: each key in its direction, then id ascending. */
function expectedOrder(contacts: Contact[], sort: string): number[] {
  const keys = sort.split(',').map((key) => ({ field: key.replace(/^-/, '') as Field, sign: key.startsWith('-') ? -1 : 1 }));
  return [...contacts]
    .sort((a, b) => {
      for (const { field, sign } of keys) {
        const c = compareBy(field, a, b);
        if (c !== 0) return sign * c;
      }
      return a.id - b.id;
    })
    .map((c) => c.id);
}

async function sortedIds(sort: string, extra = ''): Promise<number[]> {
  const res = await alice('GET', `/api/contacts/?limit=1000&sort=${encodeURIComponent(sort)}${extra}`);
  if (res.statusCode !== 200) throw new Error(`${sort}: ${res.statusCode} ${res.body}`);
  return res.json().map((c: Contact) => c.id);
}

/** Contact numbers (1-based, in creation order) to ids. */
const ids = (...numbers: number[]) => numbers.map((n) => created[n - 1]!.id);

t.test('text keys: lower(value), then the value, byte-wise; - reverses the whole key; ties by id ascending', async (t) => {
  // By lower(): 'a' three times (values 'A' < 'a', so 4 first, then 3 and 10 by id), 'a b' (space, 0x20) before
  // 'ab', then b/B and z/Z (upper case first), then the non-ASCII ones by their bytes: ä (C3 A4) < é/É (C3 A9;
  // then É C3 89 < é C3 A9) < ω (CF 89, from Ω) < 𝒜 (F0 9D).
  const ascending = ids(4, 3, 10, 13, 12, 2, 1, 8, 7, 9, 6, 5, 11, 14);
  t.strictSame(await sortedIds('first_name'), ascending, 'first_name');
  t.strictSame(
    await sortedIds('-first_name'),
    ids(14, 11, 5, 6, 9, 7, 8, 1, 2, 12, 13, 3, 10, 4),
    '-first_name: the whole key reversed (é before É, a before A), ties (3, 10) still by id ascending',
  );
  // last_name: Alpha(11) Alpha(13) alpha(12) | Other(4) Other(5) | Same(1) Same(3) Same(10) same(2) same(14) |
  // Uber(8) uber(7) | Über(6) über(9).
  t.strictSame(await sortedIds('last_name'), ids(11, 13, 12, 4, 5, 1, 3, 10, 2, 14, 8, 7, 6, 9), 'last_name');
  t.strictSame(await sortedIds('-last_name'), ids(9, 6, 7, 8, 2, 14, 1, 3, 10, 4, 5, 12, 11, 13), '-last_name');
  // email: '_x' sorts before letters once lower-cased ('_' 0x5F < 'a' 0x61), where a case-insensitive locale would not.
  const byEmail = await sortedIds('email');
  t.strictSame(byEmail.slice(0, 3), ids(4, 8, 9), 'email: _x, a1, A2 first');
  t.strictSame(byEmail, expectedOrder(created, 'email'), 'email: all');
});

t.test('every key, both directions, matches the rule', async (t) => {
  for (const field of FIELDS) {
    for (const key of [field, `-${field}`]) {
      t.strictSame(await sortedIds(key), expectedOrder(created, key), key);
    }
  }
  t.strictSame(await sortedIds('id'), ids(...rows.map((_, i) => i + 1)), 'id: creation order');
  t.strictSame(await sortedIds('-id'), ids(...rows.map((_, i) => rows.length - i)), '-id');
  const defaultOrder = (await alice('GET', '/api/contacts/?limit=1000')).json().map((c: Contact) => c.id);
  t.strictSame(defaultOrder, ids(...rows.map((_, i) => i + 1)), 'no sort: id');
  // Ties of a date key fall to id ascending under either direction.
  t.strictSame((await sortedIds('birthday')).slice(0, 2), ids(11, 12), 'birthday: 1960-07-07 twice, by id');
  t.strictSame((await sortedIds('-birthday')).slice(0, 2), ids(4, 8), '-birthday: 2001-12-31 twice, still by id ascending');
  t.strictSame((await sortedIds('-updated_at')).slice(0, 3), ids(1, 6, 10), '-updated_at: the latest write, then two at one instant by id');
});

t.test('up to three keys combine, each in its own direction', async (t) => {
  const combined = [
    'last_name,first_name',
    '-birthday,last_name',
    'last_name,-created_at,first_name',
    'email,-id',
    '-first_name,-last_name,-email',
    'birthday,-updated_at,id',
  ];
  for (const sort of combined) t.strictSame(await sortedIds(sort), expectedOrder(created, sort), sort);
  // The first key orders 'Alpha' before 'alpha' on its own; only equal values fall to first_name.
  t.strictSame(await sortedIds('last_name,first_name'), ids(13, 11, 12, 4, 5, 3, 10, 1, 2, 14, 8, 7, 6, 9), 'last_name,first_name by hand');

  // Every ordered pair of keys, and triples from a seeded shuffle, in random directions.
  const random = seededRandom(20261122);
  const direction = () => (random() < 0.5 ? '-' : '');
  for (const a of FIELDS) {
    for (const b of FIELDS) {
      if (a === b) continue;
      const sort = `${direction()}${a},${direction()}${b}`;
      t.strictSame(await sortedIds(sort), expectedOrder(created, sort), sort);
    }
  }
  for (let i = 0; i < 40; i++) {
    const fields = [...FIELDS].sort(() => random() - 0.5).slice(0, 3);
    const sort = fields.map((field) => `${direction()}${field}`).join(',');
    t.strictSame(await sortedIds(sort), expectedOrder(created, sort), sort);
  }
});

t.test('with query, skip and limit: the headers count the filtered set and Link keeps sort', async (t) => {
  const query = 'birthday:gt:1980-01-01';
  const sort = '-last_name,first_name';
  const matching = created.filter((c) => c.birthday > '1980-01-01');
  const expected = expectedOrder(matching, sort);
  t.equal(expected.length, 11);

  const seen: number[] = [];
  let url: string | undefined = `/api/contacts/?query=${encodeURIComponent(query)}&sort=${encodeURIComponent(sort)}&limit=3`;
  for (let page = 1; url; page++) {
    const res = await alice('GET', url);
    t.equal(res.statusCode, 200, `page ${page}`);
    t.equal(res.headers['x-total-count'], '11', `page ${page}: the filtered count`);
    t.equal(res.headers['x-page-count'], '4');
    t.equal(res.headers['x-per-page'], '3');
    t.equal(res.headers['x-current-page'], String(page));
    const links = String(res.headers.link).split(', ');
    for (const link of links) {
      const target = new URL(/^<([^>]+)>/.exec(link)![1]!, 'http://x');
      t.equal(target.pathname, '/api/contacts/');
      t.equal(target.searchParams.get('sort'), sort, `page ${page}: ${link} keeps sort`);
      t.equal(target.searchParams.get('query'), query, `page ${page}: ${link} keeps query`);
    }
    seen.push(...res.json().map((c: Contact) => c.id));
    const next = links.find((link) => link.endsWith('rel="next"'));
    url = next ? /^<([^>]+)>/.exec(next)![1] : undefined;
  }
  t.strictSame(seen, expected, 'following next through every page gives the whole filtered set in order');

  const skipped = await alice('GET', `/api/contacts/?sort=${encodeURIComponent(sort)}&query=${encodeURIComponent(query)}&skip=4&limit=5`);
  t.strictSame(
    skipped.json().map((c: Contact) => c.id),
    expected.slice(4, 9),
    'skip 4, limit 5',
  );
  t.equal(skipped.headers['x-current-page'], '1');
  t.equal(
    skipped.headers.link,
    [
      `</api/contacts/?sort=-last_name%2Cfirst_name&query=birthday%3Agt%3A1980-01-01&skip=0&limit=5>; rel="first"`,
      `</api/contacts/?sort=-last_name%2Cfirst_name&query=birthday%3Agt%3A1980-01-01&skip=0&limit=5>; rel="prev"`,
      `</api/contacts/?sort=-last_name%2Cfirst_name&query=birthday%3Agt%3A1980-01-01&skip=9&limit=5>; rel="next"`,
      `</api/contacts/?sort=-last_name%2Cfirst_name&query=birthday%3Agt%3A1980-01-01&skip=10&limit=5>; rel="last"`,
    ].join(', '),
  );

  const bare = await alice('GET', `/api/contacts/?query=same&sort=-first_name&limit=2`);
  t.equal(bare.headers['x-total-count'], '5', 'a bare term with sort');
  t.strictSame(
    bare.json().map((c: Contact) => c.id),
    expectedOrder(
      created.filter((c) => c.last_name.toLowerCase() === 'same'),
      '-first_name',
    ).slice(0, 2),
  );

  const none = await alice('GET', `/api/contacts/?query=last_name:eq:Nobody&sort=-email`);
  t.equal(none.statusCode, 200);
  t.strictSame(none.json(), []);
  t.equal(none.headers['x-total-count'], '0');
  t.notOk('link' in none.headers, 'no Link when nothing matches');
});

t.test('sort errors: 400 with the exact detail, keys checked left to right, the key count last', async (t) => {
  const cases: [string, string][] = [
    ['nickname', "Invalid sort field 'nickname'"],
    ['-nickname', "Invalid sort field 'nickname'"],
    ['ID', "Invalid sort field 'ID'"],
    ['first_name,phone', "Invalid sort field 'phone'"],
    [' id', "Invalid sort field ' id'"],
    ['+id', "Invalid sort field '+id'"],
    ['--id', "Invalid sort field '-id'"],
    ['', 'Invalid sort expression'],
    ['-', 'Invalid sort expression'],
    ['id,', 'Invalid sort expression'],
    [',id', 'Invalid sort expression'],
    ['id,,email', 'Invalid sort expression'],
    ['email,email', 'Invalid sort expression'],
    ['email,-email', 'Invalid sort expression'],
    ['-id,id', 'Invalid sort expression'],
    ['id,first_name,last_name,email', 'Invalid sort expression'],
    // Left to right: the first bad key decides, whatever follows.
    ['nickname,', "Invalid sort field 'nickname'"],
    [',nickname', 'Invalid sort expression'],
    ['email,email,nickname', 'Invalid sort expression'],
    ['nickname,email,email', "Invalid sort field 'nickname'"],
    // The count last: four keys with an unknown or repeated one report that one.
    ['id,first_name,last_name,nickname', "Invalid sort field 'nickname'"],
    ['id,first_name,last_name,email,nickname', "Invalid sort field 'nickname'"],
    ['id,first_name,last_name,id', 'Invalid sort expression'],
  ];
  for (const [sort, detail] of cases) {
    const res = await alice('GET', `/api/contacts/?sort=${encodeURIComponent(sort)}`);
    t.equal(res.statusCode, 400, `sort=${sort}`);
    t.strictSame(res.json(), { detail }, `sort=${sort}: ${detail}`);
  }
  const long = await alice('GET', `/api/contacts/?sort=${'id,'.repeat(67)}id`);
  t.equal(long.statusCode, 422, 'over 200 characters: schema validation');
  t.strictSame(long.json(), { detail: 'querystring/sort must NOT have more than 200 characters' });
  const anonymous = await app.inject({ method: 'GET', url: '/api/contacts/?sort=nickname' });
  t.equal(anonymous.statusCode, 401, 'authentication first');
  t.strictSame(anonymous.json(), { detail: 'Not authenticated' });
});
