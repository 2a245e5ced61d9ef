/** Export and import through the API (openapi.yaml, `GET /api/contacts/export` and `POST /api/contacts/import`): status, body and headers exactly. */
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { sql } from 'kysely';
import t, { type Test } from 'tap';
import { backend } from '../helper.js';
import { as, buildContactsApp, type Caller, contactBody, createContacts, createUser } from './fixtures.js';

const T0 = '2025-06-15T12:00:00.123Z';
const T1 = '2025-06-16T08:30:00.000Z';
const crlf = (...lines: string[]) => lines.map((line) => `${line}\r\n`).join('');

async function setup(t: Test) {
  let clock = new Date(T0);
  const app = await buildContactsApp(t, { now: () => clock });
  const alice = await createUser(app);
  const bob = await createUser(app);
  return { app, alice: as(app, alice), bob: as(app, bob), setClock: (iso: string) => (clock = new Date(iso)) };
}

/** POSTs `body` as an import of `type`. */
function importing(call: Caller, type: string, body: string | Buffer) {
  return call('POST', '/api/contacts/import', body, { 'content-type': type });
}

/** Every contact of the caller, in id order, without the fields an import sets anew. */
async function stored(call: Caller) {
  const res = await call('GET', '/api/contacts/?limit=1000');
  return res.json<Record<string, unknown>[]>().map(({ id: _id, created_at: _c, updated_at: _u, ...fields }) => fields);
}

const janeRow = { first_name: 'Jane', last_name: 'Doe', email: 'jane@example.com', phone: '+14155550123', birthday: '1990-05-17' };
const oddRow = {
  first_name: 'Zoë, "Zed"',
  last_name: "O'Neil;\nJr",
  email: 'zoe@example.com',
  phone: '+442071838750',
  birthday: '1984-02-29',
  // In the order jsonb keeps keys (shorter first), so the files show them as written here.
  additional_data: { note: 'line one\nline two', tags: ['a;b', 'c\\d'], company: 'Acme, Inc.' },
};

t.test('export vCard: every contact as a 4.0 card, escaped and folded, as an attachment', async (t) => {
  const { alice } = await setup(t);
  await createContacts(alice, [janeRow, oddRow]);
  const res = await alice('GET', '/api/contacts/export');
  t.equal(res.statusCode, 200);
  t.equal(res.headers['content-type'], 'text/vcard; charset=utf-8');
  t.equal(res.headers['content-disposition'], 'attachment; filename="contacts.vcf"');
  t.equal(res.headers['content-length'], String(res.rawPayload.length));
  t.equal(res.headers['x-cache'], undefined, 'not cached');
  t.equal(
    res.body,
    crlf(
      'BEGIN:VCARD',
      'VERSION:4.0',
      'FN:Jane Doe',
      'N:Doe;Jane;;;',
      'EMAIL:jane@example.com',
      'TEL;VALUE=uri:tel:+14155550123',
      'BDAY:19900517',
      'REV:20250615T120000Z',
      'END:VCARD',
      'BEGIN:VCARD',
      'VERSION:4.0',
      'FN:Zoë\\, "Zed" O\'Neil\\;\\nJr',
      'N:O\'Neil\\;\\nJr;Zoë\\, "Zed";;;',
      'EMAIL:zoe@example.com',
      'TEL;VALUE=uri:tel:+442071838750',
      'BDAY:19840229',
      'REV:20250615T120000Z',
      // 75 octets, then a continuation line that starts with a space (here inside the escape `\\,`).
      'X-ADDITIONAL-DATA:{"note":"line one\\\\nline two"\\,"tags":["a\\;b"\\,"c\\\\\\\\d"]\\',
      ' ,"company":"Acme\\, Inc."}',
      'END:VCARD',
    ),
  );
});

t.test('export CSV: the header row, then RFC 4180 rows with quoting where needed', async (t) => {
  const { alice } = await setup(t);
  await createContacts(alice, [janeRow, oddRow]);
  const res = await alice('GET', '/api/contacts/export?format=csv');
  t.equal(res.statusCode, 200);
  t.equal(res.headers['content-type'], 'text/csv; charset=utf-8');
  t.equal(res.headers['content-disposition'], 'attachment; filename="contacts.csv"');
  t.equal(res.headers['content-length'], String(res.rawPayload.length));
  t.equal(
    res.body,
    crlf('first_name,last_name,email,phone,birthday,additional_data', 'Jane,Doe,jane@example.com,+14155550123,1990-05-17,') +
      '"Zoë, ""Zed""","O\'Neil;\nJr",zoe@example.com,+442071838750,1984-02-29,' +
      '"{""note"":""line one\\nline two"",""tags"":[""a;b"",""c\\\\d""],""company"":""Acme, Inc.""}"\r\n',
  );
});

t.test("export: query and sort apply; nothing matching is an empty file; only the caller's contacts", async (t) => {
  const { alice, bob } = await setup(t);
  await createContacts(alice, [
    { ...janeRow, first_name: 'Ann', last_name: 'Smith', email: 'ann@example.com' },
    { ...janeRow, first_name: 'Bea', last_name: 'Adams', email: 'bea@example.com' },
    { ...janeRow, first_name: 'Cid', last_name: 'Smith', email: 'cid@example.com' },
  ]);
  await createContacts(bob, [{ ...janeRow, last_name: 'Smith', email: 'bob.smith@example.com' }]);
  const res = await alice('GET', '/api/contacts/export?format=csv&query=last_name:eq:Smith&sort=-first_name');
  t.equal(res.statusCode, 200);
  t.equal(
    res.body,
    crlf(
      'first_name,last_name,email,phone,birthday,additional_data',
      'Cid,Smith,cid@example.com,+14155550123,1990-05-17,',
      'Ann,Smith,ann@example.com,+14155550123,1990-05-17,',
    ),
  );
  const none = await alice('GET', '/api/contacts/export?query=last_name:eq:Nobody');
  t.equal(none.statusCode, 200);
  t.equal(none.headers['content-type'], 'text/vcard; charset=utf-8');
  t.equal(none.body, '');
  const noneCsv = await alice('GET', '/api/contacts/export?format=csv&query=last_name:eq:Nobody');
  t.equal(noneCsv.body, crlf('first_name,last_name,email,phone,birthday,additional_data'));
});

t.test('export: more contacts than one batch, all of them, in order', async (t) => {
  const { app, alice } = await setup(t);
  const owner = (await alice('GET', '/api/users/me')).json().id as number;
  await app.db
    .insertInto('contacts')
    .values(Array.from({ length: 1234 }, (_, i) => ({ owner_id: owner, ...janeRow, email: `c${String(i).padStart(4, '0')}@example.com` })))
    .execute();
  const res = await alice('GET', '/api/contacts/export?format=csv&sort=-email');
  const lines = res.body.split('\r\n');
  t.equal(lines.length, 1 + 1234 + 1, 'header, 1234 rows, and the empty text after the last CRLF');
  t.equal(lines[1], 'Jane,Doe,c1233@example.com,+14155550123,1990-05-17,');
  t.equal(lines[1234], 'Jane,Doe,c0000@example.com,+14155550123,1990-05-17,');
  const cards = await alice('GET', '/api/contacts/export');
  t.equal(cards.body.match(/^BEGIN:VCARD\r$/gm)?.length, 1234);
});

t.test('export: a download that stalls holds no database connection', async (t) => {
  const app = await buildContactsApp(t);
  const user = await createUser(app);
  // Several MiB of vCards: more than the socket buffers take while nobody reads. Each row's trigger
  // advances the owner's address book (migration 033), which on Citus takes longer than the service's
  // statement timeout for 30,000 rows.
  await app.db.transaction().execute(async (trx) => {
    await sql`set local statement_timeout = 0`.execute(trx);
    await sql`insert into contacts (owner_id, first_name, last_name, email, phone, birthday)
              select ${user.id}, 'First' || n, 'Last' || n, 'c' || n || '@example.com', '+14155550123', date '1990-01-01'
              from generate_series(1, 30000) n`.execute(trx);
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = app.server.address() as AddressInfo;
  const request = http.get({ host: '127.0.0.1', port, path: '/api/contacts/export', headers: { authorization: `Bearer ${user.token}` } });
  const [response] = (await once(request, 'response')) as [http.IncomingMessage];
  response.pause();
  t.teardown(() => request.destroy());
  t.equal(response.statusCode, 200);
  t.ok(Number(response.headers['content-length']) > 5 * 1024 * 1024, `a ${response.headers['content-length']}-byte file`);

  // The embedded database has one session: a held export transaction would keep this waiting
  // until tap's timeout fails the file.
  const other = await app.inject({ method: 'GET', url: '/api/contacts/?limit=1', headers: { authorization: `Bearer ${user.token}` } });
  t.equal(other.statusCode, 200, 'another request reaches the database while the download stalls');
  if (backend === 'postgres') {
    const open = await sql<{
      n: number;
    }>`select count(*)::int as n from pg_stat_activity where datname = current_database() and state like 'idle in transaction%'`.execute(
      app.db,
    );
    t.equal(open.rows[0]!.n, 0, 'no transaction stays open');
  }
});

t.test("export: errors are the list's, as {detail}", async (t) => {
  const { app, alice } = await setup(t);
  const cases: [string, number, string][] = [
    ['/api/contacts/export?query=nickname:eq:x', 400, "Invalid filter field 'nickname'"],
    ['/api/contacts/export?sort=nickname', 400, "Invalid sort field 'nickname'"],
    ['/api/contacts/export?sort=id,id', 400, 'Invalid sort expression'],
    ['/api/contacts/export?format=xml', 422, 'querystring/format must be equal to one of the allowed values'],
  ];
  for (const [url, status, detail] of cases) {
    const res = await alice('GET', url);
    t.equal(res.statusCode, status, url);
    t.equal(res.headers['content-type'], 'application/json; charset=utf-8', url);
    t.same(res.json(), { detail }, url);
  }
  const anonymous = await app.inject({ method: 'GET', url: '/api/contacts/export' });
  t.equal(anonymous.statusCode, 401);
  t.same(anonymous.json(), { detail: 'Not authenticated' });
});

t.test('HEAD of the export: the headers, without reading a contact or taking an export slot', async (t) => {
  const statements: string[] = [];
  const app = await buildContactsApp(t, { env: { EXPORT_CONCURRENT_PER_USER: '1' }, onQuery: (text) => statements.push(text) });
  const alice = as(app, await createUser(app));
  await createContacts(alice, [janeRow, oddRow]);
  for (const [format, type, name] of [
    ['vcard', 'text/vcard; charset=utf-8', 'contacts.vcf'],
    ['csv', 'text/csv; charset=utf-8', 'contacts.csv'],
  ] as const) {
    statements.length = 0;
    const res = await alice('HEAD', `/api/contacts/export?format=${format}&query=first_name:eq:Jane`);
    t.equal(res.statusCode, 200, format);
    t.equal(res.headers['content-type'], type, format);
    t.equal(res.headers['content-disposition'], `attachment; filename="${name}"`, format);
    t.equal(res.headers['content-length'], undefined, 'no size: it is known only once the file is written');
    t.equal(res.body, '', format);
    t.same(
      statements.filter((text) => /\bcontacts\b/.test(text)),
      [],
      'no statement reads the contacts',
    );
  }
  // A GET still takes the one slot after any number of HEADs, and its file is whole.
  const file = await alice('GET', '/api/contacts/export?format=csv');
  t.equal(file.statusCode, 200);
  t.equal(file.body.split('\r\n').length, 4, 'header, two rows, end');
  const invalid = await alice('HEAD', '/api/contacts/export?query=nickname:eq:x');
  t.equal(invalid.statusCode, 400, "the GET's checks apply");
  t.equal(invalid.headers['content-type'], 'application/json; charset=utf-8');
  const anonymous = await app.inject({ method: 'HEAD', url: '/api/contacts/export' });
  t.equal(anonymous.statusCode, 401);
});

/** A vCard 3.0 file as another app writes it (RFC 2426): folding, groups, TYPE parameters, several EMAIL and TEL, dashed BDAY. */
const OTHER_APP_VCARD_3 = crlf(
  'BEGIN:VCARD',
  'VERSION:3.0',
  'PRODID:-//Example Corp.//Address Book 9.1//EN',
  'N:Stevenson;John;Philip,Paul;Dr.;Jr.,M.D.,A.C.P.',
  'FN:Dr. John Philip Paul Stevenson Jr. M.D. A.C.P.',
  'ORG:Example Corp.;North American Division',
  'item1.EMAIL;TYPE=INTERNET,PREF:jps@example.com',
  'EMAIL;TYPE=INTERNET,HOME:john@home.example',
  'TEL;TYPE=WORK,VOICE:+1 (415) 555-0100',
  'TEL;TYPE=CELL:+1-415-555-0199',
  'BDAY:1970-04-02',
  'ADR;TYPE=WORK:;;123 Main St;Springfield;IL;62701;USA',
  'NOTE:This note is long enough that the app folded it onto a second line',
  '  at 75 octets\\, as RFC 2426 allows.',
  'UID:urn:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6',
  'REV:1995-10-31T22:27:10Z',
  'END:VCARD',
  'BEGIN:VCARD',
  'VERSION:3.0',
  'FN:Mary Ann',
  'EMAIL;TYPE=internet:mary@example.com',
  'TEL;TYPE=HOME:+44 20 7183 8750',
  'BDAY:19801231',
  'END:VCARD',
);

t.test('import vCard 3.0 from another app: 200, every card created as its create would be', async (t) => {
  const { alice } = await setup(t);
  const res = await importing(alice, 'text/vcard', OTHER_APP_VCARD_3);
  t.equal(res.statusCode, 200);
  t.equal(res.headers['content-type'], 'application/json; charset=utf-8');
  t.same(res.json(), { created: 2, errors: [] });
  t.strictSame(await stored(alice), [
    {
      first_name: 'John',
      last_name: 'Stevenson',
      email: 'jps@example.com',
      phone: '+14155550100',
      birthday: '1970-04-02',
      additional_data: null,
    },
    {
      first_name: 'Mary',
      last_name: 'Ann',
      email: 'mary@example.com',
      phone: '+442071838750',
      birthday: '1980-12-31',
      additional_data: null,
    },
  ]);
});

t.test("import: invalid entries and duplicate e-mails are reported by number in the API's wording; the rest is created", async (t) => {
  const { alice, setClock } = await setup(t);
  await createContacts(alice, [{ ...janeRow, email: 'taken@example.com' }]);
  setClock(T1);
  const csv = crlf(
    'phone,Email,first_name,last_name,birthday,additional_data,nickname',
    '+14155550101,ok1@example.com,Ok,One,1990-01-01,"{""k"":1}",ignored',
    '',
    '+14155550102,not-an-email,Bad,Email,1990-01-01,,',
    '0415 555 0123,ok2@example.com,Bad,Phone,1990-01-01,,',
    '+14155550103,TAKEN@example.com,Dup,Stored,1990-01-01,,',
    '+14155550104,OK1@example.com,Dup,InFile,1990-01-01,,',
    '+14155550105,future@example.com,Born,Tomorrow,2025-06-17,,',
    '+14155550106,list@example.com,Bad,Data,1990-01-01,[1],',
    '+14155550107,blank@example.com,,Blank,1990-01-01,,',
    '+14155550108,ok3@example.com,  Ok  , Three ,1990-01-01,,',
    '+14155550109,short@example.com,Short,Row',
  );
  const res = await importing(alice, 'text/csv; charset=utf-8', csv);
  t.equal(res.statusCode, 200);
  t.same(res.json(), {
    created: 2,
    errors: [
      { entry: 2, detail: 'body/email must match format "email"' },
      { entry: 3, detail: 'body/phone must be an international number in E.164 form, like +14155550123' },
      { entry: 4, detail: 'Contact with this email already exists' },
      { entry: 5, detail: 'Contact with this email already exists' },
      { entry: 6, detail: 'body/birthday must be before today' },
      { entry: 7, detail: 'body/additional_data must be a JSON object' },
      { entry: 8, detail: 'body/first_name must NOT have fewer than 1 characters' },
      { entry: 10, detail: 'CSV row has 4 fields; the header has 7' },
    ],
  });
  const contacts = (await alice('GET', '/api/contacts/?sort=id')).json<Record<string, unknown>[]>();
  t.strictSame(
    contacts.slice(1).map(({ id: _id, ...rest }) => rest),
    [
      {
        first_name: 'Ok',
        last_name: 'One',
        email: 'ok1@example.com',
        phone: '+14155550101',
        birthday: '1990-01-01',
        additional_data: { k: 1 },
        created_at: T1,
        updated_at: T1,
      },
      {
        first_name: 'Ok',
        last_name: 'Three',
        email: 'ok3@example.com',
        phone: '+14155550108',
        birthday: '1990-01-01',
        additional_data: null,
        created_at: T1,
        updated_at: T1,
      },
    ],
  );
});

t.test('import vCard: a card missing a field is reported as the create reports it', async (t) => {
  const { alice } = await setup(t);
  const body = crlf(
    'BEGIN:VCARD',
    'VERSION:4.0',
    'FN:No Mail',
    'TEL:+14155550100',
    'BDAY:19900101',
    'END:VCARD',
    'BEGIN:VCARD',
    'VERSION:4.0',
    'N:Ok;Card;;;',
    'EMAIL:card@example.com',
    'TEL;VALUE=uri:tel:+14155550100',
    'BDAY:19900101',
    'END:VCARD',
  );
  const res = await importing(alice, 'text/vcard', body);
  t.equal(res.statusCode, 200);
  t.same(res.json(), { created: 1, errors: [{ entry: 1, detail: 'body/email is required' }] });
});

t.test('import: a body that is no import is 400, and nothing is created', async (t) => {
  const { alice } = await setup(t);
  const cases: [string, string | Buffer, string][] = [
    ['text/csv', crlf('first_name,last_name,phone,birthday', 'A,B,+14155550100,1990-01-01'), "Missing CSV column 'email'"],
    ['text/csv', crlf('email,birthday'), "Missing CSV column 'first_name'"],
    ['text/csv', '', "Missing CSV column 'first_name'"],
    ['text/vcard', 'first_name,last_name\r\n', 'No vCard in the body: it has no BEGIN:VCARD line'],
    ['text/vcard', Buffer.from([0x42, 0x45, 0x47, 0xff, 0xfe]), 'The body is not valid UTF-8'],
  ];
  for (const [type, body, detail] of cases) {
    const res = await importing(alice, type, body);
    t.equal(res.statusCode, 400, detail);
    t.same(res.json(), { detail }, detail);
  }
  t.same(await stored(alice), []);
});

t.test('import limits: 10,000 entries (413, nothing created), 10 MiB (413), and the two types (415)', async (t) => {
  const { alice } = await setup(t);
  const row = (i: number) => `A,B,a${i}@example.com,+14155550100,1990-01-01\r\n`;
  const header = 'first_name,last_name,email,phone,birthday\r\n';
  const tooMany = header + Array.from({ length: 10_001 }, (_, i) => row(i)).join('');
  const many = await importing(alice, 'text/csv', tooMany);
  t.equal(many.statusCode, 413);
  t.same(many.json(), { detail: 'Too many contacts in one import (max 10000)' });
  t.same(await stored(alice), []);

  const exactly = await importing(alice, 'text/csv', header + Array.from({ length: 10_000 }, (_, i) => row(i)).join(''));
  t.equal(exactly.statusCode, 200);
  t.same(exactly.json(), { created: 10_000, errors: [] });

  const huge = await importing(alice, 'text/vcard', 'X'.repeat(10 * 1024 * 1024 + 1));
  t.equal(huge.statusCode, 413);
  t.same(huge.json(), { detail: 'Request body is too large' });

  for (const type of ['application/json', 'text/plain', 'text/x-vcard']) {
    const res = await importing(alice, type, '{}');
    t.equal(res.statusCode, 415, type);
    t.same(res.json(), { detail: `Unsupported Media Type: ${type}` }, type);
  }
});

t.test("import: the user's cached list is stale at once", async (t) => {
  const { alice } = await setup(t);
  t.same((await alice('GET', '/api/contacts/')).json(), []);
  t.equal((await alice('GET', '/api/contacts/')).headers['x-cache'], 'HIT');
  await importing(alice, 'text/csv', crlf('first_name,last_name,email,phone,birthday', 'A,B,a@example.com,+14155550100,1990-01-01'));
  const after = await alice('GET', '/api/contacts/');
  t.equal(after.headers['x-cache'], 'MISS');
  t.equal(after.json().length, 1);
});

t.test('round trip: export, import into another account, export again: equal apart from REV', async (t) => {
  const { alice, bob, setClock } = await setup(t);
  await createContacts(alice, [
    janeRow,
    oddRow,
    contactBody({ first_name: 'Élodie', last_name: 'Ünal', additional_data: { long: 'x'.repeat(300), n: null } }),
  ]);
  for (const format of ['vcard', 'csv'] as const) {
    const first = await alice('GET', `/api/contacts/export?format=${format}`);
    setClock(format === 'vcard' ? T1 : '2025-06-17T00:00:00.000Z');
    const into = bob;
    const res = await importing(into, format === 'vcard' ? 'text/vcard' : 'text/csv', first.body);
    t.same(res.json(), { created: 3, errors: [] }, format);
    const second = await into('GET', `/api/contacts/export?format=${format}`);
    const withoutRev = (body: string) => body.replace(/^REV:.*\r\n/gm, '');
    t.equal(withoutRev(second.body), withoutRev(first.body), `${format}: the same file`);
    if (format === 'vcard') t.not(second.body, first.body, 'only REV differs');
    // Empty bob again for the next format.
    for (const contact of (await into('GET', '/api/contacts/')).json()) await into('DELETE', `/api/contacts/${contact.id}`);
  }
});
