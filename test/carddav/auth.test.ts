/**
 * App passwords and `/dav` authentication (openapi.yaml, docs/carddav.md): the three REST
 * operations, HTTP Basic with the username or e-mail and an app password, a bearer access token,
 * the account password refused on /dav and app passwords refused on /api, revocation at once (also
 * by a password reset and on a second instance), `last_used_at`, and failed sign-ins counted
 * against the anonymous limit.
 */
import t from 'tap';
import { buildApp } from '../../src/app.js';
import { loadConfig } from '../../plugins/config.js';
import { bearer, buildAccountsApp, loggedInUser } from '../auth/accounts.js';
import { backend, smtpCapture, testEnv } from '../helper.js';
import { basicAuth } from './dav-client.js';

const CHALLENGE = 'Basic realm="contacts", charset="UTF-8"';
const NOT_AUTHENTICATED =
  '<?xml version="1.0" encoding="UTF-8"?><D:error xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:carddav" xmlns:CS="http://calendarserver.org/ns/" xmlns:X="urn:contacts-service:dav"><X:detail>Not authenticated</X:detail></D:error>';
const NOW = new Date('2026-06-10T12:00:00.000Z');
let clock = NOW;

const mailbox = await smtpCapture(t);
const env = { ...(await testEnv(t)), SMTP_URL: mailbox.url, RATE_LIMIT_ANON_PER_MIN: '100000' };
const app = await buildAccountsApp(t, { env, now: () => clock });
/** The next mail with this subject; the notices of new app passwords in between are passed over. */
async function nextMail(subject: string) {
  for (;;) {
    const mail = await mailbox.next();
    if (mail.raw.split(/\r?\n/).includes(`Subject: ${subject}`)) return mail;
  }
}
const session = await loggedInUser(app, { email: 'Jane.Doe@Example.com' });
await nextMail('Verify your e-mail address');

const makePassword = (name: string, user: Pick<typeof session, 'accessToken' | 'password'> = session) =>
  app.inject({
    method: 'POST',
    url: '/api/users/me/app-passwords',
    headers: bearer(user.accessToken),
    payload: { name, password: user.password },
  });
const propfind = (authorization?: string) =>
  app.inject({ method: 'PROPFIND' as 'GET', url: '/dav/', headers: { depth: '0', ...(authorization ? { authorization } : {}) } });

t.test('POST makes an app password: 201, Location, letters, digits and dashes with at least 128 bits, shown once', async (t) => {
  const res = await makePassword("  Jane's phone  ");
  t.equal(res.statusCode, 201);
  const body = res.json();
  t.same(Object.keys(body).sort(), ['created_at', 'id', 'name', 'password']);
  t.equal(body.name, "Jane's phone", 'the name is trimmed');
  t.equal(res.headers.location, `/api/users/me/app-passwords/${body.id}`);
  t.match(body.password, /^[A-Za-z0-9-]+$/);
  t.ok(body.password.replace(/-/g, '').length * 5 >= 128, 'at least 128 bits (base-32 characters)');
  const again = await makePassword('laptop');
  t.not(again.json().password, body.password);

  const list = await app.inject({ method: 'GET', url: '/api/users/me/app-passwords', headers: bearer(session.accessToken) });
  t.equal(list.statusCode, 200);
  t.strictSame(
    list.json(),
    [
      { id: body.id, name: "Jane's phone", created_at: body.created_at, last_used_at: null },
      { id: again.json().id, name: 'laptop', created_at: again.json().created_at, last_used_at: null },
    ],
    'in id order, never a password or its hash',
  );
  const stored = await app.db.selectFrom('app_passwords').select('secret_hash').where('id', '=', body.id).executeTakeFirstOrThrow();
  t.equal(Buffer.from(stored.secret_hash).length, 32, 'only a 32-byte keyed hash is kept');
  t.notOk(Buffer.from(stored.secret_hash).toString('latin1').includes(body.password));
});

t.test('the name must be 1 to 100 characters after trimming', async (t) => {
  const cases: [string, string][] = [
    ['   ', 'body/name must NOT have fewer than 1 characters'],
    ['x'.repeat(101), 'body/name must NOT have more than 100 characters'],
  ];
  for (const [name, detail] of cases) {
    const res = await makePassword(name);
    t.equal(res.statusCode, 422);
    t.strictSame(res.json(), { detail });
  }
  const missing = await app.inject({
    method: 'POST',
    url: '/api/users/me/app-passwords',
    headers: bearer(session.accessToken),
    payload: { password: session.password },
  });
  t.equal(missing.statusCode, 422);
  t.strictSame(missing.json(), { detail: 'body/name is required' });
});

t.test('HTTP Basic with the username or the e-mail, ignoring case, and an app password signs in on /dav', async (t) => {
  const { password } = (await makePassword('dav')).json();
  for (const login of [session.username, session.username.toUpperCase(), 'jane.doe@example.com', 'JANE.DOE@EXAMPLE.COM']) {
    const res = await propfind(basicAuth(login, password));
    t.equal(res.statusCode, 207, login);
  }
  t.equal((await propfind(`Bearer ${session.accessToken}`)).statusCode, 207, 'a REST access token works too');
});

t.test('missing, malformed or wrong credentials on /dav: 401 with the Basic challenge and an XML body', async (t) => {
  const { password } = (await makePassword('wrong')).json();
  const cases = [
    undefined,
    'Basic',
    'Basic !!!',
    `Basic ${Buffer.from('no-colon').toString('base64')}`,
    basicAuth(session.username, `${password}x`),
    basicAuth('nobody-at-all', password),
    basicAuth(session.username, session.password),
    'Bearer not-a-token',
    `Bearer ${app.tokens.sign(session.id, 'refresh', 60)}`,
    'Digest username="x"',
  ];
  for (const authorization of cases) {
    const res = await propfind(authorization);
    t.equal(res.statusCode, 401, authorization ?? 'none');
    t.equal(res.headers['www-authenticate'], CHALLENGE);
    t.equal(res.headers['content-type'], 'application/xml; charset=utf-8');
    t.equal(res.body, NOT_AUTHENTICATED);
  }
});

t.test(
  'authentication comes before anything else: without valid credentials every request that would be 400, 403, 404, 405, 413 or 415 is 401',
  async (t) => {
    const own = `/dav/addressbooks/${session.id}/contacts/`;
    const other = `/dav/addressbooks/${session.id + 1000}/contacts/`;
    const cases: [string, string, Record<string, string>, string?][] = [
      ['PROPFIND', `${other}`, { depth: '0' }],
      ['GET', `${other}card.vcf`, {}],
      ['DELETE', `${own}missing.vcf`, {}],
      ['PROPFIND', '/dav/nowhere/at/all', { depth: '0' }],
      ['GET', `${own}a%00b.vcf`, {}],
      ['MKCOL', `${own}new/`, {}],
      ['TRACE', own, {}],
      ['COPY', `${own}missing.vcf`, {}],
      ['PROPFIND', own, { depth: 'infinity' }],
      ['PROPFIND', own, { depth: 'sideways' }],
      ['PUT', `${own}card.vcf`, { 'content-type': 'text/plain' }, 'not a card'],
      ['PUT', `${own}card.vcf`, { 'content-type': 'text/vcard' }, 'x'.repeat(2 * 1024 * 1024)],
      ['REPORT', own, { 'content-type': 'application/xml' }, '<not-xml'],
      [
        'REPORT',
        other,
        { 'content-type': 'application/xml' },
        '<D:sync-collection xmlns:D="DAV:"><D:sync-token>forged</D:sync-token></D:sync-collection>',
      ],
    ];
    const { password } = (await makePassword('order')).json();
    for (const authorization of [undefined, basicAuth(session.username, `${password}x`)]) {
      for (const [method, url, headers, payload] of cases) {
        const res = await app.inject({
          method: method as 'GET',
          url,
          headers: { ...headers, ...(authorization ? { authorization } : {}) },
          ...(payload === undefined ? {} : { payload }),
        });
        const label = `${method} ${url.slice(0, 60)} ${authorization ? 'wrong password' : 'no credentials'}`;
        t.equal(res.statusCode, 401, label);
        t.equal(res.headers['www-authenticate'], CHALLENGE, label);
        t.equal(res.body, NOT_AUTHENTICATED, label);
      }
    }
    const signedIn = basicAuth(session.username, password);
    const theirs = await app.inject({ method: 'PROPFIND' as 'GET', url: other, headers: { depth: '0', authorization: signedIn } });
    t.equal(theirs.statusCode, 404, "another user's book is 404 only once signed in");
  },
);

t.test('an app password is refused on /api', async (t) => {
  const { password } = (await makePassword('api')).json();
  const res = await app.inject({ method: 'GET', url: '/api/contacts/', headers: { authorization: basicAuth(session.username, password) } });
  t.equal(res.statusCode, 401);
  t.strictSame(res.json(), { detail: 'Not authenticated' });
  const asBearer = await app.inject({ method: 'GET', url: '/api/contacts/', headers: bearer(password) });
  t.equal(asBearer.statusCode, 401);
});

t.test('last_used_at is null until the first use, then the time of the latest use, at most a minute behind', async (t) => {
  const created = (await makePassword('usage')).json();
  const lastUsed = async () => {
    const list = await app.inject({ method: 'GET', url: '/api/users/me/app-passwords', headers: bearer(session.accessToken) });
    return list.json().find((entry: { id: number }) => entry.id === created.id).last_used_at;
  };
  t.equal(await lastUsed(), null);
  clock = new Date(NOW.getTime() + 1000);
  await propfind(basicAuth(session.username, created.password));
  t.equal(await lastUsed(), clock.toISOString());
  const first = clock;
  clock = new Date(first.getTime() + 30_000);
  await propfind(basicAuth(session.username, created.password));
  t.equal(await lastUsed(), first.toISOString(), 'within a minute: not written again');
  clock = new Date(first.getTime() + 61_000);
  await propfind(basicAuth(session.username, created.password));
  t.equal(await lastUsed(), clock.toISOString());
  clock = NOW;
});

t.test("DELETE revokes at once; another user's or an unknown id is 404", async (t) => {
  const created = (await makePassword('revoked')).json();
  const other = await loggedInUser(app);
  await nextMail('Verify your e-mail address');
  const theirs = await app.inject({
    method: 'DELETE',
    url: `/api/users/me/app-passwords/${created.id}`,
    headers: bearer(other.accessToken),
  });
  t.equal(theirs.statusCode, 404);
  t.strictSame(theirs.json(), { detail: 'App password not found' });
  t.equal(
    (await app.inject({ method: 'DELETE', url: '/api/users/me/app-passwords/999999', headers: bearer(session.accessToken) })).statusCode,
    404,
  );
  t.equal((await propfind(basicAuth(session.username, created.password))).statusCode, 207);
  const res = await app.inject({
    method: 'DELETE',
    url: `/api/users/me/app-passwords/${created.id}`,
    headers: bearer(session.accessToken),
  });
  t.equal(res.statusCode, 204);
  t.equal(res.body, '');
  t.equal((await propfind(basicAuth(session.username, created.password))).statusCode, 401, 'refused from the moment the 204 is sent');
});

t.test(
  'a revocation holds on every instance at once',
  { skip: backend === 'embedded' && 'a second instance needs a shared PostgreSQL' },
  async (t) => {
    const second = await buildApp({ config: await loadConfig(env) });
    t.teardown(() => second.close());
    const created = (await makePassword('two instances')).json();
    const auth = basicAuth(session.username, created.password);
    const viaSecond = () => second.inject({ method: 'PROPFIND' as 'GET', url: '/dav/', headers: { depth: '0', authorization: auth } });
    t.equal((await viaSecond()).statusCode, 207);
    t.equal(
      (await app.inject({ method: 'DELETE', url: `/api/users/me/app-passwords/${created.id}`, headers: bearer(session.accessToken) }))
        .statusCode,
      204,
    );
    t.equal((await viaSecond()).statusCode, 401);
  },
);

t.test('a password reset revokes every app password of the user', async (t) => {
  const user = await loggedInUser(app);
  await nextMail('Verify your e-mail address');
  const created = (await makePassword('before reset', user)).json();
  t.equal((await propfind(basicAuth(user.username, created.password))).statusCode, 207);
  await app.inject({ method: 'POST', url: '/api/auth/forgot-password', payload: { email: user.email } });
  const token = new URL((await nextMail('Reset your password')).link!).searchParams.get('token')!;
  const reset = await app.inject({ method: 'POST', url: '/api/auth/reset-password', payload: { token, password: 'a-new-password-1' } });
  t.equal(reset.statusCode, 200);
  t.equal((await propfind(basicAuth(user.username, created.password))).statusCode, 401);
  const count = await app.db
    .selectFrom('app_passwords')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where('user_id', '=', user.id)
    .executeTakeFirstOrThrow();
  t.equal(Number(count.n), 0);
});

t.test(
  "each failed sign-in counts against the client address's anonymous limit: 429 past it, then before any lookup, right password or not; OPTIONS and the well-known URI are not limited",
  async (t) => {
    const limited = await buildAccountsApp(t, { env: { RATE_LIMIT_ANON_PER_MIN: '3' } });
    const user = await loggedInUser(limited);
    const { password } = (
      await limited.inject({
        method: 'POST',
        url: '/api/users/me/app-passwords',
        headers: bearer(user.accessToken),
        payload: { name: 'x', password: user.password },
      })
    ).json();
    const send = (authorization?: string) =>
      limited.inject({
        method: 'PROPFIND' as 'GET',
        url: '/dav/',
        remoteAddress: '203.0.113.9',
        headers: { depth: '0', ...(authorization ? { authorization } : {}) },
      });
    for (let i = 0; i < 3; i++) t.equal((await send(basicAuth(user.username, 'wrong'))).statusCode, 401);
    const over = await send(basicAuth(user.username, 'wrong'));
    t.equal(over.statusCode, 429);
    t.match(over.headers['retry-after'], /^\d+$/);
    t.match(over.body, /<X:detail>Rate limit exceeded, retry in \d+ seconds<\/X:detail><\/D:error>$/);
    for (let i = 0; i < 5; i++) {
      const refused = await send(basicAuth(user.username, password));
      t.equal(refused.statusCode, 429, 'the right app password too, while the address is over its limit');
      t.match(refused.headers['retry-after'], /^\d+$/);
      t.equal(refused.headers['x-ratelimit-remaining'], '0');
    }
    const stored = await limited.db
      .selectFrom('app_passwords')
      .select('last_used_at')
      .where('user_id', '=', user.id)
      .executeTakeFirstOrThrow();
    t.equal(stored.last_used_at, null, 'refused before the lookup: the app password was never found, so never marked used');
    const elsewhere = await limited.inject({
      method: 'PROPFIND' as 'GET',
      url: '/dav/',
      remoteAddress: '203.0.113.10',
      headers: { depth: '0', authorization: basicAuth(user.username, password) },
    });
    t.equal(elsewhere.statusCode, 207, 'from another address the same app password signs in');
    const options = await limited.inject({ method: 'OPTIONS', url: '/dav/', remoteAddress: '203.0.113.9' });
    t.equal(options.statusCode, 200);
    const wellKnown = await limited.inject({ method: 'GET', url: '/.well-known/carddav', remoteAddress: '203.0.113.9' });
    t.equal(wellKnown.statusCode, 301);
  },
);
