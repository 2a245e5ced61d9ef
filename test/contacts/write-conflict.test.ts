/**
 * A write PostgreSQL aborts to break a deadlock is 503 with Retry-After 1 on both faces, and is not
 * applied (docs/operations.md, "Writing contacts by hand"). The deadlock is real: a hand-written
 * transaction holds the owner's address book, the service's write takes the contact's row and waits
 * for the book, then the transaction asks for that row. The hand-written session looks for a
 * deadlock after 10 s, the service's after PostgreSQL's default 1 s, so the service's is aborted.
 */
import t, { type Test } from 'tap';
import { errorBody } from '../../src/carddav/errors.js';
import { card, davAs, davUser } from '../carddav/dav-client.js';
import { backend, lockingSession, until } from '../helper.js';
import { as, buildContactsApp, contactBody, createContacts, createUser } from './fixtures.js';

const CONFLICT = 'Service unavailable: the write met a concurrent one and was not applied; retry';
const skip =
  (backend === 'embedded' && 'the embedded database has one session: no two transactions wait for each other') ||
  (backend === 'citus' && "Citus's distributed deadlock detection may cancel either transaction");

/**
 * Holds `ownerId`'s address book, lets `write` start and wait for it, then updates contact `id` by
 * hand: PostgreSQL aborts the write. Returns its answer once the hand-written transaction committed.
 */
async function deadlocked<T>(t: Test, databaseUrl: string, ownerId: number, id: number, write: () => Promise<T>): Promise<T> {
  const { session, lockWaiters } = await lockingSession(t, databaseUrl);
  await session.query('begin');
  await session.query(`set local deadlock_timeout = '10s'`);
  await session.query('select 1 from address_books where owner_id = $1 for update', [ownerId]);
  const answer = write();
  await until(async () => (await lockWaiters()) === 1, 'the write to wait for the address book');
  const handWrite = await session.query('update contacts set last_name = $1 where owner_id = $2 and id = $3', ['ByHand', ownerId, id]);
  t.equal(handWrite.rowCount, 1, 'the hand-written transaction goes on');
  await session.query('commit');
  return answer;
}

t.test('/api: a PATCH aborted by a deadlock is 503 Retry-After 1 and changes nothing', { skip }, async (t) => {
  const app = await buildContactsApp(t);
  const user = await createUser(app);
  const call = as(app, user);
  const [contact] = await createContacts(call, [contactBody({ first_name: 'Before' })]);

  const res = await deadlocked(t, app.config.databaseUrl!, user.id, contact!.id, () =>
    call('PATCH', `/api/contacts/${contact!.id}`, { first_name: 'After' }),
  );
  t.equal(res.statusCode, 503);
  t.equal(res.headers['retry-after'], '1');
  t.same(res.json(), { detail: CONFLICT });
  const after = await call('GET', `/api/contacts/${contact!.id}`);
  t.equal(after.statusCode, 200);
  t.match(after.json(), { first_name: 'Before', last_name: 'ByHand' }, 'the PATCH left nothing behind');
});

t.test('/dav: a PUT aborted by a deadlock is 503 Retry-After 1 and changes nothing', { skip }, async (t) => {
  const app = await buildContactsApp(t);
  const user = await davUser(app);
  const call = davAs(app, user);
  const href = `/dav/addressbooks/${user.id}/contacts/one.vcf`;
  const VCARD = { 'content-type': 'text/vcard' };
  t.equal((await call('PUT', href, card('one', 'Before'), VCARD)).statusCode, 201);
  const { id } = await app.db.selectFrom('contacts').select('id').where('owner_id', '=', user.id).executeTakeFirstOrThrow();

  const res = await deadlocked(t, app.config.databaseUrl!, user.id, id, () => call('PUT', href, card('one', 'After'), VCARD));
  t.equal(res.statusCode, 503);
  t.equal(res.headers['retry-after'], '1');
  t.equal(res.body, errorBody(CONFLICT));
  const after = await call('GET', href);
  t.equal(after.statusCode, 200);
  t.match(after.body, /\r\nFN:Before\r\n/, 'the PUT left nothing behind');
});
