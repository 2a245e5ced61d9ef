/** Cached reads: X-Cache, TTLs, read-your-writes through per-user generations, and no cross-user leaks. */
import t from 'tap';
import { as, buildContactsApp, contactBody, createUser } from './fixtures.js';

let clock = new Date('2025-12-30T12:00:00.000Z');
const app = await buildContactsApp(t, { now: () => clock });
const alice = as(app, await createUser(app));
const bob = as(app, await createUser(app));

/** TTLs the service asked for, by the kind of key. */
const ttls: { key: string; ttlMs: number }[] = [];
const write = app.cache.write.bind(app.cache);
app.cache.write = (userId, key, generation, answer, ttlMs) => {
  ttls.push({ key, ttlMs });
  return write(userId, key, generation, answer, ttlMs);
};

const contact = (await alice('POST', '/api/contacts/', contactBody({ birthday: '1990-12-31' }))).json();

t.test('single contact: MISS, then HIT; a write by the owner makes the next read miss and see it', async (t) => {
  const first = await alice('GET', `/api/contacts/${contact.id}`);
  t.equal(first.headers['x-cache'], 'MISS');
  const second = await alice('GET', `/api/contacts/${contact.id}`);
  t.equal(second.headers['x-cache'], 'HIT');
  t.same(second.json(), first.json());

  clock = new Date('2025-12-30T12:00:01.000Z');
  const patched = await alice('PATCH', `/api/contacts/${contact.id}`, { first_name: 'Renamed' });
  t.equal(patched.statusCode, 200);
  t.notOk('x-cache' in patched.headers, 'writes carry no X-Cache');
  const third = await alice('GET', `/api/contacts/${contact.id}`);
  t.equal(third.headers['x-cache'], 'MISS');
  t.equal(third.json().first_name, 'Renamed');
  t.equal(third.json().updated_at, '2025-12-30T12:00:01.000Z');
  t.equal((await alice('GET', `/api/contacts/${contact.id}`)).headers['x-cache'], 'HIT');

  await alice('PUT', `/api/contacts/${contact.id}`, contactBody({ first_name: 'Put', email: contact.email, birthday: '1990-12-31' }));
  const afterPut = await alice('GET', `/api/contacts/${contact.id}`);
  t.equal(afterPut.headers['x-cache'], 'MISS');
  t.equal(afterPut.json().first_name, 'Put');
});

t.test('list and upcoming: any write by the owner (create, put, patch, delete) misses every cached read', async (t) => {
  const reads = ['/api/contacts/', '/api/contacts/?query=put', '/api/contacts/get-upcoming-birthday', `/api/contacts/${contact.id}`];
  const all = async () => Promise.all(reads.map((url) => alice('GET', url)));
  const writes: [string, () => Promise<unknown>][] = [
    ['create', () => alice('POST', '/api/contacts/', contactBody({ first_name: 'Put', birthday: '1991-12-30' }))],
    [
      'put',
      () => alice('PUT', `/api/contacts/${contact.id}`, contactBody({ first_name: 'Put', email: contact.email, birthday: '1990-12-31' })),
    ],
    ['patch', () => alice('PATCH', `/api/contacts/${contact.id}`, { last_name: 'Patched' })],
    ['patch, same values', () => alice('PATCH', `/api/contacts/${contact.id}`, { last_name: 'Patched' })],
  ];
  await all();
  for (const [name, write] of writes) {
    t.same(
      (await all()).map((r) => r.headers['x-cache']),
      ['HIT', 'HIT', 'HIT', 'HIT'],
      `cached before ${name}`,
    );
    await write();
    t.same(
      (await all()).map((r) => r.headers['x-cache']),
      ['MISS', 'MISS', 'MISS', 'MISS'],
      `all miss after ${name}`,
    );
  }
  const before = await all();
  t.equal(before[0]!.headers['x-total-count'], '2');
  const created = (await alice('POST', '/api/contacts/', contactBody())).json();
  const [list] = await all();
  t.equal(list!.headers['x-total-count'], '3', 'the list sees the create');
  await alice('DELETE', `/api/contacts/${created.id}`);
  const [afterDelete] = await all();
  t.equal(afterDelete!.headers['x-cache'], 'MISS');
  t.equal(afterDelete!.headers['x-total-count'], '2', 'and the delete');
  const gone = await alice('GET', `/api/contacts/${created.id}`);
  t.equal(gone.statusCode, 404, 'a deleted contact is not served from the cache');

  const upcoming = await alice('GET', '/api/contacts/get-upcoming-birthday');
  t.same(
    upcoming.json().map((c: { first_name: string }) => c.first_name),
    ['Put', 'Put'],
    'upcoming sees the writes',
  );
});

t.test("a user's cache is theirs: other users' writes keep it, and never read it", async (t) => {
  await alice('GET', `/api/contacts/${contact.id}`);
  t.equal((await alice('GET', `/api/contacts/${contact.id}`)).headers['x-cache'], 'HIT');
  await bob('POST', '/api/contacts/', contactBody());
  t.equal((await alice('GET', `/api/contacts/${contact.id}`)).headers['x-cache'], 'HIT', "bob's write leaves alice's cache alone");
  const foreign = await bob('GET', `/api/contacts/${contact.id}`);
  t.equal(foreign.statusCode, 404, "alice's cached contact is not bob's");
  const bobsList = await bob('GET', '/api/contacts/');
  t.equal(bobsList.json().length, 1);
  t.equal(bobsList.headers['x-cache'], 'MISS');
  t.equal((await bob('GET', '/api/contacts/get-upcoming-birthday')).json().length, 0);
});

t.test('errors are not cached', async (t) => {
  t.equal((await alice('GET', '/api/contacts/999999')).statusCode, 404);
  t.equal((await alice('GET', '/api/contacts/999999')).statusCode, 404);
  t.equal((await alice('GET', '/api/contacts/?query=nickname:eq:x')).statusCode, 400);
});

t.test('TTLs: 10 s for a contact and a list, an hour for upcoming birthdays but never past UTC midnight', async (t) => {
  ttls.length = 0;
  clock = new Date('2025-12-30T12:00:00.000Z');
  await alice('POST', '/api/contacts/', contactBody());
  await alice('GET', `/api/contacts/${contact.id}`);
  await alice('GET', '/api/contacts/?limit=7');
  await alice('GET', '/api/contacts/get-upcoming-birthday');
  clock = new Date('2025-12-30T23:59:00.000Z');
  await alice('GET', '/api/contacts/get-upcoming-birthday?time_range=1');
  t.same(
    ttls.map(({ ttlMs }) => ttlMs),
    [10_000, 10_000, 3_600_000, 60_000],
  );

  // The date is part of the key too: a clock past midnight never reads yesterday's answer.
  clock = new Date('2025-12-30T23:59:30.000Z');
  const late = await alice('GET', '/api/contacts/get-upcoming-birthday?time_range=0');
  t.equal((await alice('GET', '/api/contacts/get-upcoming-birthday?time_range=0')).headers['x-cache'], 'HIT');
  clock = new Date('2025-12-31T00:00:00.000Z');
  const next = await alice('GET', '/api/contacts/get-upcoming-birthday?time_range=0');
  t.equal(next.headers['x-cache'], 'MISS');
  t.notSame(next.json(), late.json(), 'a new day, a new answer');
});

t.test('a cached read sends no statement to the database: neither the read nor the token check', async (t) => {
  const statements: string[] = [];
  const counted = await buildContactsApp(t, { onQuery: (sql) => statements.push(sql) });
  const carol = as(counted, await createUser(counted));
  const created = (await carol('POST', '/api/contacts/', contactBody({ last_name: 'Smith' }))).json();
  const reads = [
    `/api/contacts/${created.id}`,
    '/api/contacts/?limit=20',
    '/api/contacts/?query=last_name:startswith:Sm&limit=20',
    '/api/contacts/get-upcoming-birthday',
  ];
  for (const url of reads) t.equal((await carol('GET', url)).headers['x-cache'], 'MISS', `${url} fills the cache`);
  statements.length = 0;
  for (let round = 0; round < 3; round++) {
    for (const url of reads) t.equal((await carol('GET', url)).headers['x-cache'], 'HIT', url);
  }
  t.same(statements, [], '12 cached reads, 0 statements');
  await carol('PATCH', `/api/contacts/${created.id}`, { first_name: 'Counted' });
  t.ok(statements.length > 0, 'while a write does send some (so the count is real)');
});
