/**
 * A write PostgreSQL aborts to break a deadlock is 503 with Retry-After 1, and is not applied
 * (docs/operations.md, "Writing contacts by hand"). The deadlock is real: a hand-written transaction
 * holds the owner's address book, the API's PATCH takes the contact's row and waits for the book,
 * then the transaction asks for that row. The embedded database has one session: it cannot deadlock.
 */
import pg from 'pg';
import t from 'tap';
import { backend, LOCK_WAITERS_SQL } from '../helper.js';
import { as, buildContactsApp, contactBody, createContacts, createUser } from './fixtures.js';

async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`timed out waiting for ${what}`);
}

t.test(
  'a write aborted by a deadlock is 503 Retry-After 1 and changes nothing',
  { skip: backend === 'embedded' && 'the embedded database has one session: no two transactions wait for each other' },
  async (t) => {
    const app = await buildContactsApp(t);
    const user = await createUser(app);
    const call = as(app, user);
    const [contact] = await createContacts(call, [contactBody({ first_name: 'Before' })]);
    const session = new pg.Client({ connectionString: app.config.databaseUrl! });
    await session.connect();
    t.teardown(() => session.end());
    const watcher = new pg.Client({ connectionString: app.config.databaseUrl! });
    await watcher.connect();
    t.teardown(() => watcher.end());
    const lockWaiters = async () => (await watcher.query<{ n: number }>(LOCK_WAITERS_SQL)).rows[0]!.n;

    // This session checks for a deadlock only after 10 s, the API's after PostgreSQL's default 1 s:
    // the API's transaction is the one aborted.
    await session.query('begin');
    await session.query(`set local deadlock_timeout = '10s'`);
    await session.query('select 1 from address_books where owner_id = $1 for update', [user.id]);
    const patch = call('PATCH', `/api/contacts/${contact!.id}`, { first_name: 'After' });
    await until(async () => (await lockWaiters()) === 1, 'the PATCH to wait for the address book');
    const handWrite = session.query('update contacts set last_name = $1 where owner_id = $2 and id = $3', ['ByHand', user.id, contact!.id]);

    const res = await patch;
    t.equal(res.statusCode, 503);
    t.equal(res.headers['retry-after'], '1');
    t.same(res.json(), { detail: 'Service unavailable: the write met a concurrent one and was not applied; retry' });
    t.equal((await handWrite).rowCount, 1, 'the hand-written transaction goes on');
    await session.query('commit');

    const after = await call('GET', `/api/contacts/${contact!.id}`);
    t.equal(after.statusCode, 200);
    t.match(after.json(), { first_name: 'Before', last_name: 'ByHand' }, 'the PATCH left nothing behind');
  },
);
