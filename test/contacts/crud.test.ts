/** Create, get, replace, patch and delete: status, body and headers as the contract fixes them. */
import t, { type Test } from 'tap';
import { applyContactRules } from '../../src/contacts/contacts.service.js';
import { ValidationFailed } from '../../plugins/http/errors.js';
import { as, buildContactsApp, contactBody, createUser } from './fixtures.js';

const T0 = '2025-06-15T12:00:00.123Z';
const T1 = '2025-06-15T12:05:00.456Z';
const T2 = '2025-06-16T08:00:00.789Z';

async function setup(t: Test) {
  let clock = new Date(T0);
  const app = await buildContactsApp(t, { now: () => clock });
  const alice = await createUser(app);
  const bob = await createUser(app);
  return { app, alice: as(app, alice), bob: as(app, bob), aliceUser: alice, setClock: (iso: string) => (clock = new Date(iso)) };
}

t.test('create: 201, Location, normalised phone, ms timestamps, read-only fields ignored', async (t) => {
  const { alice } = await setup(t);
  const body = contactBody({
    first_name: '  Jane ',
    last_name: 'Doe',
    email: 'jane@example.com',
    phone: '+1 (415) 555.01-23',
    birthday: '1990-05-17',
    id: 999,
    created_at: 'whatever',
    updated_at: '2000-01-01T00:00:00.000Z',
  });
  const res = await alice('POST', '/api/contacts/', body);
  t.equal(res.statusCode, 201);
  const contact = res.json();
  t.equal(res.headers.location, `/api/contacts/${contact.id}`);
  t.not(contact.id, 999);
  t.same(contact, {
    id: contact.id,
    first_name: 'Jane',
    last_name: 'Doe',
    email: 'jane@example.com',
    phone: '+14155550123',
    birthday: '1990-05-17',
    additional_data: null,
    created_at: T0,
    updated_at: T0,
  });
  t.strictSame(Object.keys(contact), [
    'id',
    'first_name',
    'last_name',
    'email',
    'phone',
    'birthday',
    'additional_data',
    'created_at',
    'updated_at',
  ]);

  const withData = await alice(
    'POST',
    '/api/contacts/',
    contactBody({ additional_data: { company: 'Acme', tags: ['a', 'b'], nested: { n: 1 } } }),
  );
  t.equal(withData.statusCode, 201);
  t.same(withData.json().additional_data, { company: 'Acme', tags: ['a', 'b'], nested: { n: 1 } });

  const got = await alice('GET', `/api/contacts/${contact.id}`);
  t.equal(got.statusCode, 200);
  t.same(got.json(), contact, 'a read returns exactly what the create returned');
});

t.test('create: schema rules are 422 naming the field', async (t) => {
  const { alice } = await setup(t);
  const cases: [Record<string, unknown>, string][] = [
    [{ nickname: 'JD' }, 'body/nickname is not an allowed property'],
    [{ first_name: '   ' }, 'body/first_name must NOT have fewer than 1 characters'],
    [{ last_name: 'x'.repeat(51) }, 'body/last_name must NOT have more than 50 characters'],
    [{ email: 'not-an-email' }, 'body/email must match format "email"'],
    [{ email: `${'a'.repeat(250)}@b.co` }, 'body/email must NOT have more than 254 characters'],
    [{ phone: '+1 415 CALL-NOW' }, 'body/phone must match pattern "^[+0-9 ().-]+$"'],
    [{ phone: 14155550123 }, 'body/phone must be string'],
    [{ birthday: '2023-02-29' }, 'body/birthday must match format "date"'],
    [{ birthday: '1990-5-17' }, 'body/birthday must match format "date"'],
    [{ additional_data: ['a'] }, 'body/additional_data must be object,null'],
    [{ additional_data: 'text' }, 'body/additional_data must be object,null'],
  ];
  for (const [override, detail] of cases) {
    const res = await alice('POST', '/api/contacts/', contactBody(override));
    t.equal(res.statusCode, 422, detail);
    t.same(res.json(), { detail });
  }
  for (const field of ['first_name', 'last_name', 'email', 'phone', 'birthday']) {
    const body = contactBody();
    delete body[field];
    const res = await alice('POST', '/api/contacts/', body);
    t.equal(res.statusCode, 422);
    t.same(res.json(), { detail: `body/${field} is required` });
  }
  t.equal((await alice('POST', '/api/contacts/', contactBody({ last_name: 'x'.repeat(50) }))).statusCode, 201, '50 characters is fine');
  t.equal((await alice('POST', '/api/contacts/', contactBody({ first_name: ` ${'y'.repeat(50)} ` }))).statusCode, 201, 'trimmed first');
});

t.test('create: the rules a schema cannot state (phone E.164, birthday window, 16 KiB)', async (t) => {
  const { alice } = await setup(t);
  const phoneDetail = 'body/phone must be an international number in E.164 form, like +14155550123';
  for (const phone of ['+0123456789', '+1 23-45', '+1234567890123456', '+(1) 234-56']) {
    const res = await alice('POST', '/api/contacts/', contactBody({ phone }));
    t.equal(res.statusCode, 422, phone);
    t.same(res.json(), { detail: phoneDetail });
  }
  for (const phone of ['+1234567', '+123456789012345', '+44 20 7946 0958']) {
    t.equal((await alice('POST', '/api/contacts/', contactBody({ phone }))).statusCode, 201, phone);
  }
  // Separators may precede the plus; a plus anywhere but first once they are gone is not E.164.
  for (const phone of ['(+44) 20 7946 0958', ' +44 20 7946 0958', '.+44-20-7946-0958']) {
    const res = await alice('POST', '/api/contacts/', contactBody({ phone }));
    t.equal(res.statusCode, 201, phone);
    t.equal(res.json().phone, '+442079460958', phone);
  }
  for (const phone of ['44+2079460958', '(44) +20 7946 0958', '+44 (+20) 7946 0958', '++442079460958', '442079460958']) {
    const res = await alice('POST', '/api/contacts/', contactBody({ phone }));
    t.equal(res.statusCode, 422, phone);
    t.same(res.json(), { detail: phoneDetail }, phone);
  }

  // The clock says 2025-06-15.
  const birthdays: [string, number, string | null][] = [
    ['2025-06-15', 422, 'body/birthday must be before today'],
    ['2030-01-01', 422, 'body/birthday must be before today'],
    ['1899-12-31', 422, 'body/birthday must not be before 1900-01-01'],
    ['2025-06-14', 201, null],
    ['1900-01-01', 201, null],
    ['2024-02-29', 201, null],
  ];
  for (const [birthday, status, detail] of birthdays) {
    const res = await alice('POST', '/api/contacts/', contactBody({ birthday }));
    t.equal(res.statusCode, status, birthday);
    if (detail) t.same(res.json(), { detail });
    else t.equal(res.json().birthday, birthday);
  }

  // {"k":"…"} is 8 bytes of JSON around the string.
  const exactly16k = { k: 'x'.repeat(16 * 1024 - 8) };
  t.equal(Buffer.byteLength(JSON.stringify(exactly16k)), 16 * 1024);
  const ok = await alice('POST', '/api/contacts/', contactBody({ additional_data: exactly16k }));
  t.equal(ok.statusCode, 201);
  t.same(ok.json().additional_data, exactly16k);
  const tooBig = await alice('POST', '/api/contacts/', contactBody({ additional_data: { k: 'x'.repeat(16 * 1024 - 7) } }));
  t.equal(tooBig.statusCode, 422);
  t.same(tooBig.json(), { detail: 'body/additional_data must be at most 16 KiB as JSON' });
  const multiByte = await alice('POST', '/api/contacts/', contactBody({ additional_data: { k: 'é'.repeat(8 * 1024) } }));
  t.equal(multiByte.statusCode, 422, 'the limit counts UTF-8 bytes');
});

t.test('applyContactRules: additional_data too deep for JSON.stringify is a 422, not a RangeError', async (t) => {
  let deep: Record<string, unknown> = {};
  for (let i = 0; i < 100_000; i++) deep = { k: deep };
  // Node 22's JSON.stringify throws a RangeError this deep; Node 26's is iterative and measures it.
  t.throws(() => applyContactRules({ additional_data: deep }, new Date(T0)), {
    constructor: ValidationFailed,
    statusCode: 422,
    message: /^body\/additional_data (is nested too deeply|must be at most 16 KiB as JSON)$/,
  });
  const shallow = { additional_data: { a: { b: [1, 'x'] } } };
  t.same(applyContactRules(shallow, new Date(T0)), shallow);
});

t.test('duplicate e-mail per owner ignoring case is 409; other owners may reuse it', async (t) => {
  const { alice, bob } = await setup(t);
  const first = await alice('POST', '/api/contacts/', contactBody({ email: 'Same@Example.com' }));
  t.equal(first.statusCode, 201);
  const dup = await alice('POST', '/api/contacts/', contactBody({ email: 'same@EXAMPLE.com' }));
  t.equal(dup.statusCode, 409);
  t.same(dup.json(), { detail: 'Contact with this email already exists' });
  t.equal((await bob('POST', '/api/contacts/', contactBody({ email: 'same@example.com' }))).statusCode, 201);

  const other = (await alice('POST', '/api/contacts/', contactBody({ email: 'other@example.com' }))).json();
  const put = await alice('PUT', `/api/contacts/${other.id}`, contactBody({ email: 'SAME@example.com' }));
  t.equal(put.statusCode, 409);
  t.same(put.json(), { detail: 'Contact with this email already exists' });
  const patch = await alice('PATCH', `/api/contacts/${other.id}`, { email: 'same@example.COM' });
  t.equal(patch.statusCode, 409);
  t.same(patch.json(), { detail: 'Contact with this email already exists' });
  const own = await alice('PATCH', `/api/contacts/${first.json().id}`, { email: 'SAME@example.com' });
  t.equal(own.statusCode, 200, 'a contact may change the case of its own address');
  t.equal(own.json().email, 'SAME@example.com');
});

t.test('concurrent creates with one e-mail: one 201, the rest 409 from the unique index, never 500', async (t) => {
  const { alice } = await setup(t);
  const results = await Promise.all(
    Array.from({ length: 6 }, (_, i) =>
      alice('POST', '/api/contacts/', contactBody({ email: i % 2 ? 'race@example.com' : 'RACE@example.com' })),
    ),
  );
  const statuses = results.map((r) => r.statusCode).sort();
  t.same(statuses, [201, 409, 409, 409, 409, 409]);
  for (const r of results.filter((r) => r.statusCode === 409)) t.same(r.json(), { detail: 'Contact with this email already exists' });
});

t.test('get: 200 with X-Cache; 404 for missing and for another user; 422 for a bad id', async (t) => {
  const { alice, bob } = await setup(t);
  const contact = (await alice('POST', '/api/contacts/', contactBody())).json();
  const res = await alice('GET', `/api/contacts/${contact.id}`);
  t.equal(res.statusCode, 200);
  t.equal(res.headers['x-cache'], 'MISS');
  t.same(res.json(), contact);
  for (const url of [`/api/contacts/${contact.id + 1000}`, '/api/contacts/2147483647']) {
    const missing = await alice('GET', url);
    t.equal(missing.statusCode, 404);
    t.same(missing.json(), { detail: 'Contact not found' });
  }
  const foreign = await bob('GET', `/api/contacts/${contact.id}`);
  t.equal(foreign.statusCode, 404);
  t.same(foreign.json(), { detail: 'Contact not found' });
  t.same((await alice('GET', '/api/contacts/0')).json(), { detail: 'params/contact_id must be >= 1' });
  t.equal((await alice('GET', '/api/contacts/abc')).statusCode, 422);
  t.equal((await alice('GET', '/api/contacts/2147483648')).statusCode, 422);
});

t.test('put: replaces the five fields; additional_data omitted keeps it, null clears it', async (t) => {
  const { alice, bob, setClock } = await setup(t);
  const created = (await alice('POST', '/api/contacts/', contactBody({ additional_data: { a: 1 } }))).json();
  setClock(T1);
  const replacement = {
    first_name: 'John',
    last_name: 'Smith',
    email: 'john@example.com',
    phone: '+44 20 7946 0958',
    birthday: '1985-01-02',
    id: 12345,
    created_at: '1999-01-01T00:00:00.000Z',
  };
  const put = await alice('PUT', `/api/contacts/${created.id}`, replacement);
  t.equal(put.statusCode, 200);
  t.same(put.json(), {
    id: created.id,
    first_name: 'John',
    last_name: 'Smith',
    email: 'john@example.com',
    phone: '+442079460958',
    birthday: '1985-01-02',
    additional_data: { a: 1 },
    created_at: T0,
    updated_at: T1,
  });
  setClock(T2);
  const cleared = await alice('PUT', `/api/contacts/${created.id}`, { ...replacement, additional_data: null });
  t.equal(cleared.statusCode, 200);
  t.equal(cleared.json().additional_data, null);
  t.equal(cleared.json().updated_at, T2, 'always a write, even with the same values');
  const set = await alice('PUT', `/api/contacts/${created.id}`, { ...replacement, additional_data: { b: 2 } });
  t.same(set.json().additional_data, { b: 2 });

  const partial = await alice('PUT', `/api/contacts/${created.id}`, { first_name: 'Only' });
  t.equal(partial.statusCode, 422);
  t.same(partial.json(), { detail: 'body/last_name is required' });
  const badPhone = await alice('PUT', `/api/contacts/${created.id}`, { ...replacement, phone: '+0 123 456 789' });
  t.equal(badPhone.statusCode, 422);

  const foreign = await bob('PUT', `/api/contacts/${created.id}`, replacement);
  t.equal(foreign.statusCode, 404);
  t.same(foreign.json(), { detail: 'Contact not found' });
  t.equal((await alice('PUT', `/api/contacts/${created.id + 1000}`, replacement)).statusCode, 404);
  t.equal((await alice('GET', `/api/contacts/${created.id}`)).json().first_name, 'John', "bob's attempt changed nothing");
});

t.test('patch: any subset; an empty or read-only-only body changes nothing; same values still write', async (t) => {
  const { alice, bob, setClock } = await setup(t);
  const created = (await alice('POST', '/api/contacts/', contactBody({ additional_data: { a: 1 } }))).json();

  setClock(T1);
  const empty = await alice('PATCH', `/api/contacts/${created.id}`, {});
  t.equal(empty.statusCode, 200);
  t.same(empty.json(), created, 'empty body: the contact as stored');
  const readOnly = await alice('PATCH', `/api/contacts/${created.id}`, { id: 5, created_at: 'x', updated_at: 'y' });
  t.equal(readOnly.statusCode, 200);
  t.same(readOnly.json(), created, 'read-only fields only: unchanged');

  const renamed = await alice('PATCH', `/api/contacts/${created.id}`, { first_name: ' Janet ', phone: '+49 (30) 1234-5678', id: 77 });
  t.equal(renamed.statusCode, 200);
  t.same(renamed.json(), { ...created, first_name: 'Janet', phone: '+493012345678', updated_at: T1 });

  setClock(T2);
  const same = await alice('PATCH', `/api/contacts/${created.id}`, { first_name: 'Janet' });
  t.same(
    same.json(),
    { ...created, first_name: 'Janet', phone: '+493012345678', updated_at: T2 },
    'unchanged values still move updated_at',
  );

  const cleared = await alice('PATCH', `/api/contacts/${created.id}`, { additional_data: null });
  t.equal(cleared.json().additional_data, null);
  const data = await alice('PATCH', `/api/contacts/${created.id}`, { additional_data: { z: [1, 2] } });
  t.same(data.json().additional_data, { z: [1, 2] });

  const cases: [Record<string, unknown>, string][] = [
    [{ nickname: 'x' }, 'body/nickname is not an allowed property'],
    [{ first_name: '' }, 'body/first_name must NOT have fewer than 1 characters'],
    [{ email: 'nope' }, 'body/email must match format "email"'],
    [{ phone: '+1 2' }, 'body/phone must NOT have fewer than 8 characters'],
    [{ phone: '+0 1234 5678' }, 'body/phone must be an international number in E.164 form, like +14155550123'],
    [{ birthday: '2025-06-16' }, 'body/birthday must be before today'],
    [{ birthday: '1899-01-01' }, 'body/birthday must not be before 1900-01-01'],
    [{ additional_data: { k: 'x'.repeat(17 * 1024) } }, 'body/additional_data must be at most 16 KiB as JSON'],
    [{ first_name: null }, 'body/first_name must be string'],
  ];
  for (const [body, detail] of cases) {
    const res = await alice('PATCH', `/api/contacts/${created.id}`, body);
    t.equal(res.statusCode, 422, detail);
    t.same(res.json(), { detail });
  }

  for (const body of [{ first_name: 'Mallory' }, {}]) {
    const foreign = await bob('PATCH', `/api/contacts/${created.id}`, body);
    t.equal(foreign.statusCode, 404);
    t.same(foreign.json(), { detail: 'Contact not found' });
    t.equal((await alice('PATCH', `/api/contacts/${created.id + 1000}`, body)).statusCode, 404);
  }
  t.equal((await alice('GET', `/api/contacts/${created.id}`)).json().first_name, 'Janet');
});

t.test('writes within one millisecond still move updated_at, one millisecond at a time', async (t) => {
  const { alice } = await setup(t);
  const created = (await alice('POST', '/api/contacts/', contactBody())).json();
  t.equal(created.updated_at, T0);
  const first = (await alice('PATCH', `/api/contacts/${created.id}`, { first_name: 'Q' })).json();
  t.equal(first.updated_at, '2025-06-15T12:00:00.124Z', 'the clock has not moved; updated_at still has');
  const second = (await alice('PUT', `/api/contacts/${created.id}`, contactBody())).json();
  t.equal(second.updated_at, '2025-06-15T12:00:00.125Z');
  t.equal(second.created_at, T0);
});

t.test("delete: 200 with the deleted contact; then 404; never another user's", async (t) => {
  const { alice, bob } = await setup(t);
  const contact = (await alice('POST', '/api/contacts/', contactBody({ additional_data: { x: 1 } }))).json();
  const foreign = await bob('DELETE', `/api/contacts/${contact.id}`);
  t.equal(foreign.statusCode, 404);
  t.same(foreign.json(), { detail: 'Contact not found' });
  t.equal((await alice('GET', `/api/contacts/${contact.id}`)).statusCode, 200, 'still there');

  const res = await alice('DELETE', `/api/contacts/${contact.id}`);
  t.equal(res.statusCode, 200);
  t.same(res.json(), contact);
  const gone = await alice('GET', `/api/contacts/${contact.id}`);
  t.equal(gone.statusCode, 404);
  t.same(gone.json(), { detail: 'Contact not found' });
  const again = await alice('DELETE', `/api/contacts/${contact.id}`);
  t.equal(again.statusCode, 404);
  t.same(again.json(), { detail: 'Contact not found' });
  t.equal((await alice('POST', '/api/contacts/', contactBody({ email: contact.email }))).statusCode, 201, 'its e-mail is free again');
});

t.test('every contacts operation needs a valid access token', async (t) => {
  const { app, alice } = await setup(t);
  const contact = (await alice('POST', '/api/contacts/', contactBody())).json();
  const calls: [string, string, unknown?][] = [
    ['GET', '/api/contacts/'],
    ['POST', '/api/contacts/', contactBody()],
    ['GET', '/api/contacts/get-upcoming-birthday'],
    ['GET', `/api/contacts/${contact.id}`],
    ['PUT', `/api/contacts/${contact.id}`, contactBody()],
    ['PATCH', `/api/contacts/${contact.id}`, { first_name: 'X' }],
    ['DELETE', `/api/contacts/${contact.id}`],
  ];
  for (const [method, url, payload] of calls) {
    for (const headers of [{}, { authorization: 'Bearer not-a-token' }]) {
      const res = await app.inject({ method: method as 'GET', url, headers, ...(payload ? { payload: payload } : {}) });
      t.equal(res.statusCode, 401, `${method} ${url}`);
      t.equal(res.headers['www-authenticate'], 'Bearer');
      t.same(res.json(), { detail: 'Not authenticated' });
    }
  }
  t.equal((await alice('GET', `/api/contacts/${contact.id}`)).json().first_name, contact.first_name, 'nothing changed');
});

t.test('bodies: wrong content type 415, no body or bad JSON 400', async (t) => {
  const { alice } = await setup(t);
  const text = await alice('POST', '/api/contacts/', 'first_name=x', { 'content-type': 'text/plain' });
  t.equal(text.statusCode, 415);
  const bad = await alice('POST', '/api/contacts/', '{"first_name":', { 'content-type': 'application/json' });
  t.equal(bad.statusCode, 400);
  t.same(bad.json(), { detail: 'Malformed JSON body' });
  const none = await alice('PATCH', '/api/contacts/1');
  t.equal(none.statusCode, 400);
  t.same(none.json(), { detail: 'Malformed JSON body' });
});

t.test('deleting a user deletes their contacts (owner foreign key cascades)', async (t) => {
  const { app, alice, aliceUser } = await setup(t);
  await alice('POST', '/api/contacts/', contactBody());
  await app.db.deleteFrom('users').where('id', '=', aliceUser.id).execute();
  const left = await app.db
    .selectFrom('contacts')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where('owner_id', '=', aliceUser.id)
    .executeTakeFirstOrThrow();
  t.equal(left.n, 0);
});
