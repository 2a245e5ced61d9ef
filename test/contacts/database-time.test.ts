/**
 * Database time per user and per request (docs/limits.md, "Database time"): one user's searches
 * take at most DB_USER_CONNECTIONS of the pool at once and at most DB_USER_WAITING more wait (then
 * 429), so another user's write does not queue behind them; a statement past
 * DB_STATEMENT_TIMEOUT_MS is cancelled and answered 503 (PostgreSQL only: the embedded database
 * cannot cancel one), while an export keeps DB_BULK_STATEMENT_TIMEOUT_MS. bench/database-time.ts
 * measures the write's latency.
 */
import type { FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import t from 'tap';
import { backend } from '../helper.js';
import { as, buildContactsApp, contactBody, createContacts, createUser } from './fixtures.js';

const BOOK = 20_000;
const SEARCHES = 20;

/** `n` contacts of `ownerId` with varied names, written on one connection without a statement timeout. */
async function bigBook(app: FastifyInstance, ownerId: number, n: number): Promise<void> {
  await app.db.connection().execute(async (connection) => {
    await sql`set statement_timeout = 0`.execute(connection);
    await sql`
      insert into contacts (owner_id, first_name, last_name, email, phone, birthday)
        select ${ownerId}::integer, md5(g::text), md5((g * 7)::text), 'c' || g || '@example.com', '+14155550123', date '1990-01-02'
          from generate_series(1, ${n}::integer) g`.execute(connection);
    await sql`reset statement_timeout`.execute(connection);
  });
}

/** A costly filter over the whole book (20 bare terms, each a substring scan of four columns), unique by `i` so that no cache answers it. */
function heavyQuery(i: number): string {
  const terms = Array.from({ length: 20 }, (_, term) => `${'abcdef'[term % 6]}${i % 10}${term % 10}`);
  return encodeURIComponent(terms.join(' '));
}

const heavySearch = (i: number) => `/api/contacts/?limit=1&query=${heavyQuery(i)}`;

t.test("another user's write does not wait behind one user's searches; past the user's share they are 429", async (t) => {
  const app = await buildContactsApp(t, { env: { DB_USER_CONNECTIONS: '3', DB_USER_WAITING: '10' } });
  const aliceUser = await createUser(app);
  const alice = as(app, aliceUser);
  const bob = as(app, await createUser(app));
  await bigBook(app, aliceUser.id, BOOK);
  const [contact] = await createContacts(bob, [contactBody({ first_name: 'Bob' })]);
  t.equal((await bob('GET', `/api/contacts/${contact!.id}`)).statusCode, 200, "bob's sign-in is warm");

  let searchesDone = 0;
  const searches = Array.from({ length: SEARCHES }, (_, i) =>
    alice('GET', heavySearch(i)).then((res) => {
      if (res.statusCode === 200) searchesDone++;
      return res;
    }),
  );
  // The PATCH is sent once the first search has answered: the others are running or waiting then.
  await Promise.race(searches.map((search) => search.then((res) => res.statusCode === 200 || new Promise(() => {}))));
  const patch = await bob('PATCH', `/api/contacts/${contact!.id}`, { last_name: 'Builder' });
  const doneAtPatch = searchesDone;
  t.equal(patch.statusCode, 200);
  t.equal(patch.json<{ last_name: string }>().last_name, 'Builder');

  const answers = await Promise.all(searches);
  const refused = answers.filter((res) => res.statusCode === 429);
  t.equal(
    answers.filter((res) => res.statusCode === 200).length,
    3 + 10,
    'DB_USER_CONNECTIONS using the database, DB_USER_WAITING waiting',
  );
  t.equal(refused.length, SEARCHES - 13, 'the rest refused at once');
  for (const res of refused) {
    t.same(res.json(), { detail: 'Too many of your requests are waiting for the database, retry in 1 seconds' });
    t.equal(res.headers['retry-after'], '1');
  }
  // Without the share the PATCH queued behind every search sent before it: on PostgreSQL it got one
  // of the pool's 10 connections after 11 searches had answered, on the embedded database after all 13.
  // Now it waits for at most the user's 3 on the embedded database's one session, twice (its
  // sign-in check and its write), so at most 7 have answered.
  t.ok(doneAtPatch <= 7, `the PATCH answered while the searches ran (${doneAtPatch} of 13 had answered)`);
  t.ok(doneAtPatch < 13, 'not after them');
});

t.test(
  'a statement past DB_STATEMENT_TIMEOUT_MS is 503 with Retry-After; an export has its own bound',
  { skip: backend === 'embedded' && 'the embedded database cannot cancel a statement' },
  async (t) => {
    const app = await buildContactsApp(t, { env: { DB_STATEMENT_TIMEOUT_MS: '50' } });
    const user = await createUser(app);
    const call = as(app, user);
    await bigBook(app, user.id, BOOK);
    const search = await call('GET', heavySearch(0));
    t.equal(search.statusCode, 503);
    t.same(search.json(), { detail: 'Service unavailable: the request took too long in the database' });
    t.equal(search.headers['retry-after'], '5');
    t.equal((await call('GET', '/api/contacts/?limit=1')).statusCode, 200, 'a cheap read is served');
    // The export sorts the whole book in one statement, under DB_BULK_STATEMENT_TIMEOUT_MS.
    const exported = await call('GET', `/api/contacts/export?format=csv&query=${heavyQuery(0)}`);
    t.equal(exported.statusCode, 200, 'the export of the same search is served');
  },
);
