/**
 * The SDK's Idempotency-Key and retries against the real service, through a real TCP proxy that
 * loses answers, cuts connections and refuses them for a while: a lost answer is retried with the
 * same key and answered once, refused connections are retried with backoff within the bounds,
 * "in progress" waits for its Retry-After, and answers that are no reason to retry come through.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import pg from 'pg';
import t, { type Test } from 'tap';
import { createContactsClient, login, type RetryOptions, tokenSession } from '../../sdk/src/index.js';
import { buildAccountsApp, verifiedUser } from '../auth/accounts.js';
import { backend } from '../helper.js';
import { answerDroppingProxy } from '../idempotency/answer-dropping-proxy.js';

const app = await buildAccountsApp(t);
const serviceUrl = await app.listen({ host: '127.0.0.1', port: 0 });
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

let counter = 0;
const contact = () => ({
  first_name: 'Ada',
  last_name: 'Retry',
  email: `ada.${++counter}.${Date.now()}@example.com`,
  phone: '+14155550123',
  birthday: '1990-12-10',
});

/** One attempt as it reached fetch: its key, what came back, and when it left. */
interface Attempt {
  path: string;
  key: string | null;
  outcome: number | 'network error';
  at: number;
}

/** A user logged in through a client that goes through its own proxy and records every attempt. */
async function harness(t: Test, retry?: RetryOptions | false) {
  const proxy = await answerDroppingProxy(t, Number(new URL(serviceUrl).port));
  const user = await verifiedUser(app);
  const session = tokenSession();
  const attempts: Attempt[] = [];
  const client = createContactsClient(proxy.url, session.getToken, {
    ...(retry === undefined ? { retry: { baseDelayMs: 20 } } : { retry }),
    fetch: async (request) => {
      const attempt: Attempt = {
        path: new URL(request.url).pathname,
        key: request.headers.get('Idempotency-Key'),
        outcome: 'network error',
        at: Date.now(),
      };
      attempts.push(attempt);
      const response = await fetch(request);
      attempt.outcome = response.status;
      return response;
    },
  });
  session.set((await login(client, { username: user.username, password: user.password })).data ?? null);
  attempts.length = 0;
  const contactsHeld = async () =>
    (await sql<{ n: number }>`select count(*)::int as n from contacts where owner_id = ${user.id}`.execute(app.db)).rows[0]!.n;
  return { proxy, client, attempts, user, contactsHeld };
}

t.test('a create whose answer is lost is sent again with its key, and answered with the first answer', async (t) => {
  const { proxy, client, attempts, contactsHeld } = await harness(t);
  proxy.dropAnswers(1);
  const body = contact();
  const created = await client.POST('/api/contacts/', { body });
  t.equal(created.response.status, 201);
  t.equal(created.response.headers.get('Idempotent-Replayed'), 'true', 'the service had written it the first time');
  t.match(created.data, body);
  t.same(
    attempts.map((a) => a.outcome),
    ['network error', 201],
  );
  t.match(attempts[0]!.key, UUID);
  t.equal(attempts[1]!.key, attempts[0]!.key, 'the retry carries the same key');
  t.equal(await contactsHeld(), 1, 'one contact');

  const firstKey = attempts[0]!.key;
  attempts.length = 0;
  for (let i = 0; i < 2; i++) t.equal((await client.POST('/api/contacts/', { body: contact() })).response.status, 201);
  t.equal(new Set([firstKey, ...attempts.map((a) => a.key)]).size, 3, 'each call has a key of its own');
});

t.test('an import whose answer is lost likewise', async (t) => {
  const { proxy, client, attempts, contactsHeld } = await harness(t);
  const csv = `first_name,last_name,email,phone,birthday\r\nAda,Lee,${contact().email},+14155550123,1990-01-02\r\nBad,Row,nope,+14155550123,1990-01-02\r\n`;
  proxy.dropAnswers(1);
  const imported = await client.POST('/api/contacts/import', {
    body: new TextEncoder().encode(csv),
    bodySerializer: (bytes) => bytes,
    headers: { 'Content-Type': 'text/csv' },
  });
  t.equal(imported.response.status, 200);
  t.equal(imported.response.headers.get('Idempotent-Replayed'), 'true');
  t.same(imported.data, { created: 1, errors: [{ entry: 2, detail: 'body/email must match format "email"' }] });
  t.same(
    attempts.map((a) => [a.path, a.outcome]),
    [
      ['/api/contacts/import', 'network error'],
      ['/api/contacts/import', 200],
    ],
  );
  t.equal(attempts[1]!.key, attempts[0]!.key);
  t.equal(await contactsHeld(), 1);
});

t.test('refused connections are retried with backoff until the service can be reached', async (t) => {
  const { proxy, client, attempts, contactsHeld } = await harness(t, { baseDelayMs: 100 });
  await proxy.pause();
  const resumed = sleep(500).then(() => proxy.resume());
  const created = await client.POST('/api/contacts/', { body: contact() });
  await resumed;
  t.equal(created.response.status, 201);
  t.equal(created.response.headers.get('Idempotent-Replayed'), null, 'the first attempts never reached it');
  const outcomes = attempts.map((a) => a.outcome);
  t.same(outcomes.slice(-1), [201]);
  t.ok(outcomes.length >= 3 && outcomes.slice(0, -1).every((o) => o === 'network error'), `attempts: ${outcomes.join(', ')}`);
  t.ok(
    attempts.every((a) => a.key === attempts[0]!.key),
    'all with one key',
  );
  // Waits of 50–100 ms, then 100–200, then 200–400: each at least half of twice the one before.
  for (let i = 2; i < attempts.length; i++) {
    const [before, wait] = [attempts[i - 1]!.at - attempts[i - 2]!.at, attempts[i]!.at - attempts[i - 1]!.at];
    t.ok(wait >= 100 * 2 ** (i - 2), `wait ${i}: ${wait} ms after ${before} ms`);
  }
  t.equal(await contactsHeld(), 1);
});

t.test('the retries are bounded: after them the call rejects with the network error', async (t) => {
  const { proxy, client, attempts } = await harness(t, { retries: 2, baseDelayMs: 10 });
  await proxy.pause();
  const failed = await client.POST('/api/contacts/', { body: contact() }).then(
    () => null,
    (error: Error) => error,
  );
  t.type(failed, TypeError, "fetch's network error");
  t.same(
    attempts.map((a) => a.outcome),
    ['network error', 'network error', 'network error'],
  );
});

t.test('answers that are no reason to retry come through at once; a key of its own is kept', async (t) => {
  const { client, attempts } = await harness(t);
  const body = contact();
  const mine = await client.POST('/api/contacts/', { body, params: { header: { 'Idempotency-Key': 'my-own-key' } } });
  t.equal(mine.response.status, 201);
  const duplicate = await client.POST('/api/contacts/', { body: { ...contact(), email: body.email } });
  t.equal(duplicate.response.status, 409);
  t.same(duplicate.error, { detail: 'Contact with this email already exists' });
  const reused = await client.POST('/api/contacts/', { body: contact(), params: { header: { 'Idempotency-Key': 'my-own-key' } } });
  t.equal(reused.response.status, 422);
  t.same(reused.error, { detail: 'Idempotency-Key reused with a different request' });
  const listed = await client.GET('/api/contacts/');
  t.equal(listed.response.status, 200);
  t.same(
    attempts.map((a) => [a.path, a.key === 'my-own-key' ? 'mine' : a.key === null ? 'none' : 'generated', a.outcome]),
    [
      ['/api/contacts/', 'mine', 201],
      ['/api/contacts/', 'generated', 409],
      ['/api/contacts/', 'mine', 422],
      ['/api/contacts/', 'none', 200],
    ],
    'one attempt each; reads carry no key',
  );
});

t.test('retry: false sends the key and never retries', async (t) => {
  const { proxy, client, attempts, contactsHeld } = await harness(t, false);
  proxy.dropAnswers(1);
  const lost = await client.POST('/api/contacts/', { body: contact() }).then(
    () => null,
    (error: Error) => error,
  );
  t.type(lost, TypeError);
  t.equal(attempts.length, 1);
  t.match(attempts[0]!.key, UUID);
  t.equal(await contactsHeld(), 1);
});

t.test(
  "409 in progress: the retry waits for its Retry-After, then gets the first request's answer",
  { skip: backend === 'embedded' && 'PGlite has one session: its transactions never overlap' },
  async (t) => {
    const { proxy, client, attempts, user, contactsHeld } = await harness(t);
    // A session of the test's own: the first attempt's create waits for the owner's address book,
    // locked here, inside its key's transaction.
    const session = new pg.Client({ connectionString: app.config.databaseUrl! });
    await session.connect();
    t.teardown(() => session.end());
    await session.query('insert into address_books (owner_id) values ($1) on conflict do nothing', [user.id]);
    await session.query('begin');
    await session.query('select from address_books where owner_id = $1 for update', [user.id]);
    const call = client.POST('/api/contacts/', { body: contact() });
    for (let waited = 0; ; waited += 10) {
      const { rows } = await session.query<{ n: number }>(
        'select count(*)::int as n from pg_stat_activity where pg_backend_pid() = any(pg_blocking_pids(pid))',
      );
      if (rows[0]!.n > 0) break;
      if (waited > 10_000) throw new Error('the create never waited for the lock');
      await sleep(10);
    }
    // Its answer will never come back; the service goes on with it.
    proxy.cutAll();
    for (let waited = 0; !attempts.some((a) => a.outcome === 409); waited += 10) {
      if (waited > 10_000) throw new Error(`no 409: ${JSON.stringify(attempts)}`);
      await sleep(10);
    }
    await session.query('commit');
    const created = await call;
    t.equal(created.response.status, 201);
    t.equal(created.response.headers.get('Idempotent-Replayed'), 'true');
    t.same(
      attempts.map((a) => a.outcome),
      ['network error', 409, 201],
    );
    t.ok(attempts[2]!.at - attempts[1]!.at >= 1000, `Retry-After: 1 waited (${attempts[2]!.at - attempts[1]!.at} ms)`);
    t.equal(await contactsHeld(), 1);
  },
);
