import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify';
import t, { type Test } from 'tap';
import { davAs, davUser } from '../carddav/dav-client.js';
import { buildContactsApp, createUser, type TestUser } from '../contacts/fixtures.js';
import { build, HEAVY_WORK_UNLIMITED } from '../helper.js';
import { parseExposition, sampleValue } from './exposition.js';

/** The per-user buckets of heavy work (openapi.yaml `x-rate-limit`), with a request that counts in each. */
const BUCKETS = {
  import: {
    variable: 'RATE_LIMIT_IMPORT_PER_MIN',
    request: {
      method: 'POST',
      url: '/api/contacts/import',
      headers: { 'content-type': 'text/csv' },
      payload: 'first_name,last_name,email,phone,birthday\r\n',
    },
  },
  export: { variable: 'RATE_LIMIT_EXPORT_PER_MIN', request: { method: 'GET', url: '/api/contacts/export?format=csv' } },
  sync: { variable: 'RATE_LIMIT_SYNC_PER_MIN', request: { method: 'GET', url: '/api/contacts/sync' } },
  avatar: {
    variable: 'RATE_LIMIT_AVATAR_PER_MIN',
    request: { method: 'PUT', url: '/api/users/me/avatar', headers: { 'content-type': 'image/png' }, payload: 'not an image' },
  },
} satisfies Record<string, { variable: string; request: InjectOptions }>;
type BucketName = keyof typeof BUCKETS;
const NAMES = Object.keys(BUCKETS) as BucketName[];

/** `name`'s request as `user`. */
function call(app: FastifyInstance, user: TestUser, name: BucketName): Promise<LightMyRequestResponse> {
  const { request } = BUCKETS[name];
  return app.inject({
    ...request,
    headers: { ...('headers' in request ? request.headers : {}), authorization: `Bearer ${user.token}` },
  } as InjectOptions);
}

function counted(t: Test, res: LightMyRequestResponse, limit: number, remaining: number, label: string) {
  t.not(res.statusCode, 429, `${label}: answered`);
  t.equal(res.headers['x-ratelimit-limit'], String(limit), `${label}: limit`);
  t.equal(res.headers['x-ratelimit-remaining'], String(remaining), `${label}: remaining`);
}

/** The 429 of the per-user limits: the wording and headers of GET /api/users/me's. */
function limited(t: Test, res: LightMyRequestResponse, limit: number, label: string) {
  t.equal(res.statusCode, 429, label);
  const after = Number(res.headers['retry-after']);
  t.ok(Number.isInteger(after) && after >= 1 && after <= 60, `${label}: Retry-After ${after} in 1..60`);
  t.equal(res.body, JSON.stringify({ detail: `Rate limit exceeded, retry in ${after} seconds` }), `${label}: body`);
  t.match(res.headers['content-type'], /^application\/json/);
  t.equal(res.headers['x-ratelimit-limit'], String(limit), `${label}: limit`);
  t.equal(res.headers['x-ratelimit-remaining'], '0', `${label}: remaining`);
  t.equal(res.headers['x-ratelimit-reset'], String(after), `${label}: reset`);
}

t.test('import, export, sync and avatar upload: a bucket each per user, 429 past it, counted by name in /metrics', async (t) => {
  const limits: Record<BucketName, number> = { import: 2, export: 3, sync: 4, avatar: 1 };
  const env = Object.fromEntries(NAMES.map((name) => [BUCKETS[name].variable, String(limits[name])]));
  const app = await buildContactsApp(t, { env });
  const alice = await createUser(app);
  const bob = await createUser(app);
  const before = parseExposition((await app.inject({ method: 'GET', url: '/metrics' })).body);

  for (const name of NAMES) {
    for (let i = 0; i < limits[name]; i++) counted(t, await call(app, alice, name), limits[name], limits[name] - 1 - i, `${name} ${i + 1}`);
    limited(t, await call(app, alice, name), limits[name], `${name} past its limit`);
    // Another user has a bucket of their own.
    counted(t, await call(app, bob, name), limits[name], limits[name] - 1, `${name}: another user`);
  }
  // The buckets are apart: the other operations and /me are untouched.
  const me = await app.inject({ method: 'GET', url: '/api/users/me', headers: { authorization: `Bearer ${alice.token}` } });
  counted(t, me, 5, 4, 'me');
  const list = await app.inject({ method: 'GET', url: '/api/contacts/', headers: { authorization: `Bearer ${alice.token}` } });
  t.equal(list.statusCode, 200);
  t.notOk('x-ratelimit-limit' in list.headers, 'the list is counted in no bucket');

  const after = parseExposition((await app.inject({ method: 'GET', url: '/metrics' })).body);
  for (const name of NAMES) {
    const increase =
      sampleValue(after, 'contacts_rate_limited_total', { limit: name }) -
      sampleValue(before, 'contacts_rate_limited_total', { limit: name });
    t.equal(increase, 1, `contacts_rate_limited_total{limit="${name}"}`);
  }
  t.equal(sampleValue(after, 'contacts_rate_limited_total', { limit: 'me' }), 0, 'none is labelled me');
});

t.test('the defaults: import 10, export 10, sync 120, avatar 10 a minute', async (t) => {
  // A blank value is unset: the tests' lifted buckets give way to the defaults.
  const app = await build(t, { env: Object.fromEntries(Object.keys(HEAVY_WORK_UNLIMITED).map((name) => [name, ''])) });
  const user = await createUser(app);
  const defaults: Record<BucketName, number> = { import: 10, export: 10, sync: 120, avatar: 10 };
  for (const name of NAMES) counted(t, await call(app, user, name), defaults[name], defaults[name] - 1, name);
});

t.test("CardDAV's sync-collection REPORT counts in the sync bucket; past it 429 as a D:error", async (t) => {
  const app = await buildContactsApp(t, { env: { RATE_LIMIT_SYNC_PER_MIN: '2' } });
  const user = await davUser(app);
  const dav = davAs(app, user);
  const book = `/dav/addressbooks/${user.id}/contacts/`;
  const syncReport = () =>
    dav(
      'REPORT',
      book,
      '<D:sync-collection xmlns:D="DAV:"><D:sync-token/><D:sync-level>1</D:sync-level><D:prop><D:getetag/></D:prop></D:sync-collection>',
    );

  const first = await syncReport();
  t.equal(first.statusCode, 207);
  t.equal(first.headers['x-ratelimit-remaining'], '1');
  counted(t, await call(app, user, 'sync'), 2, 0, 'REST sync shares the bucket');
  const refused = await syncReport();
  t.equal(refused.statusCode, 429);
  const after = Number(refused.headers['retry-after']);
  t.ok(Number.isInteger(after) && after >= 1 && after <= 60, `Retry-After ${after}`);
  t.equal(refused.headers['x-ratelimit-limit'], '2');
  t.equal(refused.headers['x-ratelimit-remaining'], '0');
  t.equal(refused.headers['x-ratelimit-reset'], String(after));
  t.match(refused.headers['content-type'], /^application\/xml/);
  t.match(refused.body, `<X:detail>Rate limit exceeded, retry in ${after} seconds</X:detail>`);
  t.match(refused.body, /<D:error /);
  limited(t, await call(app, user, 'sync'), 2, 'REST sync after the DAV one');
});

t.test("CardDAV's whole-book reads count in the sync bucket too: PROPFIND Depth 1 of the book and addressbook-query", async (t) => {
  const app = await buildContactsApp(t, { env: { RATE_LIMIT_SYNC_PER_MIN: '2' } });
  const user = await davUser(app);
  const dav = davAs(app, user);
  const book = `/dav/addressbooks/${user.id}/contacts/`;
  const listing = () => dav('PROPFIND', book, undefined, { depth: '1' });
  const query = () =>
    dav(
      'REPORT',
      book,
      '<C:addressbook-query xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:carddav"><D:prop><D:getetag/></D:prop></C:addressbook-query>',
      { depth: '1' },
    );
  const uncounted = {
    'PROPFIND Depth 0 of the book': await dav('PROPFIND', book, undefined, { depth: '0' }),
    'PROPFIND Depth 1 of the home': await dav('PROPFIND', `/dav/addressbooks/${user.id}/`, undefined, { depth: '1' }),
    'addressbook-query Depth 0': await dav(
      'REPORT',
      book,
      '<C:addressbook-query xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:carddav"><D:prop><D:getetag/></D:prop></C:addressbook-query>',
      { depth: '0' },
    ),
  };
  for (const [label, res] of Object.entries(uncounted)) {
    t.equal(res.statusCode, 207, `${label}: answered`);
    t.notOk('x-ratelimit-limit' in res.headers, `${label}: counted in no bucket`);
  }
  const multiget = await dav(
    'REPORT',
    book,
    `<C:addressbook-multiget xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:carddav"><D:prop><D:getetag/></D:prop><D:href>${book}x.vcf</D:href></C:addressbook-multiget>`,
  );
  t.equal(multiget.statusCode, 207);
  t.equal(multiget.headers['x-ratelimit-limit'], '100000', 'a multiget counts in its own bucket (lifted here), not in sync');

  const listed = await listing();
  t.equal(listed.statusCode, 207);
  t.equal(listed.headers['x-ratelimit-remaining'], '1', 'PROPFIND Depth 1 of the book counted');
  const queried = await query();
  t.equal(queried.statusCode, 207);
  t.equal(queried.headers['x-ratelimit-remaining'], '0', 'addressbook-query counted');
  for (const refused of [await listing(), await query()]) {
    t.equal(refused.statusCode, 429);
    t.match(refused.headers['content-type'], /^application\/xml/);
    t.match(refused.body, /<D:error /);
  }
  limited(t, await call(app, user, 'sync'), 2, 'REST sync shares the bucket');
});
