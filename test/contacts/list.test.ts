/** The list: every operator of the per-field table on known data, pagination headers, filter errors, injection. */
import t from 'tap';
import { as, buildContactsApp, contactBody, createContacts, createUser } from './fixtures.js';

let clock = new Date('2025-01-01T10:00:00.000Z');
const app = await buildContactsApp(t, { now: () => clock });
const aliceUser = await createUser(app);
const alice = as(app, aliceUser);
const bob = as(app, await createUser(app));

// Contacts 1..7 of alice, created at known instants.
const rows: [string, Record<string, unknown>][] = [
  [
    '2025-01-01T10:00:00.000Z',
    { first_name: 'Jane', last_name: 'Doe', email: 'jane.doe@example.com', phone: '+1 (415) 555-0123', birthday: '1990-05-17' },
  ],
  [
    '2025-01-01T23:59:59.999Z',
    { first_name: 'John', last_name: 'Smith', email: 'john.smith@Example.org', phone: '(+44) 20 7946 0958', birthday: '1985-12-31' },
  ],
  [
    '2025-01-02T00:00:00.000Z',
    { first_name: 'Janet', last_name: 'Smithers', email: 'janet_s@test.io', phone: '+14155559999', birthday: '2000-02-29' },
  ],
  [
    '2025-01-02T12:30:00.500Z',
    { first_name: 'Zoë', last_name: 'Ünal', email: 'zoe%unal@example.com', phone: '+49 30 123456', birthday: '1970-01-01' },
  ],
  [
    '2025-01-03T08:00:00.000Z',
    { first_name: 'jane', last_name: "O'Brien", email: 'JANE.OB@EXAMPLE.COM', phone: '+33 1 23 45 67 89', birthday: '1990-05-18' },
  ],
  [
    '2025-01-05T00:00:00.000Z',
    { first_name: 'Ann_e', last_name: '100% Real', email: 'ann@example.com', phone: '+1 202 555 0100', birthday: '1999-09-09' },
  ],
  [
    '2025-01-06T00:00:00.000Z',
    { first_name: 'Annie', last_name: 'Hall', email: 'annie@hall.net', phone: '+1 202 555 0111', birthday: '1980-03-01' },
  ],
];
const ids: number[] = [];
for (const [at, body] of rows) {
  clock = new Date(at);
  ids.push((await createContacts(alice, [body]))[0]!.id);
}
clock = new Date('2025-02-01T00:00:00.000Z');
await alice('PATCH', `/api/contacts/${ids[5]}`, { additional_data: { note: 'touched' } });
clock = new Date('2025-03-01T00:00:00.000Z');
await bob('POST', '/api/contacts/', contactBody({ first_name: 'Jane', last_name: 'Doe', email: 'jane.doe@example.com' }));

/** Alice's contacts numbered 1..7 as above. */
const id = (...numbers: number[]) => numbers.map((n) => ids[n - 1]);

async function listIds(query: string, caller = alice): Promise<number[]> {
  const res = await caller('GET', `/api/contacts/?query=${encodeURIComponent(query)}`);
  if (res.statusCode !== 200) throw new Error(`${query}: ${res.statusCode} ${res.body}`);
  return res.json().map((c: { id: number }) => c.id);
}

t.test('each operator of the per-field table, on known data', async (t) => {
  const cases: [string, number[]][] = [
    // first_name
    ['first_name:eq:Jane', [1]],
    ['first_name:eq:jane', [5]],
    ['first_name:eq:Zoë', [4]],
    ['first_name:in_:["Jane","John","Nobody"]', [1, 2]],
    ['first_name:like:J_n%', [1, 3]],
    ['first_name:like:Ann_e', [6, 7]],
    ['first_name:like:Ann\\_e', [6]],
    ['first_name:ilike:jane', [1, 5]],
    ['first_name:ilike:JAN%', [1, 3, 5]],
    ['first_name:startswith:Jan', [1, 3]],
    ['first_name:startswith:Ann_', [6]],
    ['first_name:endswith:et', [3]],
    ['first_name:endswith:_e', [6]],
    ['first_name:contains:an', [1, 3, 5]],
    ['first_name:contains:n_', [6]],
    ['first_name:contains:ë', [4]],
    // last_name
    ['last_name:eq:Doe', [1]],
    ['last_name:in_:["Smith","Hall"]', [2, 7]],
    ['last_name:like:Smith%', [2, 3]],
    ['last_name:ilike:smith', [2]],
    ['last_name:ilike:smith%', [2, 3]],
    ['last_name:startswith:Smith', [2, 3]],
    ['last_name:endswith:ers', [3]],
    ['last_name:contains:%', [6]],
    ['last_name:contains:100% R', [6]],
    ['last_name:contains:Ü', [4]],
    ["last_name:contains:'", [5]],
    // email
    ['email:eq:john.smith@Example.org', [2]],
    ['email:eq:john.smith@example.org', []],
    ['email:in_:["ann@example.com","annie@hall.net"]', [6, 7]],
    ['email:like:%@example.com', [1, 4, 6]],
    ['email:ilike:%@example.com', [1, 4, 5, 6]],
    ['email:ilike:%@example.%', [1, 2, 4, 5, 6]],
    ['email:like:%\\_%', [3]],
    ['email:like:zoe\\%%', [4]],
    ['email:startswith:jane', [1, 3]],
    ['email:endswith:.io', [3]],
    ['email:contains:_s@', [3]],
    ['email:contains:%u', [4]],
    // phone (separators dropped from values too)
    ['phone:eq:+1 (415) 555-0123', [1]],
    ['phone:eq:+14155550123', [1]],
    ['phone:in_:["+44 20 7946 0958","+4930123456"]', [2, 4]],
    ['phone:eq:(+44) 20 7946 0958', [2]],
    ['phone:eq: +44 20 7946 0958', [2]],
    ['phone:in_:["(+44) 20 7946 0958"," +49 30 123456"]', [2, 4]],
    ['phone:startswith:(+44)', [2]],
    ['phone:like:(+44)%', [2]],
    ['(+44) 20', [2]],
    ['phone:like:+1415%', [1, 3]],
    ['phone:like:%99', [3]],
    ['phone:startswith:+1', [1, 3, 6, 7]],
    ['phone:startswith:+1 (202)', [6, 7]],
    // birthday
    ['birthday:eq:1990-05-17', [1]],
    ['birthday:gt:1990-05-17', [3, 5, 6]],
    ['birthday:lt:1980-03-01', [4]],
    ['birthday:between:1985-12-31,1990-05-17', [1, 2]],
    ['birthday:eq:2000-02-29', [3]],
    // created_at: a date is a whole UTC day; a datetime compares at millisecond precision
    ['created_at:eq:2025-01-01', [1, 2]],
    ['created_at:eq:2025-01-02T12:30:00.500Z', [4]],
    ['created_at:eq:2025-01-02T12:30:00.5Z', [4]],
    ['created_at:eq:2025-01-02T14:30:00.500+02:00', [4]],
    ['created_at:eq:2025-01-02T12:30:00Z', []],
    ['created_at:gt:2025-01-01', [3, 4, 5, 6, 7]],
    ['created_at:gt:2025-01-01T23:59:59.998Z', [2, 3, 4, 5, 6, 7]],
    ['created_at:lt:2025-01-02', [1, 2]],
    ['created_at:lt:2025-01-02T00:00:00.001Z', [1, 2, 3]],
    ['created_at:between:2025-01-02,2025-01-03', [3, 4, 5]],
    ['created_at:between:2025-01-01T12:00:00+02:00,2025-01-02T00:00:00Z', [1, 2, 3]],
    // updated_at: contact 6 was patched on 2025-02-01
    ['updated_at:gt:2025-01-31', [6]],
    ['updated_at:eq:2025-02-01', [6]],
    ['updated_at:eq:2025-02-01T00:00:00.000Z', [6]],
    ['updated_at:lt:2025-01-02', [1, 2]],
    ['updated_at:between:2025-01-05,2025-01-31', [7]],
    // bare terms: case-insensitive substring of names, e-mail or phone (phone without separators)
    ['smith', [2, 3]],
    ['EXAMPLE.com', [1, 4, 5, 6]],
    ['555-9999', [3]],
    ['0958', [2]],
    ['ë', [4]],
    ['100%', [6]],
    ['jan,doe', [1]],
    ['smith,first_name:eq:Janet', [3]],
    // conditions combine with AND
    ['first_name:startswith:J,birthday:lt:1990-01-01', [2]],
    ['email:ilike:%example%,phone:startswith:+1,created_at:lt:2025-01-05', [1]],
  ];
  for (const [query, expected] of cases) {
    t.same(await listIds(query), id(...expected), query);
  }
});

t.test("filters only ever see the caller's contacts", async (t) => {
  t.same(await listIds('first_name:eq:Jane', bob), [ids[6]! + 1]);
  t.same(await listIds('first_name:eq:Janet', bob), []);
  t.same(await listIds('smith', bob), []);
  const all = await bob('GET', '/api/contacts/');
  t.equal(all.headers['x-total-count'], '1');
  t.equal(all.json().length, 1);
});

t.test('list: id order, default page, pagination headers and RFC 8288 links', async (t) => {
  const res = await alice('GET', '/api/contacts/');
  t.equal(res.statusCode, 200);
  t.same(
    res.json().map((c: { id: number }) => c.id),
    ids,
  );
  t.match(res.headers, { 'x-total-count': '7', 'x-per-page': '100', 'x-current-page': '1', 'x-page-count': '1' });
  t.equal(res.headers.link, '</api/contacts/?skip=0&limit=100>; rel="first", </api/contacts/?skip=0&limit=100>; rel="last"');
  t.ok(['HIT', 'MISS'].includes(res.headers['x-cache'] as string));

  const pages: [string, number[], Record<string, string>, string][] = [
    [
      'skip=0&limit=3',
      [1, 2, 3],
      { 'x-current-page': '1', 'x-page-count': '3' },
      '</api/contacts/?skip=0&limit=3>; rel="first", </api/contacts/?skip=3&limit=3>; rel="next", </api/contacts/?skip=6&limit=3>; rel="last"',
    ],
    [
      'skip=3&limit=3',
      [4, 5, 6],
      { 'x-current-page': '2', 'x-page-count': '3' },
      '</api/contacts/?skip=0&limit=3>; rel="first", </api/contacts/?skip=0&limit=3>; rel="prev", </api/contacts/?skip=6&limit=3>; rel="next", </api/contacts/?skip=6&limit=3>; rel="last"',
    ],
    [
      'limit=3&skip=6',
      [7],
      { 'x-current-page': '3', 'x-page-count': '3' },
      '</api/contacts/?skip=0&limit=3>; rel="first", </api/contacts/?skip=3&limit=3>; rel="prev", </api/contacts/?skip=6&limit=3>; rel="last"',
    ],
    [
      'skip=2&limit=3',
      [3, 4, 5],
      { 'x-current-page': '1', 'x-page-count': '3' },
      '</api/contacts/?skip=0&limit=3>; rel="first", </api/contacts/?skip=0&limit=3>; rel="prev", </api/contacts/?skip=5&limit=3>; rel="next", </api/contacts/?skip=6&limit=3>; rel="last"',
    ],
    [
      'skip=100&limit=3',
      [],
      { 'x-current-page': '34', 'x-page-count': '3' },
      '</api/contacts/?skip=0&limit=3>; rel="first", </api/contacts/?skip=6&limit=3>; rel="prev", </api/contacts/?skip=6&limit=3>; rel="last"',
    ],
    [
      'skip=0&limit=1000',
      [1, 2, 3, 4, 5, 6, 7],
      { 'x-current-page': '1', 'x-page-count': '1' },
      '</api/contacts/?skip=0&limit=1000>; rel="first", </api/contacts/?skip=0&limit=1000>; rel="last"',
    ],
  ];
  for (const [qs, expected, headers, link] of pages) {
    const page = await alice('GET', `/api/contacts/?${qs}`);
    t.equal(page.statusCode, 200, qs);
    t.same(
      page.json().map((c: { id: number }) => c.id),
      id(...expected),
      qs,
    );
    t.match(page.headers, { 'x-total-count': '7', 'x-per-page': qs.includes('1000') ? '1000' : '3', ...headers }, qs);
    t.equal(page.headers.link, link, qs);
  }
});

t.test('filters and pagination combine; links carry the other query parameters', async (t) => {
  const res = await alice('GET', '/api/contacts/?query=first_name%3Astartswith%3AJ&limit=1&skip=1');
  t.equal(res.statusCode, 200);
  t.same(
    res.json().map((c: { id: number }) => c.id),
    id(2),
  );
  t.match(res.headers, { 'x-total-count': '3', 'x-per-page': '1', 'x-current-page': '2', 'x-page-count': '3' });
  const q = 'query=first_name%3Astartswith%3AJ';
  t.equal(
    res.headers.link,
    `</api/contacts/?${q}&skip=0&limit=1>; rel="first", </api/contacts/?${q}&skip=0&limit=1>; rel="prev", ` +
      `</api/contacts/?${q}&skip=2&limit=1>; rel="next", </api/contacts/?${q}&skip=2&limit=1>; rel="last"`,
  );
  // A term of 1 to 3 characters is counted by its grams (migration 009); of its 5 matches among 7
  // contacts, two from the third are walked, and all of them fetched (3 · 5² <= 1000 · 7).
  for (const [qs, expected, page] of [
    ['limit=2&skip=2', [5, 6], '2'],
    ['limit=1000', [1, 3, 5, 6, 7], '1'],
  ] as const) {
    const short = await alice('GET', `/api/contacts/?query=an&${qs}`);
    t.same(
      short.json().map((c: { id: number }) => c.id),
      id(...expected),
      qs,
    );
    t.match(short.headers, { 'x-total-count': '5', 'x-current-page': page }, qs);
  }
  const none = await alice('GET', '/api/contacts/?query=nobody-at-all&limit=5');
  t.equal(none.statusCode, 200);
  t.same(none.json(), []);
  t.match(none.headers, { 'x-total-count': '0', 'x-per-page': '5', 'x-current-page': '1', 'x-page-count': '0' });
  t.notOk('link' in none.headers, 'no Link when nothing matches');
  const emptyQuery = await alice('GET', '/api/contacts/?query=');
  t.equal(emptyQuery.headers['x-total-count'], '7', 'an empty expression filters nothing');
});

t.test('page bounds are 422, never clamped', async (t) => {
  const cases: [string, string][] = [
    ['limit=0', 'querystring/limit must be >= 1'],
    ['limit=1001', 'querystring/limit must be <= 1000'],
    ['skip=-1', 'querystring/skip must be >= 0'],
    ['limit=abc', 'querystring/limit must be integer'],
    [`query=${'a'.repeat(2001)}`, 'querystring/query must NOT have more than 2000 characters'],
  ];
  for (const [qs, detail] of cases) {
    const res = await alice('GET', `/api/contacts/?${qs}`);
    t.equal(res.statusCode, 422, qs);
    t.same(res.json(), { detail }, qs);
  }
});

t.test('filter errors are 400 with the exact detail', async (t) => {
  const cases: [string, string][] = [
    ['nickname:eq:x', "Invalid filter field 'nickname'"],
    ['First_Name:eq:x', "Invalid filter field 'First_Name'"],
    ['first_name:gte:x', "Invalid filter operator 'gte' for field 'first_name'"],
    ['phone:contains:555', "Invalid filter operator 'contains' for field 'phone'"],
    ['phone:endswith:555', "Invalid filter operator 'endswith' for field 'phone'"],
    ['phone:ilike:555', "Invalid filter operator 'ilike' for field 'phone'"],
    ['birthday:contains:1990', "Invalid filter operator 'contains' for field 'birthday'"],
    ['created_at:in_:["2025-01-01"]', "Invalid filter operator 'in_' for field 'created_at'"],
    ['birthday:eq:1990-13-01', "Invalid filter value '1990-13-01' for field 'birthday'"],
    ['created_at:gt:2025-01-01T10:00:00', "Invalid filter value '2025-01-01T10:00:00' for field 'created_at'"],
    ['first_name:in_:John', "Invalid filter value 'John' for field 'first_name'"],
    ['constructor:eq:x', "Invalid filter field 'constructor'"],
    ['__proto__:eq:x', "Invalid filter field '__proto__'"],
    ['toString:eq:x', "Invalid filter field 'toString'"],
    ['hasOwnProperty:eq:x', "Invalid filter field 'hasOwnProperty'"],
    ['first_name:constructor:x', "Invalid filter operator 'constructor' for field 'first_name'"],
    ['first_name:__proto__:x', "Invalid filter operator '__proto__' for field 'first_name'"],
    // An escaped NUL inside an in_ list (the query itself holds none) is a value PostgreSQL text cannot hold.
    ['first_name:in_:["a\\u0000"]', `Invalid filter value '["a\\u0000"]' for field 'first_name'`],
    ['phone:in_:["+44\\u0000"]', `Invalid filter value '["+44\\u0000"]' for field 'phone'`],
    ['first_name:in_:["John","Jane"', 'Malformed filter expression: unterminated list in condition 1'],
    ['smith,,jones', 'Malformed filter expression: empty condition 2'],
    ['first_name:eq:x,nickname:gte:y', "Invalid filter field 'nickname'"],
    ['nickname:gte:y,first_name:gte:x', "Invalid filter field 'nickname'"],
    [Array.from({ length: 21 }, (_, i) => `first_name:eq:${i}`).join(','), 'Malformed filter expression: more than 20 conditions'],
  ];
  for (const [query, detail] of cases) {
    const res = await alice('GET', `/api/contacts/?query=${encodeURIComponent(query)}`);
    t.equal(res.statusCode, 400, query);
    t.same(res.json(), { detail }, query);
  }
});

t.test('SQL-injection strings in every operator give 200 or 400, never 500, and lose nothing', async (t) => {
  const payloads = [
    "'; DROP TABLE contacts; --",
    '" OR 1=1 --',
    "%' OR '1'='1",
    "x') OR ('1'='1",
    '\\',
    '$1',
    "1990-01-01'; DELETE FROM contacts; --",
    '["a\'); DELETE FROM contacts; --"]',
    "2025-01-01,2025-01-02') OR true --",
  ];
  const table: Record<string, string[]> = {
    first_name: ['eq', 'in_', 'like', 'ilike', 'startswith', 'endswith', 'contains'],
    last_name: ['eq', 'in_', 'like', 'ilike', 'startswith', 'endswith', 'contains'],
    email: ['eq', 'in_', 'like', 'ilike', 'startswith', 'endswith', 'contains'],
    phone: ['eq', 'in_', 'like', 'startswith'],
    birthday: ['eq', 'gt', 'lt', 'between'],
    created_at: ['eq', 'gt', 'lt', 'between'],
    updated_at: ['eq', 'gt', 'lt', 'between'],
  };
  const statuses = new Set<number>();
  for (const [field, operators] of Object.entries(table)) {
    for (const operator of operators) {
      for (const payload of payloads) {
        const query = `${field}:${operator}:${payload}`;
        const res = await alice('GET', `/api/contacts/?query=${encodeURIComponent(query)}`);
        statuses.add(res.statusCode);
        if (res.statusCode !== 200 && res.statusCode !== 400) t.fail(`${query}: ${res.statusCode} ${res.body}`);
        if (res.statusCode === 200) {
          const found: number[] = res.json().map((c: { id: number }) => c.id);
          if (!found.every((n) => ids.includes(n))) t.fail(`${query} returned a contact that is not alice's`);
        }
      }
    }
  }
  for (const payload of payloads) {
    const res = await alice('GET', `/api/contacts/?query=${encodeURIComponent(payload)}`);
    t.ok([200, 400].includes(res.statusCode), `bare ${payload}`);
  }
  t.same([...statuses].sort(), [200, 400]);
  const counts = await app.db
    .selectFrom('contacts')
    .select(['owner_id', (eb) => eb.fn.countAll<number>().as('n')])
    .groupBy('owner_id')
    .orderBy('owner_id')
    .execute();
  t.same(
    counts.map((c) => c.n),
    [7, 1],
    'no data lost',
  );
  t.equal((await alice('GET', '/api/contacts/')).json().length, 7);
});

t.test("a bare term never matches across two fields, even one holding the search key's separator (U+001F)", async (t) => {
  const carol = as(app, await createUser(app));
  const [plain, joined] = await createContacts(carol, [
    contactBody({ first_name: 'Ann', last_name: 'Lee' }),
    contactBody({ first_name: 'Ann\u001fLee', last_name: 'Other' }),
  ]);
  t.same(await listIds('ann\u001flee', carol), [joined!.id], 'the term with U+001F is in one field only');
  t.same(await listIds('ann\u001f', carol), [joined!.id]);
  t.same(await listIds('annlee', carol), []);
  t.same(await listIds('lee', carol), [plain!.id, joined!.id]);
});
