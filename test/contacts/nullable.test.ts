/**
 * Contract 2.0.0: `email`, `phone` and `birthday` may be null (a card stored over CardDAV needs only
 * a name). Null fields match no filter condition and no bare term, sort after every value ascending
 * and before them descending, are left out of upcoming birthdays and out of exports; REST writes keep
 * their rules, and a REST write of a contact with a stored card rewrites only the mapped properties.
 */
import t from 'tap';
import { as, buildContactsApp, contactBody, createContacts, createUser } from './fixtures.js';

const NOW = new Date('2026-06-10T12:00:00.000Z');
const app = await buildContactsApp(t, { now: () => NOW });
const user = await createUser(app);
const call = as(app, user);

const [full] = await createContacts(call, [
  contactBody({ first_name: 'Full', last_name: 'Person', email: 'full@example.com', birthday: '1990-06-12' }),
]);
// What a card with a name and nothing else becomes: stored straight, as the CardDAV face stores it.
const bare = await app.db
  .insertInto('contacts')
  .values({ owner_id: user.id, first_name: '', last_name: 'Bare', email: null, phone: null, birthday: null })
  .returning(['id'])
  .executeTakeFirstOrThrow();

const ids = (res: { json(): unknown }) => (res.json() as { id: number }[]).map((contact) => contact.id);

t.test('a contact with null fields is answered with nulls, and an empty first name', async (t) => {
  const res = await call('GET', `/api/contacts/${bare.id}`);
  t.equal(res.statusCode, 200);
  t.match(res.json(), { id: bare.id, first_name: '', last_name: 'Bare', email: null, phone: null, birthday: null, additional_data: null });
});

t.test('null fields never match a filter condition on their field, nor a bare term', async (t) => {
  const queries = [
    'email:contains:@',
    'email:like:%',
    'email:ilike:%',
    'phone:like:%',
    'phone:startswith:+',
    'birthday:gt:1800-01-01',
    'birthday:lt:2100-01-01',
    'birthday:between:1800-01-01,2100-01-01',
    'email:in_:[""]',
  ];
  for (const query of queries) {
    const res = await call('GET', `/api/contacts/?query=${encodeURIComponent(query)}`);
    t.equal(res.statusCode, 200, query);
    t.notOk(ids(res).includes(bare.id), `${query} leaves the null out`);
  }
  const term = await call('GET', '/api/contacts/?query=x');
  t.strictSame(ids(term), [full!.id], 'a bare term matching every other field finds only the full contact');
  const name = await call('GET', '/api/contacts/?query=bare');
  t.strictSame(ids(name), [bare.id], 'the name still matches');
});

t.test('null fields sort after every value ascending and before them descending', async (t) => {
  for (const field of ['email', 'birthday']) {
    t.strictSame(ids(await call('GET', `/api/contacts/?sort=${field}`)), [full!.id, bare.id], `${field} ascending`);
    t.strictSame(ids(await call('GET', `/api/contacts/?sort=-${field}`)), [bare.id, full!.id], `${field} descending`);
  }
});

t.test('null birthdays are left out of upcoming birthdays', async (t) => {
  const res = await call('GET', '/api/contacts/get-upcoming-birthday?time_range=366');
  t.equal(res.statusCode, 200);
  t.strictSame(ids(res), [full!.id]);
  t.equal(res.headers['x-total-count'], '1');
});

t.test('exports leave null fields out: no vCard line, an empty CSV cell', async (t) => {
  const vcard = await call('GET', '/api/contacts/export?format=vcard&query=bare');
  t.equal(vcard.statusCode, 200);
  t.equal(vcard.body.replace(/REV:\d{8}T\d{6}Z/, 'REV:x'), 'BEGIN:VCARD\r\nVERSION:4.0\r\nFN:Bare\r\nN:Bare;;;;\r\nREV:x\r\nEND:VCARD\r\n');
  const csv = await call('GET', '/api/contacts/export?format=csv&query=bare');
  t.equal(csv.body, 'first_name,last_name,email,phone,birthday,additional_data\r\n,Bare,,,,\r\n');
});

t.test('REST writes keep their rules: null is refused for email, phone and birthday', async (t) => {
  for (const field of ['email', 'phone', 'birthday']) {
    const res = await call('PATCH', `/api/contacts/${bare.id}`, { [field]: null });
    t.equal(res.statusCode, 422, field);
    t.match(res.json(), { detail: new RegExp(`^body/${field} must be string`) });
  }
  const res = await call('POST', '/api/contacts/', contactBody({ email: null }));
  t.equal(res.statusCode, 422);
});

t.test('a REST write of a contact with a stored card rewrites only its mapped properties', async (t) => {
  const card = [
    'BEGIN:VCARD',
    'VERSION:3.0',
    'UID:card-1',
    'N:Old;Given;Middle;Dr.;',
    'FN:Given Old',
    'item1.EMAIL;TYPE=work:old@example.com',
    'item1.X-ABLabel:Work',
    'EMAIL;TYPE=home:second@example.com',
    'TEL;TYPE=cell:+1 415 555 0100',
    'ORG:Acme;Sales',
    'NOTE:Folded note that is long enough to be folded over two lines by a client\\, with a comma',
    ' and its continuation',
    'BDAY:1980-01-02',
    'END:VCARD',
    '',
  ].join('\n');
  const row = await app.db
    .insertInto('contacts')
    .values({
      owner_id: user.id,
      first_name: 'Given',
      last_name: 'Old',
      email: 'old@example.com',
      phone: '+14155550100',
      birthday: '1980-01-02',
      card,
      card_name: 'card-1.vcf',
      uid: 'card-1',
    })
    .returning(['id'])
    .executeTakeFirstOrThrow();
  const patched = await call('PATCH', `/api/contacts/${row.id}`, {
    last_name: 'New',
    email: 'new@example.com',
    phone: '+44 20 7946 0000',
    additional_data: { a: 1 },
  });
  t.equal(patched.statusCode, 200);
  t.match(patched.json(), {
    first_name: 'Given',
    last_name: 'New',
    email: 'new@example.com',
    phone: '+442079460000',
    birthday: '1980-01-02',
  });
  const stored = await app.db.selectFrom('contacts').select('card').where('id', '=', row.id).executeTakeFirstOrThrow();
  t.equal(
    stored.card,
    [
      'BEGIN:VCARD',
      'VERSION:3.0',
      'UID:card-1',
      'N:New;Given;Middle;Dr.;',
      'FN:Given New',
      'item1.EMAIL;TYPE=work:new@example.com',
      'item1.X-ABLabel:Work',
      'EMAIL;TYPE=home:second@example.com',
      'TEL;TYPE=cell:+442079460000',
      'ORG:Acme;Sales',
      'NOTE:Folded note that is long enough to be folded over two lines by a client\\, with a comma',
      ' and its continuation',
      'BDAY:1980-01-02',
      'X-ADDITIONAL-DATA:{"a":1}',
      'END:VCARD',
      '',
    ].join('\n'),
  );
  const cleared = await call('PATCH', `/api/contacts/${row.id}`, { additional_data: null, birthday: '1981-03-04' });
  t.equal(cleared.statusCode, 200);
  const after = await app.db.selectFrom('contacts').select('card').where('id', '=', row.id).executeTakeFirstOrThrow();
  t.notMatch(after.card!, /X-ADDITIONAL-DATA/, 'removed when additional_data becomes null');
  t.match(after.card!, /\nBDAY:1981-03-04\n/, 'the birthday replaced in place, in the form it had');

  const stale = await call('PATCH', `/api/contacts/${row.id}`, { first_name: 'X' }, { 'if-match': patched.headers.etag as string });
  t.equal(stale.statusCode, 412, 'If-Match still holds for a contact with a card');
});
