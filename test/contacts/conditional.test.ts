/**
 * Conditional requests (openapi.yaml, "Conventions"): strong contact ETags, If-None-Match
 * (304) on a contact and on list and upcoming pages (weak tags), If-Match (412) on PUT, PATCH and
 * DELETE with nothing written, the order of checks, and CORS exposing ETag.
 */
import type { LightMyRequestResponse } from 'fastify';
import { sql } from 'kysely';
import t, { type Test } from 'tap';
import { as, buildContactsApp, type Caller, contactBody, createContacts, createUser, tombstoneCount } from './fixtures.js';

const CHANGED = { detail: 'Precondition Failed: the contact has changed' };
const NOT_FOUND = { detail: 'Contact not found' };
/** A strong tag: quoted, opaque, no W/ (the contract's pattern without the weak prefix). */
const STRONG = /^"[!#-~]+"$/;
/** A weak tag, as pages carry. */
const WEAK = /^W\/"[!#-~]+"$/;

/** The clock stands still, so every write of a test happens within one millisecond unless it moves. */
let clock = new Date('2026-03-10T09:00:00.000Z');
const app = await buildContactsApp(t, { now: () => clock });
const aliceUser = await createUser(app);
const alice = as(app, aliceUser);
const bob = as(app, await createUser(app));

/** Whether each cached read found its answer in the cache, in order (X-Cache is absent on a 304). */
const cacheReads: boolean[] = [];
const read = app.cache.read.bind(app.cache);
app.cache.read = async (userId, key) => {
  const result = await read(userId, key);
  cacheReads.push(result.answer !== undefined);
  return result;
};
const lastRead = () => (cacheReads.at(-1) ? 'HIT' : 'MISS');

/** The contact's row exactly as stored, every column (the sync position of its last write too). */
async function storedRow(id: number): Promise<Record<string, unknown> | undefined> {
  const { rows } = await sql<
    Record<string, unknown>
  >`select *, change_position::text as change_position from contacts where id = ${id}`.execute(app.db);
  return rows[0];
}

/** A 304 as the contract fixes it: no body, no content headers, the current tag. */
function notModified(t: Test, res: LightMyRequestResponse, etag: string, message: string): void {
  t.equal(res.statusCode, 304, `${message}: 304`);
  t.equal(res.body, '', `${message}: no body`);
  t.equal(res.headers.etag, etag, `${message}: the same ETag`);
  t.notOk('content-type' in res.headers, `${message}: no content type`);
  t.notOk('x-cache' in res.headers, `${message}: X-Cache plays no part`);
}

function preconditionFailed(t: Test, res: LightMyRequestResponse, message: string): void {
  t.equal(res.statusCode, 412, `${message}: 412`);
  t.strictSame(res.json(), CHANGED, `${message}: the detail`);
  t.match(res.headers['content-type'], /^application\/json/, `${message}: JSON`);
  t.notOk('etag' in res.headers, `${message}: no ETag on an error`);
}

async function newContact(overrides: Record<string, unknown> = {}): Promise<{ contact: Record<string, any>; etag: string }> {
  const res = await alice('POST', '/api/contacts/', contactBody(overrides));
  if (res.statusCode !== 201) throw new Error(`create: ${res.statusCode} ${res.body}`);
  return { contact: res.json(), etag: res.headers.etag as string };
}

/** A PUT body for `contact` with its own e-mail (so it is a valid replacement). */
const putBody = (contact: Record<string, any>, overrides: Record<string, unknown> = {}) => ({
  first_name: contact.first_name,
  last_name: contact.last_name,
  email: contact.email,
  phone: contact.phone,
  birthday: contact.birthday,
  ...overrides,
});

t.test('every contact answer carries a strong ETag; every write changes it and it never repeats', async (t) => {
  const created = await alice('POST', '/api/contacts/', contactBody({ first_name: 'Tag' }));
  t.equal(created.statusCode, 201);
  const contact = created.json();
  const first = created.headers.etag as string;
  t.match(first, STRONG, 'POST 201: strong, quoted');
  t.equal(created.headers.location, `/api/contacts/${contact.id}`);

  const got = await alice('GET', `/api/contacts/${contact.id}`);
  t.equal(got.statusCode, 200);
  t.equal(got.headers.etag, first, 'GET: the tag of the state the create answered');
  const hit = await alice('GET', `/api/contacts/${contact.id}`);
  t.equal(hit.headers['x-cache'], 'HIT');
  t.equal(hit.headers.etag, first, 'a cached GET carries the same tag');

  // Every write below lands within the same millisecond of the stopped clock.
  const seen = [first];
  const writes: [string, () => Promise<LightMyRequestResponse>][] = [
    ['PATCH with unchanged values', () => alice('PATCH', `/api/contacts/${contact.id}`, { first_name: 'Tag' })],
    ['PATCH again, same millisecond', () => alice('PATCH', `/api/contacts/${contact.id}`, { first_name: 'Tag' })],
    ['PUT with unchanged values', () => alice('PUT', `/api/contacts/${contact.id}`, putBody(contact))],
    ['PUT again', () => alice('PUT', `/api/contacts/${contact.id}`, putBody(contact))],
    ['PATCH of additional_data', () => alice('PATCH', `/api/contacts/${contact.id}`, { additional_data: { n: 1 } })],
    ['PATCH back', () => alice('PATCH', `/api/contacts/${contact.id}`, { additional_data: null })],
  ];
  for (let round = 0; round < 3; round++) {
    for (const [name, write] of writes) {
      const res = await write();
      t.equal(res.statusCode, 200, name);
      const etag = res.headers.etag as string;
      t.match(etag, STRONG, `${name}: strong`);
      t.notOk(seen.includes(etag), `${name}: a tag never seen before for this contact`);
      seen.push(etag);
      const after = await alice('GET', `/api/contacts/${contact.id}`);
      t.equal(after.headers.etag, etag, `${name}: GET answers the write's tag`);
      t.strictSame(after.json(), res.json(), `${name}: and the write's state`);
    }
  }
  t.equal(new Set(seen).size, 19, '19 states, 19 tags');

  // The clock going back does not bring an old tag back either.
  clock = new Date('2026-03-10T08:00:00.000Z');
  const back = await alice('PATCH', `/api/contacts/${contact.id}`, { first_name: 'Tag' });
  t.notOk(seen.includes(back.headers.etag as string), 'a write under an earlier clock still gets a new tag');
  clock = new Date('2026-03-10T09:00:00.000Z');

  const empty = await alice('PATCH', `/api/contacts/${contact.id}`, {});
  t.equal(empty.statusCode, 200);
  t.equal(empty.headers.etag, back.headers.etag, 'an empty PATCH writes nothing: the tag stays');
  const readOnly = await alice('PATCH', `/api/contacts/${contact.id}`, { id: 1, updated_at: '2000-01-01T00:00:00.000Z' });
  t.equal(readOnly.headers.etag, back.headers.etag, 'nor does one with only read-only fields');

  // Two contacts created in one millisecond have different tags.
  const [a, b] = await createContacts(alice, [contactBody(), contactBody()]);
  t.equal(a!.updated_at, b!.updated_at, 'same instant');
  const tagA = (await alice('GET', `/api/contacts/${a!.id}`)).headers.etag;
  const tagB = (await alice('GET', `/api/contacts/${b!.id}`)).headers.etag;
  t.not(tagA, tagB, 'but two tags');

  const deleted = await alice('DELETE', `/api/contacts/${contact.id}`);
  t.equal(deleted.statusCode, 200);
  t.strictSame(deleted.json(), back.json(), 'DELETE answers the contact as it was');
});

t.test('GET with If-None-Match: 304 for the current tag, *, or the tag with W/; 200 for a stale one', async (t) => {
  const { contact, etag } = await newContact();
  const url = `/api/contacts/${contact.id}`;

  t.equal((await alice('GET', url)).headers['x-cache'], 'MISS');
  notModified(t, await alice('GET', url, undefined, { 'if-none-match': etag }), etag, 'the current tag');
  t.equal(lastRead(), 'HIT', 'that 304 was a cached read');

  await app.cache.invalidate(aliceUser.id);
  notModified(t, await alice('GET', url, undefined, { 'if-none-match': etag }), etag, 'the current tag, uncached');
  t.equal(lastRead(), 'MISS', 'that 304 was computed');

  notModified(t, await alice('GET', url, undefined, { 'if-none-match': '*' }), etag, '*');
  notModified(t, await alice('GET', url, undefined, { 'if-none-match': `W/${etag}` }), etag, 'W/ ignored');
  notModified(t, await alice('GET', url, undefined, { 'if-none-match': `"nope", ${etag}` }), etag, 'one of a list');
  notModified(t, await alice('GET', url, undefined, { 'if-none-match': `"nope",W/${etag}` }), etag, 'one of a list, weak');

  const patched = await alice('PATCH', url, { last_name: 'Changed' });
  const fresh = patched.headers.etag as string;
  for (const header of [etag, `W/${etag}`, '"nope"', 'garbage']) {
    const res = await alice('GET', url, undefined, { 'if-none-match': header });
    t.equal(res.statusCode, 200, `${header}: stale, so 200`);
    t.equal(res.headers.etag, fresh, `${header}: the new tag`);
    t.strictSame(res.json(), patched.json(), `${header}: the new state`);
  }
  t.equal(lastRead(), 'HIT', 'a stale tag on a cached read is 200 too');
  notModified(t, await alice('GET', url, undefined, { 'if-none-match': fresh }), fresh, 'the new tag');

  // Existence and ownership come first.
  const missing = await alice('GET', '/api/contacts/2147483647', undefined, { 'if-none-match': '*' });
  t.equal(missing.statusCode, 404);
  t.strictSame(missing.json(), NOT_FOUND);
  const foreign = await bob('GET', url, undefined, { 'if-none-match': fresh });
  t.equal(foreign.statusCode, 404, "another user's contact is 404 even with its tag");
  t.strictSame(foreign.json(), NOT_FOUND);
  const anonymous = await app.inject({ method: 'GET', url, headers: { 'if-none-match': fresh } });
  t.equal(anonymous.statusCode, 401);
  t.strictSame(anonymous.json(), { detail: 'Not authenticated' });
});

t.test('If-Match on PUT, PATCH and DELETE: a stale tag is 412 and writes nothing', async (t) => {
  const methods: [string, (c: Record<string, any>) => unknown][] = [
    ['PUT', (c) => putBody(c, { first_name: 'Overwritten' })],
    ['PATCH', () => ({ first_name: 'Overwritten' })],
    ['PATCH', () => ({})],
    ['PATCH', () => ({ id: 7, created_at: '2000-01-01T00:00:00.000Z' })],
    ['DELETE', () => undefined],
  ];
  for (const [method, body] of methods) {
    const { contact, etag: stale } = await newContact();
    const url = `/api/contacts/${contact.id}`;
    const current = (await alice('PATCH', url, { last_name: 'Moved' })).headers.etag as string;
    const label = `${method} ${JSON.stringify(body(contact)) ?? ''}`;

    await alice('GET', url);
    await alice('GET', '/api/contacts/?limit=5');
    t.equal((await alice('GET', url)).headers['x-cache'], 'HIT', `${label}: cached before`);
    const before = await storedRow(contact.id);

    // Shaped like this service's tags, but past the last date JavaScript holds, and past the epoch.
    const farFuture = `"zzzzzzzzzzzz-${contact.id.toString(36)}"`;
    const epoch = `"0-${contact.id.toString(36)}"`;
    for (const ifMatch of [stale, `W/${current}`, `"nonsense"`, 'garbage', `W/${stale}, "x"`, farFuture, epoch]) {
      preconditionFailed(t, await alice(method, url, body(contact), { 'if-match': ifMatch }), `${label}, If-Match ${ifMatch}`);
    }
    t.strictSame(await storedRow(contact.id), before, `${label}: the row is untouched, updated_at and last writer included`);
    t.equal(await tombstoneCount(app, contact.id), 0, `${label}: no tombstone`);
    t.equal((await alice('GET', url)).headers['x-cache'], 'HIT', `${label}: the cache was not invalidated`);
    t.equal((await alice('GET', '/api/contacts/?limit=5')).headers['x-cache'], 'HIT', `${label}: nor the list`);

    // The tag of another contact never matches this one, even as a strong tag of this service.
    const other = await newContact();
    preconditionFailed(t, await alice(method, url, body(contact), { 'if-match': other.etag }), `${label}: another contact's tag`);

    const ok = await alice(method, url, body(contact), { 'if-match': `"nope", ${stale}, ${current}` });
    t.equal(ok.statusCode, 200, `${label}: a list holding the current tag succeeds`);
    if (method === 'DELETE') {
      t.equal(await storedRow(contact.id), undefined, `${label}: deleted`);
    } else {
      t.equal((await alice('GET', url)).headers.etag, ok.headers.etag, `${label}: GET agrees`);
    }
  }
});

t.test('If-Match: * matches any existing contact; the current tag succeeds; no If-Match is unconditional', async (t) => {
  const { contact, etag } = await newContact();
  const url = `/api/contacts/${contact.id}`;

  const patched = await alice('PATCH', url, { first_name: 'Star' }, { 'if-match': '*' });
  t.equal(patched.statusCode, 200, 'PATCH *');
  t.not(patched.headers.etag, etag);
  const put = await alice('PUT', url, putBody(contact, { first_name: 'Put' }), { 'if-match': '*' });
  t.equal(put.statusCode, 200, 'PUT *');
  t.equal(put.json().first_name, 'Put');
  const noop = await alice('PATCH', url, {}, { 'if-match': put.headers.etag as string });
  t.equal(noop.statusCode, 200, 'an empty PATCH with the current tag');
  t.equal(noop.headers.etag, put.headers.etag);
  t.strictSame(noop.json(), put.json());
  const noopStar = await alice('PATCH', url, {}, { 'if-match': '*' });
  t.equal(noopStar.statusCode, 200, 'an empty PATCH with *');

  const current = await alice('PATCH', url, { last_name: 'Current' }, { 'if-match': put.headers.etag as string });
  t.equal(current.statusCode, 200, 'PATCH with the current tag');
  t.equal(current.json().last_name, 'Current');
  const unconditional = await alice('PATCH', url, { last_name: 'Blind' });
  t.equal(unconditional.statusCode, 200, 'no If-Match: written whatever the state');

  const removed = await alice('DELETE', url, undefined, { 'if-match': '*' });
  t.equal(removed.statusCode, 200, 'DELETE *');
  t.strictSame(removed.json(), unconditional.json());
  for (const [method, body] of [
    ['PUT', putBody(contact)],
    ['PATCH', { first_name: 'X' }],
    ['PATCH', {}],
    ['DELETE', undefined],
  ] as const) {
    const res = await alice(method, url, body, { 'if-match': '*' });
    t.equal(res.statusCode, 404, `${method} * on a missing contact`);
    t.strictSame(res.json(), NOT_FOUND);
    const tagged = await alice(method, url, body, { 'if-match': unconditional.headers.etag as string });
    t.equal(tagged.statusCode, 404, `${method} with its last tag on a missing contact`);
    t.strictSame(tagged.json(), NOT_FOUND);
  }
});

t.test("another user's contact is 404 whatever If-Match says, and stays as it was", async (t) => {
  const { contact, etag } = await newContact();
  const url = `/api/contacts/${contact.id}`;
  const before = await storedRow(contact.id);
  for (const [method, body] of [
    ['PUT', putBody(contact)],
    ['PATCH', { first_name: 'Bob' }],
    ['PATCH', {}],
    ['DELETE', undefined],
  ] as const) {
    for (const ifMatch of [etag, '*', '"stale"']) {
      const res = await bob(method, url, body, { 'if-match': ifMatch });
      t.equal(res.statusCode, 404, `${method} by bob, If-Match ${ifMatch}`);
      t.strictSame(res.json(), NOT_FOUND);
    }
  }
  t.strictSame(await storedRow(contact.id), before, "alice's contact is untouched");
});

t.test('order of checks: 401, then 400/415/422, then 404, then 412, then 409', async (t) => {
  const { contact: taken } = await newContact();
  const { contact, etag: stale } = await newContact();
  const url = `/api/contacts/${contact.id}`;
  const current = (await alice('PATCH', url, { last_name: 'Moved' })).headers.etag as string;
  const missing = '/api/contacts/2147483647';
  const before = await storedRow(contact.id);

  const raw = (method: string, target: string, payload: string, headers: Record<string, string>) =>
    app.inject({ method: method as 'PUT', url: target, payload, headers: { authorization: `Bearer ${aliceUser.token}`, ...headers } });

  const anonymous = await app.inject({ method: 'PATCH', url, payload: { email: 'bad' }, headers: { 'if-match': stale } });
  t.equal(anonymous.statusCode, 401, 'no token, bad body, stale tag: 401');
  t.strictSame(anonymous.json(), { detail: 'Not authenticated' });
  t.equal(anonymous.headers['www-authenticate'], 'Bearer');

  const cases: [string, () => Promise<LightMyRequestResponse>, number, unknown][] = [
    [
      'malformed JSON, stale tag',
      () => raw('PATCH', url, '{"first_name":', { 'content-type': 'application/json', 'if-match': stale }),
      400,
      { detail: 'Malformed JSON body' },
    ],
    [
      'wrong content type, stale tag',
      () => raw('PATCH', url, 'first_name=x', { 'content-type': 'text/plain', 'if-match': stale }),
      415,
      { detail: 'Unsupported Media Type: text/plain' },
    ],
    [
      'schema failure, stale tag',
      () => alice('PATCH', url, { email: 'not-an-email' }, { 'if-match': stale }),
      422,
      { detail: 'body/email must match format "email"' },
    ],
    [
      'PUT missing a field, stale tag',
      () => alice('PUT', url, { first_name: 'A' }, { 'if-match': stale }),
      422,
      { detail: 'body/last_name is required' },
    ],
    [
      'rule failure (phone), stale tag',
      () => alice('PATCH', url, { phone: '+0123456789' }, { 'if-match': stale }),
      422,
      { detail: 'body/phone must be an international number in E.164 form, like +14155550123' },
    ],
    [
      'bad body, missing contact, stale tag',
      () => alice('PATCH', missing, { email: 'not-an-email' }, { 'if-match': stale }),
      422,
      { detail: 'body/email must match format "email"' },
    ],
    ['missing contact, stale tag', () => alice('PATCH', missing, { first_name: 'A' }, { 'if-match': stale }), 404, NOT_FOUND],
    ['duplicate e-mail, stale tag', () => alice('PATCH', url, { email: taken.email }, { 'if-match': stale }), 412, CHANGED],
    [
      'duplicate e-mail (other case), stale tag, PUT',
      () => alice('PUT', url, putBody(contact, { email: taken.email.toUpperCase() }), { 'if-match': stale }),
      412,
      CHANGED,
    ],
    [
      'duplicate e-mail, current tag',
      () => alice('PATCH', url, { email: taken.email }, { 'if-match': current }),
      409,
      { detail: 'Contact with this email already exists' },
    ],
    [
      'duplicate e-mail, *',
      () => alice('PUT', url, putBody(contact, { email: taken.email }), { 'if-match': '*' }),
      409,
      { detail: 'Contact with this email already exists' },
    ],
  ];
  for (const [name, send, status, body] of cases) {
    const res = await send();
    t.equal(res.statusCode, status, `${name}: ${status}`);
    t.strictSame(res.json(), body, `${name}: detail`);
  }
  t.strictSame(await storedRow(contact.id), before, 'none of them wrote anything');
});

t.test('list and upcoming pages: a weak ETag, 304 while page and headers would not change', async (t) => {
  const app2 = await buildContactsApp(t, { now: () => new Date('2026-03-10T09:00:00.000Z') });
  const carolUser = await createUser(app2);
  const carol = as(app2, carolUser);
  const dave = as(app2, await createUser(app2));
  // Birthdays 1..6 days ahead of the (stopped) clock.
  const contacts = await createContacts(
    carol,
    Array.from({ length: 6 }, (_, i) => contactBody({ last_name: `P${i}`, birthday: `1990-03-${String(11 + i).padStart(2, '0')}` })),
  );

  const pages = ['/api/contacts/?limit=2', '/api/contacts/?skip=2&limit=2', '/api/contacts/get-upcoming-birthday?limit=2&time_range=30'];
  const tags = new Map<string, string>();
  for (const url of pages) {
    const res = await carol('GET', url);
    t.equal(res.statusCode, 200);
    t.match(res.headers.etag, WEAK, `${url}: weak tag`);
    tags.set(url, res.headers.etag as string);
    const hit = await carol('GET', url);
    t.equal(hit.headers['x-cache'], 'HIT');
    t.equal(hit.headers.etag, res.headers.etag, `${url}: HIT and MISS carry one tag (X-Cache does not count)`);
    notModified(
      t,
      await carol('GET', url, undefined, { 'if-none-match': res.headers.etag as string }),
      res.headers.etag as string,
      `${url}, cached`,
    );
  }
  t.equal(new Set(tags.values()).size, 3, 'each page its own tag');
  t.not((await carol('GET', '/api/contacts/?limit=3')).headers.etag, tags.get(pages[0]!), 'another limit, another tag');

  await app2.cache.invalidate(carolUser.id);
  for (const url of pages) {
    notModified(t, await carol('GET', url, undefined, { 'if-none-match': tags.get(url)! }), tags.get(url)!, `${url}, uncached`);
    t.equal((await carol('GET', url)).headers['x-cache'], 'HIT', `${url}: the 304 was computed (and cached)`);
  }

  /** After a write: the pages it changed answer 200 with a new tag to the old one, the others still 304. */
  async function afterWrite(t: Test, what: string, changed: string[]): Promise<void> {
    for (const url of pages) {
      const old = tags.get(url)!;
      const res = await carol('GET', url, undefined, { 'if-none-match': old });
      if (changed.includes(url)) {
        t.equal(res.statusCode, 200, `${what}: ${url} changed, the old tag gets 200`);
        t.match(res.headers.etag, WEAK);
        t.not(res.headers.etag, old, `${what}: ${url} has a new tag`);
        t.strictSame(res.json(), (await carol('GET', url)).json(), `${what}: ${url} the current page`);
        tags.set(url, res.headers.etag as string);
        notModified(
          t,
          await carol('GET', url, undefined, { 'if-none-match': res.headers.etag as string }),
          res.headers.etag as string,
          `${what}: ${url} new tag`,
        );
      } else {
        notModified(t, res, old, `${what}: ${url} did not change`);
      }
    }
  }

  const [c0, , c2, , , c5] = contacts;
  await carol('PATCH', `/api/contacts/${c0!.id}`, { last_name: 'P0' });
  await t.test('PATCH with unchanged values of a contact on page 1 (and in upcoming)', (t) =>
    afterWrite(t, 'patch', [pages[0]!, pages[2]!]),
  );
  await carol('PATCH', `/api/contacts/${c2!.id}`, { additional_data: { x: 1 } });
  await t.test('PATCH of a contact on page 2, far in upcoming', (t) => afterWrite(t, 'patch page 2', [pages[1]!]));
  await carol('PATCH', `/api/contacts/${c5!.id}`, { first_name: 'Elsewhere' });
  await t.test('a write to no page and no header leaves every tag current', (t) => afterWrite(t, 'patch page 3', []));
  await carol('POST', '/api/contacts/', contactBody({ birthday: '1990-05-01' }));
  await t.test('a create moves X-Total-Count and Link of every list page', (t) => afterWrite(t, 'create', [pages[0]!, pages[1]!]));
  await carol('DELETE', `/api/contacts/${c5!.id}`);
  await t.test('a delete (of a contact in upcoming, past its first page)', (t) => afterWrite(t, 'delete', pages));
  await carol('PUT', `/api/contacts/${c0!.id}`, putBody(c0!, { birthday: '1990-03-20' }));
  await t.test('a PUT that moves a contact within upcoming', (t) => afterWrite(t, 'put', [pages[0]!, pages[2]!]));

  // Dave's pages are his own: the same URL and tag mean nothing for another user's contacts.
  const daves = await dave('GET', pages[0]!, undefined, { 'if-none-match': tags.get(pages[0]!)! });
  t.equal(daves.statusCode, 200, "carol's tag on dave's (empty) page");
  t.strictSame(daves.json(), []);
});

t.test('a cached page never answers 304 to a tag the current page no longer has', async (t) => {
  const { contact } = await newContact({ last_name: 'Cached' });
  const url = `/api/contacts/?query=${encodeURIComponent('last_name:eq:Cached')}`;
  let tag = (await alice('GET', url)).headers.etag as string;
  for (let round = 0; round < 10; round++) {
    t.equal((await alice('GET', url)).headers['x-cache'], 'HIT', `round ${round}: the page is cached`);
    const write = await alice('PATCH', `/api/contacts/${contact.id}`, { first_name: `Round${round}` });
    t.equal(write.statusCode, 200);
    const res = await alice('GET', url, undefined, { 'if-none-match': tag });
    t.equal(res.statusCode, 200, `round ${round}: the old tag is stale at once`);
    t.equal(res.json()[0].first_name, `Round${round}`);
    t.not(res.headers.etag, tag);
    tag = res.headers.etag as string;
  }
});

t.test('CORS exposes ETag and Idempotent-Replayed, and a preflight allows If-Match, If-None-Match and Idempotency-Key', async (t) => {
  const origin = 'https://app.example';
  const corsApp = await buildContactsApp(t, { env: { CORS_ORIGINS: origin } });
  const user = await createUser(corsApp);
  const call: Caller = as(corsApp, user);
  const created = await call('POST', '/api/contacts/', contactBody(), { origin });
  t.equal(created.headers['access-control-allow-origin'], origin);
  const exposed = String(created.headers['access-control-expose-headers']).split(/\s*,\s*/);
  t.ok(exposed.includes('ETag'), `ETag is exposed (${exposed.join(', ')})`);
  const list = await call('GET', '/api/contacts/', undefined, { origin });
  t.ok(
    String(list.headers['access-control-expose-headers'])
      .split(/\s*,\s*/)
      .includes('ETag'),
    'on a list too',
  );
  const cached = await call('GET', '/api/contacts/', undefined, { origin, 'if-none-match': list.headers.etag as string });
  t.equal(cached.statusCode, 304);
  t.equal(cached.headers['access-control-allow-origin'], origin, 'a 304 is readable across origins too');

  const preflight = await corsApp.inject({
    method: 'OPTIONS',
    url: `/api/contacts/${created.json().id}`,
    headers: {
      origin,
      'access-control-request-method': 'PATCH',
      'access-control-request-headers': 'authorization,content-type,if-match,if-none-match',
    },
  });
  t.equal(preflight.statusCode, 204);
  const allowed = String(preflight.headers['access-control-allow-headers'])
    .toLowerCase()
    .split(/\s*,\s*/);
  t.ok(allowed.includes('if-match'), `If-Match is allowed (${allowed.join(', ')})`);
  t.ok(allowed.includes('if-none-match'), 'and If-None-Match');

  // A browser may send an Idempotency-Key and read whether the answer is a replay.
  const keyedPreflight = await corsApp.inject({
    method: 'OPTIONS',
    url: '/api/contacts/',
    headers: {
      origin,
      'access-control-request-method': 'POST',
      'access-control-request-headers': 'authorization,content-type,idempotency-key',
    },
  });
  t.equal(keyedPreflight.statusCode, 204);
  t.ok(
    String(keyedPreflight.headers['access-control-allow-headers'])
      .toLowerCase()
      .split(/\s*,\s*/)
      .includes('idempotency-key'),
  );
  const body = contactBody();
  await call('POST', '/api/contacts/', body, { origin, 'idempotency-key': 'cors' });
  const replayed = await call('POST', '/api/contacts/', body, { origin, 'idempotency-key': 'cors' });
  t.equal(replayed.headers['idempotent-replayed'], 'true');
  t.ok(
    String(replayed.headers['access-control-expose-headers'])
      .split(/\s*,\s*/)
      .includes('Idempotent-Replayed'),
    'which CORS exposes',
  );
});
