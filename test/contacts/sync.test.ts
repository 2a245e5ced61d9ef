/**
 * Incremental sync (openapi.yaml, `GET /api/contacts/sync`): full sync pages, deltas of creates, updates
 * (each once, latest state) and deletes, paging, limits, tokens (tampered, foreign, expired), the
 * retention of tombstones, and writes landing between the pages of a sync.
 */
import type { LightMyRequestResponse } from 'fastify';
import { sql } from 'kysely';
import { createHmac } from 'node:crypto';
import pg from 'pg';
import t, { type Test } from 'tap';
import { encodeSyncToken } from '../../src/contacts/sync-token.js';
import { backend, LOCK_WAITERS_SQL, TEST_JWT_SECRET } from '../helper.js';
import { as, buildContactsApp, type Caller, contactBody, createContacts, createUser, type TestUser, tombstoneCount } from './fixtures.js';

const DAY_MS = 86_400_000;
const INVALID = { detail: 'Invalid sync token' };
const EXPIRED = { detail: 'Sync token expired; start a full sync' };
const TOKEN = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

// The service's clock starts at the database's (tombstones are stamped by the database) and moves on demand.
const start = Date.now();
let clock = new Date(start);
const app = await buildContactsApp(t, { now: () => clock });

type Contact = Record<string, any> & { id: number };
interface SyncPage {
  contacts: Contact[];
  deleted: number[];
  next_token: string;
  has_more: boolean;
}

async function newUser(): Promise<{ user: TestUser; call: Caller }> {
  const user = await createUser(app);
  return { user, call: as(app, user) };
}

const syncUrl = (token?: string, limit?: number) => {
  const params = new URLSearchParams();
  if (token !== undefined) params.set('token', token);
  if (limit !== undefined) params.set('limit', String(limit));
  return `/api/contacts/sync${params.size > 0 ? `?${params}` : ''}`;
};

async function page(call: Caller, token?: string, limit?: number): Promise<SyncPage> {
  const res = await call('GET', syncUrl(token, limit));
  if (res.statusCode !== 200) throw new Error(`sync: ${res.statusCode} ${res.body}`);
  return res.json();
}

/** A client's copy: contacts put, deleted ids removed, page after page. */
class Replica {
  readonly contacts = new Map<number, Contact>();
  token: string | undefined;
  pages = 0;
  constructor(readonly call: Caller) {}
  apply(p: SyncPage): void {
    for (const contact of p.contacts) this.contacts.set(contact.id, contact);
    for (const id of p.deleted) this.contacts.delete(id);
    this.token = p.next_token;
    this.pages++;
  }
  /** Pages until has_more is false: one round. */
  async round(limit?: number): Promise<SyncPage[]> {
    const pages: SyncPage[] = [];
    for (;;) {
      const p = await page(this.call, this.token, limit);
      pages.push(p);
      this.apply(p);
      if (!p.has_more) return pages;
    }
  }
  sorted(): Contact[] {
    return [...this.contacts.values()].sort((a, b) => a.id - b.id);
  }
}

/**
 * What a delta tells a client that it does not hold yet: contacts new to it or in another state,
 * and deleted ids it still has. A delta may repeat what the client holds (harmless) only when a
 * write landed while its round was read; the tests below check that a quiet one holds nothing else.
 */
function news(replica: Replica, delta: Pick<SyncPage, 'contacts' | 'deleted'>): { contacts: Contact[]; deleted: number[] } {
  const ids = delta.contacts.map((c) => c.id);
  if (new Set(ids).size !== ids.length) throw new Error(`a contact twice in one page: ${ids}`);
  return {
    contacts: delta.contacts.filter((c) => JSON.stringify(replica.contacts.get(c.id)) !== JSON.stringify(c)),
    deleted: delta.deleted.filter((id) => replica.contacts.has(id)),
  };
}

/** Every contact of the user, as the list answers it. */
async function serverContacts(call: Caller): Promise<Contact[]> {
  return (await call('GET', '/api/contacts/?limit=1000')).json();
}

function exactError(t: Test, res: LightMyRequestResponse, status: number, body: unknown, message: string): void {
  t.equal(res.statusCode, status, `${message}: ${status}`);
  t.strictSame(res.json(), body, `${message}: detail`);
}

t.test('a full sync of nothing: one empty page and a token', async (t) => {
  const { call } = await newUser();
  const res = await call('GET', '/api/contacts/sync');
  t.equal(res.statusCode, 200);
  t.match(res.headers['content-type'], /^application\/json/);
  t.notOk('etag' in res.headers, 'not a cached, tagged read');
  t.notOk('x-cache' in res.headers);
  const body = res.json();
  t.strictSame(Object.keys(body), ['contacts', 'deleted', 'next_token', 'has_more']);
  t.strictSame(body.contacts, []);
  t.strictSame(body.deleted, []);
  t.match(body.next_token, TOKEN);
  t.equal(body.has_more, false);
  const delta = await page(call, body.next_token);
  t.strictSame(
    { ...delta, next_token: 'x' },
    { contacts: [], deleted: [], next_token: 'x', has_more: false },
    'and an empty delta after it',
  );
});

t.test('full sync: pages of every contact in id order, has_more until the last, then deltas', async (t) => {
  const { call } = await newUser();
  const { call: other } = await newUser();
  await createContacts(other, [contactBody(), contactBody()]);
  const created = await createContacts(
    call,
    Array.from({ length: 5 }, () => contactBody()),
  );

  const p1 = await page(call, undefined, 2);
  t.strictSame(p1.contacts, created.slice(0, 2), 'page 1: the first two, exactly as the API answers them');
  t.strictSame(p1.deleted, []);
  t.equal(p1.has_more, true);
  const p2 = await page(call, p1.next_token, 2);
  t.strictSame(p2.contacts, created.slice(2, 4), 'page 2');
  t.equal(p2.has_more, true);
  const p3 = await page(call, p2.next_token, 2);
  t.strictSame(p3.contacts, created.slice(4), 'page 3: the last one');
  t.equal(p3.has_more, false, 'has_more is false on the last page');
  const replica = new Replica(call);
  for (const p of [p1, p2, p3]) replica.apply(p);
  const none = await replica.round();
  t.strictSame(
    news(replica, { contacts: none.flatMap((p) => p.contacts), deleted: none.flatMap((p) => p.deleted) }),
    { contacts: [], deleted: [] },
    'then a delta with nothing new',
  );
  t.strictSame(
    none.map((p) => ({ ...p, next_token: '' })),
    [{ contacts: [], deleted: [], next_token: '', has_more: false }],
    'nothing at all',
  );

  const exact = await page(call, undefined, 5);
  t.equal(exact.contacts.length, 5);
  t.equal(exact.has_more, false, 'a page that holds exactly the rest has no more after it');
  const exactPair = [await page(call, undefined, 4)];
  exactPair.push(await page(call, exactPair[0]!.next_token, 4));
  t.strictSame(
    exactPair.map((p) => [p.contacts.length, p.has_more]),
    [
      [4, true],
      [1, false],
    ],
  );

  // The default limit is 100.
  const { call: many } = await newUser();
  const hundredAndOne = await createContacts(
    many,
    Array.from({ length: 101 }, () => contactBody()),
  );
  const first = await page(many);
  t.equal(first.contacts.length, 100, 'default limit: 100');
  t.equal(first.has_more, true);
  const second = await page(many, first.next_token);
  t.strictSame(second.contacts, hundredAndOne.slice(100));
  t.equal(second.has_more, false);
  const max = await page(many, undefined, 1000);
  t.equal(max.contacts.length, 101, 'limit 1000');
});

t.test('delta: creates and updates once each in their latest state, deletes by id', async (t) => {
  const { call } = await newUser();
  const [c1, c2, c3, c4, c5] = await createContacts(
    call,
    Array.from({ length: 5 }, () => contactBody()),
  );
  const replica = new Replica(call);
  await replica.round();
  t.strictSame(replica.sorted(), [c1, c2, c3, c4, c5]);

  clock = new Date(clock.getTime() + 1000);
  const [c6] = await createContacts(call, [contactBody({ first_name: 'New' })]);
  await call('PATCH', `/api/contacts/${c1!.id}`, { first_name: 'Once' });
  const c1Latest = (await call('PATCH', `/api/contacts/${c1!.id}`, { first_name: 'Twice' })).json();
  const c3Latest = (await call('PUT', `/api/contacts/${c3!.id}`, { ...contactBody({ email: c3!.email }), last_name: 'Put' })).json();
  const c4Latest = (await call('PATCH', `/api/contacts/${c4!.id}`, { first_name: c4!.first_name })).json();
  t.not(c4Latest.updated_at, c4!.updated_at, 'a PATCH with unchanged values is a write');
  t.equal((await call('PATCH', `/api/contacts/${c5!.id}`, {})).statusCode, 200, 'an empty PATCH writes nothing');
  await call('DELETE', `/api/contacts/${c2!.id}`);
  const [c7] = await createContacts(call, [contactBody()]);
  await call('DELETE', `/api/contacts/${c7!.id}`);

  const delta = await page(call, replica.token);
  t.strictSame(
    news(replica, delta).contacts,
    [c1Latest, c3Latest, c4Latest, c6],
    'each written contact once, latest state, by id; not the untouched c5',
  );
  t.strictSame(news(replica, delta).deleted, [c2!.id], 'the deleted id');
  t.ok(delta.deleted.includes(c7!.id), 'and that of a contact created and deleted since');
  t.strictSame(delta.contacts, [c1Latest, c3Latest, c4Latest, c6], 'nothing else');
  t.strictSame(delta.deleted, [c2!.id, c7!.id], 'nothing else, in the order of the deletions');
  t.equal(delta.has_more, false);
  replica.apply(delta);
  t.strictSame(replica.sorted(), await serverContacts(call), "the client's copy is the server's");

  const empty = await page(call, replica.token);
  t.strictSame(news(replica, empty), { contacts: [], deleted: [] }, 'nothing since: no news');
  t.strictSame([empty.contacts, empty.deleted, empty.has_more], [[], [], false], 'an empty delta');
  replica.apply(empty);
  const emptyAgain = await page(call, replica.token);
  t.strictSame(news(replica, emptyAgain), { contacts: [], deleted: [] }, 'and again');
});

t.test('delta pages: limit counts contacts and deleted ids together; has_more until the round is read', async (t) => {
  const { call } = await newUser();
  const created = await createContacts(
    call,
    Array.from({ length: 6 }, () => contactBody()),
  );
  const replica = new Replica(call);
  await replica.round();
  for (const contact of created.slice(0, 3)) await call('PATCH', `/api/contacts/${contact.id}`, { last_name: 'Paged' });
  for (const contact of created.slice(3, 5)) await call('DELETE', `/api/contacts/${contact.id}`);

  const before = new Replica(call);
  for (const [id, contact] of replica.contacts) before.contacts.set(id, contact);
  const pages = await replica.round(1);
  t.strictSame(
    pages.map((p) => p.contacts.length + p.deleted.length).filter((n) => n !== 1),
    [],
    'one change a page',
  );
  t.strictSame(
    pages.map((p) => p.has_more),
    [...pages.slice(1).map(() => true), false],
    'has_more on all but the last',
  );
  const told = news(before, { contacts: pages.flatMap((p) => p.contacts), deleted: pages.flatMap((p) => p.deleted) });
  t.strictSame(
    told.contacts.map((c) => c.id),
    created.slice(0, 3).map((c) => c.id),
    'the updates, in write order',
  );
  t.strictSame(
    told.deleted,
    created.slice(3, 5).map((c) => c.id),
    'the deletions',
  );
  t.equal(pages.length, 5, 'five changes, five pages');
  t.strictSame(replica.sorted(), await serverContacts(call));

  for (const contact of created.slice(0, 2)) await call('PATCH', `/api/contacts/${contact.id}`, { last_name: 'Again' });
  const [two, ...rest] = await replica.round(2);
  t.equal(two!.contacts.length, 2, 'a page that holds exactly the round');
  t.equal(two!.has_more, false, 'has no more after it');
  t.equal(rest.length, 0);
});

t.test("only the user's own changes, and a direct SQL write is seen too", async (t) => {
  const { user: aliceUser, call: alice } = await newUser();
  const { call: bob } = await newUser();
  const [mine] = await createContacts(alice, [contactBody()]);
  const replica = new Replica(alice);
  await replica.round();
  const [bobs] = await createContacts(bob, [contactBody()]);
  await bob('PATCH', `/api/contacts/${bobs!.id}`, { first_name: 'Bob' });
  await bob('DELETE', `/api/contacts/${bobs!.id}`);
  const quiet = await page(alice, replica.token);
  t.strictSame(
    quiet.contacts.filter((c) => c.id !== mine!.id),
    [],
    "another user's writes are not alice's changes",
  );
  t.strictSame(quiet.deleted, []);

  // A tool that writes the table directly (psql, a migration) is seen by the triggers.
  await sql`update contacts set first_name = 'Direct', updated_at = ${new Date(clock.getTime() + 1000)}
             where owner_id = ${aliceUser.id} and id = ${mine!.id}`.execute(app.db);
  const direct = await page(alice, replica.token);
  t.strictSame(
    direct.contacts.map((c) => [c.id, c.first_name]),
    [[mine!.id, 'Direct']],
  );
  await sql`delete from contacts where owner_id = ${aliceUser.id} and id = ${mine!.id}`.execute(app.db);
  const deleted = await page(alice, direct.next_token);
  t.strictSame([deleted.contacts, deleted.deleted], [[], [mine!.id]]);
});

t.test('limit: 1 to 1000, anything else 422', async (t) => {
  const { call } = await newUser();
  const cases: [string, string][] = [
    ['0', 'querystring/limit must be >= 1'],
    ['-1', 'querystring/limit must be >= 1'],
    ['1001', 'querystring/limit must be <= 1000'],
    ['1.5', 'querystring/limit must be integer'],
    ['many', 'querystring/limit must be integer'],
  ];
  for (const [limit, detail] of cases)
    exactError(t, await call('GET', `/api/contacts/sync?limit=${limit}`), 422, { detail }, `limit=${limit}`);
  const token = (await page(call)).next_token;
  exactError(
    t,
    await call('GET', `/api/contacts/sync?token=${token}&limit=0`),
    422,
    { detail: 'querystring/limit must be >= 1' },
    'limit=0 with a token',
  );
  t.equal((await call('GET', '/api/contacts/sync?limit=1')).statusCode, 200, 'limit=1');
  t.equal((await call('GET', '/api/contacts/sync?limit=1000')).statusCode, 200, 'limit=1000');
  exactError(
    t,
    await call('GET', '/api/contacts/sync?token='),
    422,
    { detail: 'querystring/token must NOT have fewer than 1 characters' },
    'an empty token',
  );
  exactError(
    t,
    await app.inject({ method: 'GET', url: '/api/contacts/sync?limit=0' }),
    401,
    { detail: 'Not authenticated' },
    'no access token, bad limit',
  );
});

t.test('tokens: malformed, tampered, signed with another key or issued to another user are 400', async (t) => {
  const { user, call } = await newUser();
  const { call: bob } = await newUser();
  await createContacts(call, [contactBody(), contactBody(), contactBody()]);
  const full = await page(call, undefined, 1);
  const delta = (await new Replica(call).round()).at(-1)!.next_token;
  const bobsToken = (await page(bob)).next_token;

  const [payload, mac] = delta.split('.') as [string, string];
  const { u: _owner, ...claims } = JSON.parse(Buffer.from(payload, 'base64url').toString());
  const reencoded = (changes: Record<string, unknown>) =>
    Buffer.from(JSON.stringify({ u: user.id, ...claims, ...changes })).toString('base64url');
  const flip = (text: string, at: number) => text.slice(0, at) + (text[at] === 'A' ? 'B' : 'A') + text.slice(at + 1);
  const state = (changes: Record<string, unknown>) =>
    encodeSyncToken(TEST_JWT_SECRET, user.id, {
      phase: 'delta',
      since: '1',
      sinceAt: clock.getTime(),
      after: null,
      next: null,
      nextAt: null,
      ...changes,
    });

  const bad: [string, string][] = [
    ['garbage', 'garbage'],
    ['no signature', `${payload}.`],
    ['only a signature', `.${mac}`],
    ['three parts', `${delta}.x`],
    ['payload altered, signature kept', `${reencoded({ since: '1' })}.${mac}`],
    ['another owner claimed, signature kept', `${reencoded({ u: user.id + 1 })}.${mac}`],
    ['a byte of the payload flipped', `${flip(payload, 5)}.${mac}`],
    ['a byte of the signature flipped', `${payload}.${flip(mac, 3)}`],
    ['a short signature', `${payload}.${mac.slice(0, 10)}`],
    ['signed with another secret', encodeSyncToken('another-secret-that-is-at-least-32-characters', user.id, claims)],
    ["bob's token", bobsToken],
    ["alice's token signed for bob's id", encodeSyncToken(TEST_JWT_SECRET, user.id + 1, claims)],
    ['a signed token of an unknown phase', state({ phase: 'other' })],
    ['a signed token whose frontier is no position', state({ since: 'x1' })],
    ['a signed token with a bad position', state({ after: { position: '5', id: -1 } })],
    ['a signed token whose change is named as before positions', state({ after: { xid: '5', id: 1 } })],
    ['a signed token with half a next round', state({ next: '7', nextAt: null })],
  ];
  for (const [name, token] of bad) exactError(t, await call('GET', syncUrl(token)), 400, INVALID, name);
  exactError(t, await bob('GET', syncUrl(delta)), 400, INVALID, "alice's delta token used by bob");
  exactError(t, await bob('GET', syncUrl(full.next_token)), 400, INVALID, "alice's full-sync token used by bob");
  t.equal((await call('GET', syncUrl(delta))).statusCode, 200, 'the untouched token still works');
  t.equal((await call('GET', syncUrl(full.next_token))).statusCode, 200, 'and so does the full-sync one');
});

t.test('a token older than SYNC_TOMBSTONE_DAYS is 410; a full sync starts again', async (t) => {
  const { user, call } = await newUser();
  const [contact] = await createContacts(call, [contactBody(), contactBody()]);
  const issuedAt = clock.getTime();
  const fullPage = await page(call, undefined, 1);
  const replica = new Replica(call);
  await replica.round();
  const token = replica.token!;
  t.teardown(() => {
    clock = new Date(issuedAt);
  });

  clock = new Date(issuedAt + 30 * DAY_MS);
  t.equal((await call('GET', syncUrl(token))).statusCode, 200, 'exactly 30 days old: still good');
  clock = new Date(issuedAt + 30 * DAY_MS + 1);
  exactError(t, await call('GET', syncUrl(token)), 410, EXPIRED, '30 days and 1 ms');
  exactError(t, await call('GET', syncUrl(fullPage.next_token)), 410, EXPIRED, 'a full sync half done, as old');
  exactError(t, await call('GET', syncUrl(token, 0)), 422, { detail: 'querystring/limit must be >= 1' }, 'a bad limit is 422 first');

  const crafted = encodeSyncToken(TEST_JWT_SECRET, user.id, {
    phase: 'delta',
    since: '1',
    sinceAt: clock.getTime() - 31 * DAY_MS,
    after: null,
    next: null,
    nextAt: null,
  });
  exactError(t, await call('GET', syncUrl(crafted)), 410, EXPIRED, 'a crafted token 31 days old');
  const foreignOld = encodeSyncToken(TEST_JWT_SECRET, user.id + 1, {
    phase: 'delta',
    since: '1',
    sinceAt: clock.getTime() - 31 * DAY_MS,
    after: null,
    next: null,
    nextAt: null,
  });
  exactError(t, await call('GET', syncUrl(foreignOld)), 400, INVALID, "another user's old token is invalid, not expired");

  const again = new Replica(call);
  await again.round();
  t.strictSame(again.sorted(), await serverContacts(call), 'a new full sync works');
  t.equal(again.contacts.get(contact!.id)?.id, contact!.id);
});

t.test('tombstones are kept for the retention and purged after it', async (t) => {
  const { call } = await newUser();
  const [gone, kept] = await createContacts(call, [contactBody(), contactBody()]);
  t.teardown(() => {
    clock = new Date(start);
  });
  clock = new Date();
  const replica = new Replica(call);
  await replica.round();
  await call('DELETE', `/api/contacts/${gone!.id}`);
  t.equal(await tombstoneCount(app, gone!.id), 1, 'a deletion leaves a tombstone');

  clock = new Date(Date.now() + 29 * DAY_MS);
  const late = await page(call, replica.token);
  t.strictSame(late.deleted, [gone!.id], '29 days later the deletion is still told');
  t.equal(await tombstoneCount(app, gone!.id), 1, 'and remembered');

  clock = new Date(Date.now() + 32 * DAY_MS);
  await page(call);
  t.equal(await tombstoneCount(app, gone!.id), 0, 'past the retention, a sync purges it');
  t.equal(await tombstoneCount(app, kept!.id), 0, 'a contact never deleted has none');
});

t.test('no deletion is lost to clock skew between instances near the end of the retention', async (t) => {
  // Two instances whose clocks differ by three minutes, played by one clock that goes back: the
  // instance ahead purges what it thinks is old, the one behind still accepts the token that needs it.
  const { call } = await newUser();
  const [doomed] = await createContacts(call, [contactBody(), contactBody()]);
  const replica = new Replica(call);
  const issuedAt = Date.now();
  clock = new Date(issuedAt);
  t.teardown(() => {
    clock = new Date(start);
  });
  await replica.round();
  await call('DELETE', `/api/contacts/${doomed!.id}`);

  clock = new Date(issuedAt + 30 * DAY_MS + 2 * 60_000);
  t.equal((await call('GET', '/api/contacts/sync')).statusCode, 200, 'the instance ahead: a full sync (and its purge)');
  clock = new Date(issuedAt + 30 * DAY_MS - 60_000);
  const res = await call('GET', syncUrl(replica.token));
  t.equal(res.statusCode, 200, 'the instance behind: the token is within the retention');
  replica.apply(res.json());
  t.notOk(replica.contacts.has(doomed!.id), 'and the deletion is still told (the purge kept a margin)');
});

t.test('SYNC_TOMBSTONE_DAYS sets the retention', async (t) => {
  let shortClock = new Date();
  const shortApp = await buildContactsApp(t, { now: () => shortClock, env: { SYNC_TOMBSTONE_DAYS: '2' } });
  const call = as(shortApp, await createUser(shortApp));
  await createContacts(call, [contactBody()]);
  const issuedAt = shortClock.getTime();
  const res = await call('GET', syncUrl());
  t.equal(res.statusCode, 200);
  const token = res.json().next_token as string;
  shortClock = new Date(issuedAt + 2 * DAY_MS);
  t.equal((await call('GET', syncUrl(token))).statusCode, 200, 'exactly 2 days old: still good');
  shortClock = new Date(issuedAt + 2 * DAY_MS + 1);
  exactError(t, await call('GET', syncUrl(token)), 410, EXPIRED, '2 days and 1 ms');
});

t.test(
  'no deletion is lost to a long transaction: its tombstone is stamped when the transaction began',
  { skip: backend === 'embedded' && 'a transaction held open beside the service needs a second session' },
  async (t) => {
    const { user, call } = await newUser();
    const [doomed] = await createContacts(call, [contactBody(), contactBody()]);
    const replica = new Replica(call);
    clock = new Date();
    t.teardown(() => {
      clock = new Date(start);
    });
    await replica.round();

    // A transaction deletes the contact, then runs on for a second before it commits; meanwhile a
    // sync round begins, so its token's frontier must take that deletion in.
    const session = new pg.Client({ connectionString: app.config.databaseUrl! });
    await session.connect();
    t.teardown(() => session.end());
    await session.query('begin');
    await session.query('delete from contacts where owner_id = $1 and id = $2', [user.id, doomed!.id]);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    clock = new Date();
    const frontierAt = clock.getTime();
    await replica.round();
    await session.query('commit');

    // Exactly the retention later the token is still good, and a full sync (the owner's) has purged.
    clock = new Date(frontierAt + 30 * DAY_MS);
    t.equal((await call('GET', '/api/contacts/sync')).statusCode, 200);
    const res = await call('GET', syncUrl(replica.token));
    t.equal(res.statusCode, 200, 'the token is accepted');
    replica.apply(res.json());
    t.notOk(replica.contacts.has(doomed!.id), 'and it tells the deletion');
  },
);

t.test('writes between the pages of a full sync and of a delta are never missed', async (t) => {
  const { call } = await newUser();
  const created = await createContacts(
    call,
    Array.from({ length: 8 }, () => contactBody()),
  );
  const replica = new Replica(call);

  // Full sync, two a page; between pages: update one already sent and one not yet, delete one of
  // each, create one (its id is past every page).
  replica.apply(await page(call, undefined, 2));
  replica.apply(await page(call, replica.token, 2));
  await call('PATCH', `/api/contacts/${created[0]!.id}`, { first_name: 'SentThenChanged' });
  await call('PATCH', `/api/contacts/${created[6]!.id}`, { first_name: 'ChangedBeforeSent' });
  await call('DELETE', `/api/contacts/${created[1]!.id}`);
  await call('DELETE', `/api/contacts/${created[5]!.id}`);
  await createContacts(call, [contactBody({ first_name: 'Latecomer' })]);
  for (let p = await page(call, replica.token, 2); ; p = await page(call, replica.token, 2)) {
    replica.apply(p);
    if (!p.has_more) break;
  }
  await replica.round();
  t.strictSame(replica.sorted(), await serverContacts(call), 'after the full sync and one delta round');

  // A delta round read one change a page, with writes between its pages.
  for (const contact of created.slice(2, 5)) await call('PATCH', `/api/contacts/${contact.id}`, { last_name: 'Round' });
  replica.apply(await page(call, replica.token, 1));
  await call('PATCH', `/api/contacts/${created[2]!.id}`, { last_name: 'AgainAfterSent' });
  await call('DELETE', `/api/contacts/${created[3]!.id}`);
  await createContacts(call, [contactBody({ first_name: 'MidRound' })]);
  await replica.round(1);
  await replica.round(1);
  t.strictSame(replica.sorted(), await serverContacts(call), 'after the round and the next');
});

t.test('a frontier is one past the owner’s latest position: other owners’ writes move nothing', async (t) => {
  const sinceOf = (token: string) => (JSON.parse(Buffer.from(token.split('.')[0]!, 'base64url').toString()) as { since: string }).since;
  const { user, call } = await newUser();
  t.equal(sinceOf((await page(call)).next_token), '1', 'a book with no change yet: from the first position on');

  const [mine] = await createContacts(call, [contactBody()]);
  await call('PATCH', `/api/contacts/${mine!.id}`, { first_name: 'Twice' });
  const { rows } = await sql<{ position: string; book: string }>`
    select change_position::text as position, sync_position::text as book
      from contacts join address_books using (owner_id) where owner_id = ${user.id} and id = ${mine!.id}`.execute(app.db);
  t.strictSame(rows, [{ position: '2', book: '2' }], 'the create was position 1, the update 2, as the book says');
  const other = await newUser();
  await createContacts(other.call, [contactBody(), contactBody()]);

  const full = await page(call);
  t.equal(sinceOf(full.next_token), '3', "the full sync's frontier");
  const quiet = await page(call, full.next_token);
  t.strictSame(
    [quiet.contacts, quiet.deleted, sinceOf(quiet.next_token)],
    [[], [], '3'],
    'and the round after it has nothing and stays there',
  );
});

/** A token signed as before sync positions (key label of transaction ids), with `claims`. */
function transactionIdToken(claims: Record<string, unknown>): string {
  const key = createHmac('sha256', TEST_JWT_SECRET).update('contacts sync token').digest();
  const payload = Buffer.from(JSON.stringify(claims)).toString('base64url');
  return `${payload}.${createHmac('sha256', key).update(payload).digest().subarray(0, 16).toString('base64url')}`;
}

t.test('a token handed out before sync positions is 410: the client syncs in full again', async (t) => {
  const { user, call } = await newUser();
  await createContacts(call, [contactBody()]);
  const delta = { phase: 'delta', since: '734', sinceAt: clock.getTime(), after: null, next: null, nextAt: null };
  exactError(t, await call('GET', syncUrl(transactionIdToken({ u: user.id, ...delta }))), 410, EXPIRED, 'a delta token');
  const full = { phase: 'full', since: '734', sinceAt: clock.getTime(), afterId: 0 };
  exactError(t, await call('GET', syncUrl(transactionIdToken({ u: user.id, ...full }))), 410, EXPIRED, 'a full-sync token');
  const midRound = { ...delta, after: { xid: '735', id: 1 }, next: '740', nextAt: clock.getTime() };
  exactError(t, await call('GET', syncUrl(transactionIdToken({ u: user.id, ...midRound }))), 410, EXPIRED, 'a token mid-round');
  exactError(t, await call('GET', syncUrl(transactionIdToken({ u: user.id + 1, ...delta }))), 400, INVALID, "another user's is invalid");
  const replica = new Replica(call);
  await replica.round();
  t.strictSame(replica.sorted(), await serverContacts(call), 'a full sync then works');
});

t.test(
  'two writers of one owner: the later waits for the earlier, so no delta skips a change',
  { skip: backend === 'embedded' && 'a transaction held open beside the service needs a second session' },
  async (t) => {
    const { user, call } = await newUser();
    const [a, b] = await createContacts(call, [contactBody(), contactBody()]);
    const replica = new Replica(call);
    await replica.round();

    // The first writer takes a position and holds it uncommitted; the second (the service) waits.
    const session = new pg.Client({ connectionString: app.config.databaseUrl! });
    await session.connect();
    t.teardown(() => session.end());
    await session.query('begin');
    await session.query(`update contacts set first_name = 'First' where owner_id = $1 and id = $2`, [user.id, a!.id]);
    let patched = false;
    const second = call('PATCH', `/api/contacts/${b!.id}`, { first_name: 'Second' }).then((res) => {
      patched = true;
      return res;
    });
    while ((await session.query<{ n: number }>(LOCK_WAITERS_SQL)).rows[0]!.n === 0) await new Promise((resolve) => setTimeout(resolve, 20));
    t.notOk(patched, 'the second writer waits for the first');
    const during = await page(call, replica.token);
    t.strictSame([during.contacts, during.deleted], [[], []], 'a delta meanwhile sees neither');
    replica.apply(during);
    await session.query('commit');
    t.equal((await second).statusCode, 200);

    const after = await page(call, replica.token);
    t.strictSame(
      after.contacts.map((c) => [c.id, c.first_name]),
      [
        [a!.id, 'First'],
        [b!.id, 'Second'],
      ],
      'the next delta has both, in the order they committed',
    );
    replica.apply(after);
    t.strictSame(replica.sorted(), await serverContacts(call));
  },
);
