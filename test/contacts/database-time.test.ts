/**
 * Database time per user and per request (docs/limits.md, "Database time"): one user's requests
 * take at most DB_USER_CONNECTIONS of the pool at once and at most DB_USER_WAITING more wait (then
 * 429), so another user's write does not queue behind them; a statement past
 * DB_STATEMENT_TIMEOUT_MS is cancelled and answered 503, while an export keeps
 * DB_BULK_STATEMENT_TIMEOUT_MS. Requests are held in the database by real locks that a second
 * session takes, so nothing depends on how fast the machine is. The embedded database has one
 * session, so no other can hold a lock, and it cannot cancel a statement. bench/database-time.ts
 * measures a write's latency behind one user's heavy searches.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { backend, lockingSession, until } from '../helper.js';
import { as, buildContactsApp, contactBody, createContacts, createUser } from './fixtures.js';

const skip = backend === 'embedded' && 'the embedded database has one session and cannot cancel a statement';
const REQUESTS = 20;

t.test("another user's write does not wait behind one user's requests; past the user's share they are 429", { skip }, async (t) => {
  const app = await buildContactsApp(t, { env: { DB_USER_CONNECTIONS: '3', DB_USER_WAITING: '10' } });
  const aliceUser = await createUser(app);
  const alice = as(app, aliceUser);
  const bob = as(app, await createUser(app));
  // A book's row is written with its first contact.
  await createContacts(alice, [contactBody()]);
  const [contact] = await createContacts(bob, [contactBody({ first_name: 'Bob' })]);
  const { session, lockWaiters } = await lockingSession(t, app.config.databaseUrl!);

  // Every create of Alice's takes her address book's row, which this session holds.
  await session.query('begin');
  await session.query('select 1 from address_books where owner_id = $1 for update', [aliceUser.id]);
  const answered: number[] = [];
  const creates = Array.from({ length: REQUESTS }, (_, i) =>
    alice('POST', '/api/contacts/', contactBody()).then((res) => {
      answered.push(i);
      return res;
    }),
  );
  await until(
    async () => (await lockWaiters()) === 3 && answered.length === REQUESTS - 13,
    'three creates in the database and seven answered',
  );
  const refused = await Promise.all(answered.map((i) => creates[i]!));
  for (const res of refused) {
    t.equal(res.statusCode, 429);
    t.same(res.json(), { detail: 'Too many of your requests are waiting for the database, retry in 1 seconds' });
    t.equal(res.headers['retry-after'], '1');
  }

  const patch = await bob('PATCH', `/api/contacts/${contact!.id}`, { last_name: 'Builder' });
  t.equal(patch.statusCode, 200, "Bob's write does not wait behind Alice's");
  t.equal(patch.json<{ last_name: string }>().last_name, 'Builder');
  t.equal(answered.length, REQUESTS - 13, 'DB_USER_CONNECTIONS of them in the database and DB_USER_WAITING waiting, still');

  await session.query('commit');
  const refusedNow = new Set(answered);
  const held = await Promise.all(creates.filter((_, i) => !refusedNow.has(i)));
  t.same(
    held.map((res) => res.statusCode),
    Array.from({ length: 13 }, () => 201),
    'once the book is free, every request that waited is written',
  );
});

t.test('a statement past DB_STATEMENT_TIMEOUT_MS is 503 with Retry-After; an export has its own bound', { skip }, async (t) => {
  const TIMEOUT_MS = 200;
  const app = await buildContactsApp(t, { env: { DB_STATEMENT_TIMEOUT_MS: String(TIMEOUT_MS) } });
  const user = await createUser(app);
  const call = as(app, user);
  await createContacts(call, [contactBody({ first_name: 'Kept' })]);
  const { session, lockWaiters } = await lockingSession(t, app.config.databaseUrl!);

  // A create waits for the book's row past the bound: PostgreSQL cancels it.
  await session.query('begin');
  await session.query('select 1 from address_books where owner_id = $1 for update', [user.id]);
  const create = await call('POST', '/api/contacts/', contactBody({ first_name: 'Cancelled' }));
  t.equal(create.statusCode, 503);
  t.same(create.json(), { detail: 'Service unavailable: the request took too long in the database' });
  t.equal(create.headers['retry-after'], '5');
  t.equal((await call('GET', '/api/contacts/?limit=1')).statusCode, 200, 'a read that needs no lock is served meanwhile');
  await session.query('commit');

  // The export's statement waits for the whole table three times the bound, and is still served.
  await session.query('begin');
  await session.query('lock table contacts in access exclusive mode');
  const exported = call('GET', '/api/contacts/export?format=csv');
  await until(async () => (await lockWaiters()) === 1, 'the export to wait for the table');
  await sleep(3 * TIMEOUT_MS);
  await session.query('commit');
  const res = await exported;
  t.equal(res.statusCode, 200, 'the export is served under DB_BULK_STATEMENT_TIMEOUT_MS');
  t.match(res.body, /\r\nKept,/);
  t.notMatch(res.body, /Cancelled/, 'the cancelled create wrote nothing');
});
