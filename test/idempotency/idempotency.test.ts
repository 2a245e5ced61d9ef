/**
 * Idempotency-Key on create and import (openapi.yaml, "Idempotent retries"), on both backends: the
 * stored answer sent again with nothing written, another request with the key, the key's scope
 * and form, concurrent requests with one key, expiry, the user's bounds and the purge, and a
 * create whose answer was lost on its way back.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import t from 'tap';
import { as, buildContactsApp, type Caller, contactBody, createUser } from '../contacts/fixtures.js';
import { backend } from '../helper.js';
import { answerDroppingProxy } from './answer-dropping-proxy.js';

const HOUR_MS = 3_600_000;
let clock = new Date('2026-06-01T12:00:00.000Z');
const QUOTA = 1004;
const app = await buildContactsApp(t, {
  now: () => clock,
  env: { CONTACTS_MAX_PER_USER: String(QUOTA), IDEMPOTENCY_KEYS_PER_USER: '3', IDEMPOTENCY_USER_BYTES: '150000' },
});

const IN_PROGRESS = JSON.stringify({ detail: 'A request with this Idempotency-Key is in progress' });
const REUSED = JSON.stringify({ detail: 'Idempotency-Key reused with a different request' });

const create = (call: Caller, key: string, body: unknown) => call('POST', '/api/contacts/', body, { 'idempotency-key': key });
const importCsv = (call: Caller, key: string, csv: string) =>
  call('POST', '/api/contacts/import', csv, { 'content-type': 'text/csv', 'idempotency-key': key });

/** A CSV import of a contact for each e-mail, then `invalid` entries whose e-mail is refused. */
function csvOf(emails: string[], invalid = 0): string {
  const rows = [...emails, ...Array<string>(invalid).fill('not-an-email')].map((email) => `Ann,Lee,${email},+14155550123,1990-01-02`);
  return ['first_name,last_name,email,phone,birthday', ...rows].join('\r\n') + '\r\n';
}

const freshEmail = () => contactBody().email as string;

async function contactsOf(ownerId: number): Promise<number> {
  const { rows } = await sql<{ n: number }>`select count(*)::int as n from contacts where owner_id = ${ownerId}`.execute(app.db);
  return rows[0]!.n;
}

async function keysOf(ownerId: number): Promise<string[]> {
  const rows = await app.db
    .selectFrom('idempotency_keys')
    .select(['operation', 'key'])
    .where('owner_id', '=', ownerId)
    .orderBy('id')
    .execute();
  return rows.map((row) => `${row.operation} ${row.key}`);
}

t.test('the same key and request: the first answer again, exactly, and nothing written', async (t) => {
  const user = await createUser(app);
  const call = as(app, user);
  const body = { ...contactBody(), additional_data: { b: 1, a: [1, { y: 2, x: 1 }] } };
  const first = await create(call, 'key-1', body);
  t.equal(first.statusCode, 201);
  t.equal(first.headers['idempotent-replayed'], undefined, 'the write itself is no replay');
  const id = first.json<{ id: number }>().id;
  t.equal(first.headers.location, `/api/contacts/${id}`);
  t.equal((await call('GET', '/api/contacts/')).headers['x-cache'], 'MISS');

  // The same JSON value with its keys in another order and other spacing, to the path without its slash.
  const reordered = `{ "additional_data": {"a": [1, {"x": 1, "y": 2}], "b": 1},\n${Object.entries(body)
    .filter(([name]) => name !== 'additional_data')
    .reverse()
    .map(([name, value]) => `"${name}" : ${JSON.stringify(value)}`)
    .join(',\n')} }`;
  const again = await call('POST', '/api/contacts', reordered, {
    'content-type': 'application/json; charset=utf-8',
    'idempotency-key': 'key-1',
  });
  t.equal(again.statusCode, 201);
  t.equal(again.body, first.body, 'the very body');
  t.equal(again.headers.location, first.headers.location);
  t.equal(again.headers.etag, first.headers.etag);
  t.equal(again.headers['idempotent-replayed'], 'true');
  t.equal(again.headers['content-type'], first.headers['content-type']);
  t.equal(await contactsOf(user.id), 1, 'one contact');
  t.same(await keysOf(user.id), ['createContact key-1']);
  t.equal((await call('GET', '/api/contacts/')).headers['x-cache'], 'HIT', 'a replay wrote nothing, so the cached reads stand');

  // A later write moves the contact's tag; a replay still answers the tag of the create, now stale.
  const patched = await call('PATCH', `/api/contacts/${id}`, { last_name: 'Later' }, { 'if-match': first.headers.etag as string });
  t.equal(patched.statusCode, 200);
  const stale = await create(call, 'key-1', body);
  t.equal(stale.headers.etag, first.headers.etag);
  t.equal(stale.body, first.body, 'the answer as it was');
  const refused = await call('PATCH', `/api/contacts/${id}`, { last_name: 'Again' }, { 'if-match': stale.headers.etag as string });
  t.equal(refused.statusCode, 412);
  t.equal(refused.body, JSON.stringify({ detail: 'Precondition Failed: the contact has changed' }));

  const csv = csvOf([freshEmail(), freshEmail()], 1);
  const imported = await importCsv(call, 'key-1', csv);
  t.equal(imported.statusCode, 200, 'the same key on the other operation is another key');
  t.equal(imported.headers['idempotent-replayed'], undefined);
  t.same(imported.json(), { created: 2, errors: [{ entry: 3, detail: 'body/email must match format "email"' }] });
  const importedAgain = await importCsv(call, 'key-1', csv);
  t.equal(importedAgain.statusCode, 200);
  t.equal(importedAgain.body, imported.body);
  t.equal(importedAgain.headers['idempotent-replayed'], 'true');
  t.equal(await contactsOf(user.id), 3);
  t.same(await keysOf(user.id), ['createContact key-1', 'importContacts key-1']);
});

t.test('the same key with another request: 422, nothing written', async (t) => {
  const user = await createUser(app);
  const call = as(app, user);
  const body = contactBody();
  t.equal((await create(call, 'key-2', body)).statusCode, 201);
  for (const changed of [
    { ...body, first_name: 'Other' },
    { ...body, additional_data: {} },
    { ...body, id: 7 },
  ]) {
    const refused = await create(call, 'key-2', changed);
    t.equal(refused.statusCode, 422);
    t.equal(refused.body, REUSED);
  }
  const csv = csvOf([freshEmail()]);
  t.equal((await importCsv(call, 'key-3', csv)).statusCode, 200);
  const otherBytes = await importCsv(call, 'key-3', csv.replace('Ann,', 'Anne,'));
  t.equal(otherBytes.statusCode, 422);
  t.equal(otherBytes.body, REUSED);
  const otherType = await call('POST', '/api/contacts/import', csv, { 'content-type': 'text/vcard', 'idempotency-key': 'key-3' });
  t.equal(otherType.statusCode, 422, 'the same bytes as another media type are another request');
  t.equal(otherType.body, REUSED);
  t.equal(await contactsOf(user.id), 2);
});

t.test("a key is its user's: another user's same key and request is another write", async (t) => {
  const [alice, bob] = [await createUser(app), await createUser(app)];
  const body = contactBody();
  const first = await create(as(app, alice), 'shared-key', body);
  const second = await create(as(app, bob), 'shared-key', body);
  t.equal(first.statusCode, 201);
  t.equal(second.statusCode, 201);
  t.equal(second.headers['idempotent-replayed'], undefined);
  t.not(second.json<{ id: number }>().id, first.json<{ id: number }>().id);
  t.equal(await contactsOf(alice.id), 1);
  t.equal(await contactsOf(bob.id), 1);
});

t.test('an error answer is not kept: the key is free for the next request', async (t) => {
  const user = await createUser(app);
  const call = as(app, user);
  const taken = contactBody();
  t.equal((await call('POST', '/api/contacts/', taken)).statusCode, 201);
  const duplicate = await create(call, 'key-4', { ...contactBody(), email: taken.email });
  t.equal(duplicate.statusCode, 409);
  t.equal(duplicate.body, JSON.stringify({ detail: 'Contact with this email already exists' }));
  const next = await create(call, 'key-4', contactBody());
  t.equal(next.statusCode, 201, 'another request with the key is no reuse: nothing was kept');
  t.equal(next.headers['idempotent-replayed'], undefined);
  const nothingNew = await importCsv(call, 'key-5', csvOf([taken.email as string]));
  t.same(nothingNew.json(), { created: 0, errors: [{ entry: 1, detail: 'Contact with this email already exists' }] });
  t.same(await keysOf(user.id), ['createContact key-4'], 'an import that created nothing stored nothing');
});

t.test('Idempotency-Key is 1 to 255 printable ASCII characters, else 422 naming it', async (t) => {
  const user = await createUser(app);
  const call = as(app, user);
  const pattern = 'header/idempotency-key must match pattern "^[ -~]+$"';
  for (const [key, detail] of [
    ['k'.repeat(256), 'header/idempotency-key must NOT have more than 255 characters'],
    ['', 'header/idempotency-key must NOT have fewer than 1 characters'],
    ['tab\tinside', pattern],
    ['caf\u00e9', pattern],
    ['del\u007f', pattern],
  ] as const) {
    const refused = await create(call, key, contactBody());
    t.equal(refused.statusCode, 422, JSON.stringify(key));
    t.equal(refused.body, JSON.stringify({ detail }));
  }
  const importRefused = await importCsv(call, 'k'.repeat(256), csvOf([freshEmail()]));
  t.equal(importRefused.statusCode, 422);
  t.equal(importRefused.body, JSON.stringify({ detail: 'header/idempotency-key must NOT have more than 255 characters' }));
  t.equal(await contactsOf(user.id), 0, 'nothing was written');

  const longest = ` !"#$%&'()*+,-./09:;<=>?@AZ[\\]^_\`az{|}~`.padEnd(255, 'x');
  t.equal((await create(call, longest, contactBody())).statusCode, 201, '255 characters of any printable kind');
  t.same(await keysOf(user.id), [`createContact ${longest}`]);
});

t.test('requests with one key at once: one write; the others in progress or the replay', async (t) => {
  const user = await createUser(app);
  const call = as(app, user);
  const body = contactBody();
  const answers = await Promise.all(Array.from({ length: 8 }, () => create(call, 'together', body)));
  const fresh = answers.filter((res) => res.statusCode === 201 && res.headers['idempotent-replayed'] === undefined);
  t.equal(fresh.length, 1, 'one write');
  const replays = answers.filter((res) => res.headers['idempotent-replayed'] === 'true');
  const inProgress = answers.filter((res) => res.statusCode === 409);
  t.equal(replays.length + inProgress.length, 7);
  for (const res of replays) {
    t.equal(res.statusCode, 201);
    t.equal(res.body, fresh[0]!.body);
    t.equal(res.headers.etag, fresh[0]!.headers.etag);
  }
  for (const res of inProgress) {
    t.equal(res.body, IN_PROGRESS);
    t.equal(res.headers['retry-after'], '1');
  }
  t.comment(`8 at once: ${replays.length} replays, ${inProgress.length} in progress`);
  t.equal(await contactsOf(user.id), 1);
  t.same(await keysOf(user.id), ['createContact together']);
});

t.test(
  'while the first request with a key is written, the same key is 409 at once; after its commit, the replay',
  { skip: backend === 'embedded' && 'PGlite has one session: its transactions never overlap' },
  async (t) => {
    const user = await createUser(app);
    const call = as(app, user);
    for (let i = 0; i < 5; i++) t.equal((await call('POST', '/api/contacts/', contactBody())).statusCode, 201);
    const body = contactBody();
    await app.db.connection().execute(async (session) => {
      // A create waits for the owner's address book, locked here, inside the key's transaction.
      await sql`begin`.execute(session);
      await sql`select from address_books where owner_id = ${user.id} for update`.execute(session);
      const first = create(call, 'slow', body);
      for (let waited = 0; ; waited += 10) {
        const { rows } = await sql<{
          n: number;
        }>`select count(*)::int as n from pg_stat_activity where pg_backend_pid() = any(pg_blocking_pids(pid))`.execute(session);
        if (rows[0]!.n > 0) break;
        if (waited > 10_000) throw new Error('the keyed create never waited for the lock');
        await sleep(10);
      }
      const second = await create(call, 'slow', body);
      t.equal(second.statusCode, 409);
      t.equal(second.body, IN_PROGRESS);
      t.equal(second.headers['retry-after'], '1');
      const reused = await create(call, 'slow', contactBody());
      t.equal(reused.statusCode, 409, 'in progress comes before any comparison: the first may still fail');
      await sql`commit`.execute(session);
      const written = await first;
      t.equal(written.statusCode, 201);
      const third = await create(call, 'slow', body);
      t.equal(third.statusCode, 201);
      t.equal(third.headers['idempotent-replayed'], 'true');
      t.equal(third.body, written.body);
    });
    t.equal(await contactsOf(user.id), 6);
  },
);

t.test('a create accepted before is replayed even at the quota', async (t) => {
  const user = await createUser(app);
  const call = as(app, user);
  const seeded = await call('POST', '/api/contacts/import', csvOf(Array.from({ length: QUOTA - 2 }, freshEmail)), {
    'content-type': 'text/csv',
  });
  t.equal(seeded.json<{ created: number }>().created, QUOTA - 2);
  const bodies = [contactBody(), contactBody()];
  const answers = [await create(call, 'q-1', bodies[0]), await create(call, 'q-2', bodies[1])];
  t.same(
    answers.map((res) => res.statusCode),
    [201, 201],
  );
  const full = await create(call, 'q-3', contactBody());
  t.equal(full.statusCode, 409);
  t.equal(full.body, JSON.stringify({ detail: `Contact limit reached: a user may have at most ${QUOTA} contacts` }));
  const replay = await create(call, 'q-1', bodies[0]);
  t.equal(replay.statusCode, 201);
  t.equal(replay.headers['idempotent-replayed'], 'true');
  t.equal(replay.body, answers[0]!.body);
  t.equal(await contactsOf(user.id), QUOTA);
});

t.test('a key is kept 24 hours; then the same request is written again', async (t) => {
  const user = await createUser(app);
  const call = as(app, user);
  const body = contactBody();
  const start = clock;
  const first = await create(call, 'daily', body);
  const id = first.json<{ id: number }>().id;
  // Deleted, so that the same request can create it again.
  t.equal((await call('DELETE', `/api/contacts/${id}`)).statusCode, 200);

  clock = new Date(start.getTime() + 24 * HOUR_MS - 1);
  const kept = await create(call, 'daily', body);
  t.equal(kept.headers['idempotent-replayed'], 'true', 'a millisecond before 24 hours: the stored answer');
  t.equal(kept.body, first.body, 'as it was, though the contact is gone');
  t.equal(await contactsOf(user.id), 0);

  clock = new Date(start.getTime() + 24 * HOUR_MS);
  const anew = await create(call, 'daily', body);
  t.equal(anew.statusCode, 201);
  t.equal(anew.headers['idempotent-replayed'], undefined, 'at 24 hours the key is new again');
  t.not(anew.json<{ id: number }>().id, id);
  t.equal(await contactsOf(user.id), 1);
  t.same(await keysOf(user.id), ['createContact daily'], 'the expired row was replaced');
  const again = await create(call, 'daily', body);
  t.equal(again.body, anew.body, 'and the new answer is the one kept');
});

t.test("past the user's bounds the oldest keys go first, never the newest; the user's expired keys are purged", async (t) => {
  const user = await createUser(app);
  const call = as(app, user);
  const bodies = Array.from({ length: 4 }, () => contactBody());
  for (const [i, body] of bodies.entries()) t.equal((await create(call, `c${i}`, body)).statusCode, 201);
  // An answer over 64 KiB checks the bounds at once: 1,500 entries' errors.
  const large = await importCsv(call, 'i1', csvOf([freshEmail()], 1500));
  t.equal(large.statusCode, 200);
  t.ok(large.body.length > 65_536 && large.body.length < 150_000, `an answer of ${large.body.length} bytes`);
  t.same(await keysOf(user.id), ['createContact c2', 'createContact c3', 'importContacts i1'], 'IDEMPOTENCY_KEYS_PER_USER=3');

  const larger = await importCsv(call, 'i2', csvOf([freshEmail()], 2500));
  t.ok(larger.body.length > 150_000, `an answer of ${larger.body.length} bytes, alone over IDEMPOTENCY_USER_BYTES`);
  t.same(await keysOf(user.id), ['importContacts i2'], 'the bytes bound drops every older key, and keeps the newest');
  t.equal((await importCsv(call, 'i2', csvOf([freshEmail()], 2500))).statusCode, 422, 'it is still the key of its request');

  const forgotten = await create(call, 'c0', bodies[0]);
  t.equal(forgotten.statusCode, 409, 'a forgotten key is handled anew: its e-mail is taken by its own first write');
  t.equal(forgotten.body, JSON.stringify({ detail: 'Contact with this email already exists' }));

  clock = new Date(clock.getTime() + 24 * HOUR_MS);
  const other = await createUser(app);
  t.equal((await importCsv(as(app, other), 'purging', csvOf([freshEmail()], 1500))).statusCode, 200);
  t.equal((await importCsv(call, 'purging', csvOf([freshEmail()], 1500))).statusCode, 200);
  const left = await app.db
    .selectFrom('idempotency_keys')
    .select(['owner_id', 'key'])
    .where('owner_id', 'in', [user.id, other.id])
    .orderBy('owner_id')
    .execute();
  t.same(
    left,
    [
      { owner_id: user.id, key: 'purging' },
      { owner_id: other.id, key: 'purging' },
    ],
    "a user's housekeeping purges that user's expired keys (one shard on Citus)",
  );
});

t.test('a create whose answer was lost on the way back: the retry gets it, and one contact exists', async (t) => {
  const user = await createUser(app);
  const address = await app.listen({ host: '127.0.0.1', port: 0 });
  const proxy = await answerDroppingProxy(t, Number(new URL(address).port));
  const send = () =>
    fetch(`${proxy.url}/api/contacts/`, {
      method: 'POST',
      headers: { authorization: `Bearer ${user.token}`, 'content-type': 'application/json', 'idempotency-key': 'lost' },
      body: JSON.stringify(body),
    });
  const body = contactBody();
  proxy.dropAnswers(1);
  const lost = await send().then(
    () => 'answered',
    (error: Error) => error.name,
  );
  t.equal(lost, 'TypeError', 'the client saw the connection cut, no answer');
  t.equal(proxy.dropped, 1);
  t.equal(await contactsOf(user.id), 1, 'the create was committed all the same');

  const retried = await send();
  t.equal(retried.status, 201);
  t.equal(retried.headers.get('idempotent-replayed'), 'true');
  const contact = (await retried.json()) as { id: number; email: string };
  t.equal(contact.email, body.email);
  t.equal(retried.headers.get('location'), `/api/contacts/${contact.id}`);
  t.equal(await contactsOf(user.id), 1);
});
