/**
 * A CardDAV user's requests count in their share of the database (docs/limits.md, "Database time")
 * as the same user's /api requests do: DB_USER_CONNECTIONS of them use connections, DB_USER_WAITING
 * more wait, and the rest are 429 `D:error` at once, while another user is served. The requests are
 * held in the database by a real row lock on the user's address book, so nothing depends on speed.
 * A write that waits for such a lock past DB_STATEMENT_TIMEOUT_MS is 503, as on /api. The embedded
 * database has one session: no other transaction can hold a lock there.
 */
import t from 'tap';
import { errorBody, XML_TYPE } from '../../src/carddav/errors.js';
import { backend, lockingSession, until } from '../helper.js';
import { buildContactsApp } from '../contacts/fixtures.js';
import { card, davAs, davUser } from './dav-client.js';

const VCARD = { 'content-type': 'text/vcard' };
const skip = backend === 'embedded' && 'the embedded database has one session: no other transaction can hold a lock';

t.test("past the user's share a CardDAV request is 429 at once; another user is served meanwhile", { skip }, async (t) => {
  const app = await buildContactsApp(t, { env: { DB_USER_CONNECTIONS: '2', DB_USER_WAITING: '1' } });
  const alice = await davUser(app);
  const bob = await davUser(app);
  const aliceCall = davAs(app, alice);
  const bobCall = davAs(app, bob);
  const aliceBook = `/dav/addressbooks/${alice.id}/contacts/`;
  const bobBook = `/dav/addressbooks/${bob.id}/contacts/`;
  t.equal((await bobCall('PUT', `${bobBook}first.vcf`, card('first', 'Bob First'), VCARD)).statusCode, 201);
  // A book's row is written with its first card.
  t.equal((await aliceCall('PUT', `${aliceBook}first.vcf`, card('first', 'Alice First'), VCARD)).statusCode, 201);
  const { session, lockWaiters } = await lockingSession(t, app.config.databaseUrl!);

  // Every create of Alice's takes her address book's row, which this session holds.
  await session.query('begin');
  await session.query('select 1 from address_books where owner_id = $1 for update', [alice.id]);
  const answered: number[] = [];
  const puts = Array.from({ length: 5 }, (_, i) =>
    aliceCall('PUT', `${aliceBook}held-${i}.vcf`, card(`held-${i}`, `Held ${i}`), VCARD).then((res) => {
      answered.push(i);
      return res;
    }),
  );
  await until(async () => (await lockWaiters()) === 2 && answered.length === 2, 'two PUTs in the database and two answered');
  const refused = await Promise.all(answered.map((i) => puts[i]!));
  for (const res of refused) {
    t.equal(res.statusCode, 429);
    t.equal(res.headers['retry-after'], '1');
    t.equal(res.headers['content-type'], XML_TYPE);
    t.equal(res.body, errorBody('Too many of your requests are waiting for the database, retry in 1 seconds'));
  }

  const served = await bobCall('PUT', `${bobBook}second.vcf`, card('second', 'Bob Second'), VCARD);
  t.equal(served.statusCode, 201, "Bob's write does not wait behind Alice's");
  t.equal((await bobCall('GET', `${bobBook}first.vcf`)).statusCode, 200, "nor does Bob's read");
  t.equal(answered.length, 2, "Alice's other three still wait");

  await session.query('commit');
  const held = await Promise.all(puts.filter((_, i) => !answered.slice(0, 2).includes(i)));
  t.same(
    held.map((res) => res.statusCode),
    [201, 201, 201],
    'the two in the database and the one waiting for a place are written once the book is free',
  );
});

t.test('a CardDAV write past DB_STATEMENT_TIMEOUT_MS is 503 Retry-After 5 and writes nothing', { skip }, async (t) => {
  const app = await buildContactsApp(t, { env: { DB_STATEMENT_TIMEOUT_MS: '200' } });
  const user = await davUser(app);
  const call = davAs(app, user);
  const book = `/dav/addressbooks/${user.id}/contacts/`;
  t.equal((await call('PUT', `${book}first.vcf`, card('first', 'First'), VCARD)).statusCode, 201);
  const { session } = await lockingSession(t, app.config.databaseUrl!);

  // The PUT waits for the book's row, which this session holds, past the bound: PostgreSQL cancels it.
  await session.query('begin');
  await session.query('select 1 from address_books where owner_id = $1 for update', [user.id]);
  const res = await call('PUT', `${book}late.vcf`, card('late', 'Late'), VCARD);
  await session.query('commit');
  t.equal(res.statusCode, 503);
  t.equal(res.headers['retry-after'], '5');
  t.equal(res.headers['content-type'], XML_TYPE);
  t.equal(res.body, errorBody('Service unavailable: the request took too long in the database'));
  t.equal((await call('GET', `${book}late.vcf`)).statusCode, 404, 'nothing was written');
});
