import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify';
import t, { type Test } from 'tap';
import { buildApp } from '../../src/app.js';
import { loadConfig } from '../../plugins/config.js';
import { bearer, formBody } from '../auth/accounts.js';
import { backend, build, testEnv } from '../helper.js';

/** A user straight in the database (no anonymous requests spent) and an access token for them. */
async function userWithToken(app: FastifyInstance, name: string): Promise<{ id: number; token: string }> {
  const row = await app.db
    .insertInto('users')
    .values({ username: name, email: `${name}@example.com`, password_hash: 'x', is_verified: true })
    .returning('id')
    .executeTakeFirstOrThrow();
  return { id: row.id, token: app.tokens.sign(row.id, 'access', 600) };
}

/** Asserts the X-RateLimit-* headers of a counted request. */
function counted(t: Test, res: LightMyRequestResponse, limit: number, remaining: number, label: string) {
  t.equal(res.headers['x-ratelimit-limit'], String(limit), `${label}: limit`);
  t.equal(res.headers['x-ratelimit-remaining'], String(remaining), `${label}: remaining`);
  const reset = Number(res.headers['x-ratelimit-reset']);
  t.ok(Number.isInteger(reset) && reset >= 1 && reset <= 60, `${label}: reset ${reset} in 1..60`);
}

/** Asserts the exact 429 answer. */
function limited(t: Test, res: LightMyRequestResponse, limit: number) {
  t.equal(res.statusCode, 429);
  const after = Number(res.headers['retry-after']);
  t.ok(Number.isInteger(after) && after >= 1 && after <= 60, `Retry-After ${after} in 1..60`);
  t.equal(res.body, JSON.stringify({ detail: `Rate limit exceeded, retry in ${after} seconds` }));
  t.match(res.headers['content-type'], /^application\/json/);
  t.equal(res.headers['x-ratelimit-limit'], String(limit));
  t.equal(res.headers['x-ratelimit-remaining'], '0');
  t.equal(res.headers['x-ratelimit-reset'], String(after));
}

function notCounted(t: Test, res: LightMyRequestResponse, label: string) {
  t.notOk('x-ratelimit-limit' in res.headers, `${label}: not counted`);
  t.notOk('x-ratelimit-remaining' in res.headers, `${label}: not counted`);
}

const login = formBody({ username: 'nobody', password: 'wrong-password' });

/** Anonymous requests to many different /api routes, all from one address. */
const anonymousRequests: InjectOptions[] = [
  { method: 'POST', url: '/api/auth/request-verification', payload: { email: 'nobody@example.com' } },
  { method: 'GET', url: '/api/auth/verify-email?token=nope' },
  { method: 'GET', url: '/api/contacts/' },
  { method: 'POST', url: '/api/auth/forgot-password', payload: { email: 'nobody@example.com' } },
  { method: 'POST', url: '/api/auth/refresh', payload: { refresh_token: 'nope' } },
  { method: 'GET', url: '/api/users/me' },
  { method: 'DELETE', url: '/api/users/me/avatar' },
  { method: 'GET', url: '/api/no-such-route' },
];

t.test('anonymous: 20 a minute per address, one bucket shared by every /api route', async (t) => {
  const app = await build(t);
  const user = await userWithToken(app, 'limited_user');
  for (let i = 0; i < 20; i++) {
    const request = anonymousRequests[i % anonymousRequests.length]!;
    const res = await app.inject(request);
    t.not(res.statusCode, 429, `request ${i + 1}: ${request.method} ${request.url}`);
    counted(t, res, 20, 19 - i, `request ${i + 1}`);
  }
  for (const request of [
    anonymousRequests[0]!,
    anonymousRequests[2]!,
    { method: 'GET' as const, url: '/api/users/me', headers: bearer('forged') },
  ]) {
    limited(t, await app.inject(request), 20);
  }

  const otherClient = await app.inject({ ...anonymousRequests[1]!, remoteAddress: '198.51.100.7' });
  t.equal(otherClient.statusCode, 400, 'another address has its own bucket');
  counted(t, otherClient, 20, 19, 'other client');

  for (const url of ['/healthz', '/readyz', '/openapi.json', '/openapi.yaml', '/docs', '/redoc', '/reset-password?token=abc']) {
    const res = await app.inject({ method: 'GET', url });
    t.ok(res.statusCode < 400, `${url} still answers (${res.statusCode})`);
    notCounted(t, res, url);
  }

  // A valid access token takes the request out of the anonymous bucket.
  const logout = await app.inject({ method: 'POST', url: '/api/auth/logout', headers: bearer(user.token) });
  t.equal(logout.statusCode, 204);
  notCounted(t, logout, 'authenticated logout');
  const me = await app.inject({ method: 'GET', url: '/api/users/me', headers: bearer(user.token) });
  t.equal(me.statusCode, 200);
  counted(t, me, 5, 4, 'authenticated /me');
});

t.test('GET /api/users/me: 5 a minute per user, then 429', async (t) => {
  const app = await build(t);
  const alice = await userWithToken(app, 'alice');
  const bob = await userWithToken(app, 'bob');
  for (let i = 0; i < 5; i++) {
    const res = await app.inject({ method: 'GET', url: '/api/users/me', headers: bearer(alice.token) });
    t.equal(res.statusCode, 200, `call ${i + 1}`);
    counted(t, res, 5, 4 - i, `call ${i + 1}`);
  }
  limited(t, await app.inject({ method: 'GET', url: '/api/users/me', headers: bearer(alice.token) }), 5);

  // A second token of the same user shares the bucket; another user has their own.
  const aliceAgain = app.tokens.sign(alice.id, 'access', 600);
  limited(t, await app.inject({ method: 'GET', url: '/api/users/me', headers: bearer(aliceAgain) }), 5);
  const bobs = await app.inject({ method: 'GET', url: '/api/users/me', headers: bearer(bob.token) });
  t.equal(bobs.statusCode, 200);
  counted(t, bobs, 5, 4, 'bob');

  const logout = await app.inject({ method: 'POST', url: '/api/auth/logout', headers: bearer(alice.token) });
  t.equal(logout.statusCode, 204, 'other authenticated requests stay unlimited');
  notCounted(t, logout, 'logout');
  const anonymous = await app.inject({ method: 'GET', url: '/api/auth/verify-email?token=x' });
  counted(t, anonymous, 20, 19, 'the anonymous bucket is untouched by /me');
});

t.test('the limits come from RATE_LIMIT_ANON_PER_MIN and RATE_LIMIT_ME_PER_MIN', async (t) => {
  const app = await build(t, { env: { RATE_LIMIT_ANON_PER_MIN: '2', RATE_LIMIT_ME_PER_MIN: '1' } });
  const user = await userWithToken(app, 'configured');
  counted(t, await app.inject(anonymousRequests[1]!), 2, 1, 'anon 1');
  counted(t, await app.inject(anonymousRequests[1]!), 2, 0, 'anon 2');
  limited(t, await app.inject(anonymousRequests[1]!), 2);
  counted(t, await app.inject({ method: 'GET', url: '/api/users/me', headers: bearer(user.token) }), 1, 0, 'me 1');
  limited(t, await app.inject({ method: 'GET', url: '/api/users/me', headers: bearer(user.token) }), 1);
});

t.test('TRUST_PROXY: X-Forwarded-For tells clients apart', async (t) => {
  const app = await build(t, { env: { TRUST_PROXY: 'true', RATE_LIMIT_ANON_PER_MIN: '3' } });
  const from = (address: string) => app.inject({ ...anonymousRequests[1]!, headers: { 'x-forwarded-for': address } });
  for (let i = 0; i < 3; i++) counted(t, await from('203.0.113.1'), 3, 2 - i, `first client ${i + 1}`);
  limited(t, await from('203.0.113.1'), 3);
  const second = await from('203.0.113.2');
  t.equal(second.statusCode, 400);
  counted(t, second, 3, 2, 'second client');
});

t.test('TRUST_PROXY: an X-Forwarded-For that is no address counts against the socket address, not a fresh bucket', async (t) => {
  const app = await build(t, { env: { TRUST_PROXY: 'true', RATE_LIMIT_ANON_PER_MIN: '3' } });
  const from = (forwarded: string) => app.inject({ ...anonymousRequests[1]!, headers: { 'x-forwarded-for': forwarded } });
  counted(t, await from('evil'), 3, 2, 'evil');
  counted(t, await from('evil2'), 3, 1, 'another name, the same bucket');
  counted(t, await app.inject(anonymousRequests[1]!), 3, 0, 'the proxy itself (127.0.0.1), the same bucket');
  limited(t, await from('not-an-address'), 3);
});

t.test('without TRUST_PROXY, X-Forwarded-For is ignored', async (t) => {
  const app = await build(t, { env: { RATE_LIMIT_ANON_PER_MIN: '3' } });
  for (let i = 0; i < 3; i++) {
    const res = await app.inject({ ...anonymousRequests[1]!, headers: { 'x-forwarded-for': `203.0.113.${i + 1}` } });
    counted(t, res, 3, 2 - i, `spoofed ${i + 1}`);
  }
  limited(t, await app.inject({ ...anonymousRequests[1]!, headers: { 'x-forwarded-for': '203.0.113.99' } }), 3);
});

t.test('IPv6 clients are counted per /56, behind a proxy too', async (t) => {
  const app = await build(t, { env: { RATE_LIMIT_ANON_PER_MIN: '3', TRUST_PROXY: 'loopback' } });
  const from = (address: string) => app.inject({ ...anonymousRequests[1]!, headers: { 'x-forwarded-for': address } });
  counted(t, await from('2001:db8:0:100::1'), 3, 2, 'first address');
  counted(t, await from('2001:db8:0:1ff:ffff::2'), 3, 1, 'another /64 of the same /56');
  counted(t, await from('2001:db8:0:1aa::3'), 3, 0, 'a third /64 of it');
  limited(t, await from('2001:db8:0:101:1:2:3:4'), 3);
  counted(t, await from('2001:db8:0:200::1'), 3, 2, 'another /56');
});

t.test('CORS preflights are not counted', async (t) => {
  const app = await build(t, { env: { RATE_LIMIT_ANON_PER_MIN: '1', CORS_ORIGINS: 'https://app.example' } });
  for (let i = 0; i < 3; i++) {
    const res = await app.inject({
      method: 'OPTIONS',
      url: '/api/users/me',
      headers: { origin: 'https://app.example', 'access-control-request-method': 'GET', 'access-control-request-headers': 'authorization' },
    });
    t.equal(res.statusCode, 204, `preflight ${i + 1}`);
    notCounted(t, res, `preflight ${i + 1}`);
  }
  counted(t, await app.inject(anonymousRequests[1]!), 1, 0, 'the bucket is still full');
});

t.test('a Redis outage fails no request, and opens no limit: the process counts meanwhile', async (t) => {
  // Nothing listens on port 1.
  const app = await build(t, { env: { REDIS_URL: 'redis://127.0.0.1:1', RATE_LIMIT_ANON_PER_MIN: '2' } });
  for (let i = 0; i < 2; i++) {
    const res = await app.inject(anonymousRequests[1]!);
    t.equal(res.statusCode, 400, `request ${i + 1} is answered`);
    counted(t, res, 2, 1 - i, `request ${i + 1}`);
  }
  limited(t, await app.inject(anonymousRequests[1]!), 2);
});

const postgresOnly = backend === 'postgres' ? false : 'counters shared through Redis need the postgres backend (real Redis)';

t.test('with Redis, instances share the counters, under REDIS_KEY_PREFIX', { skip: postgresOnly }, async (t) => {
  const env: Record<string, string> = { ...(await testEnv(t)), LOG_LEVEL: 'silent', RATE_LIMIT_ANON_PER_MIN: '3' };
  const config = await loadConfig(env);
  const first = await buildApp({ config });
  t.teardown(() => first.close());
  const second = await buildApp({ config });
  t.teardown(() => second.close());

  counted(t, await first.inject(anonymousRequests[1]!), 3, 2, 'first instance');
  counted(t, await second.inject(anonymousRequests[3]!), 3, 1, 'second instance');
  counted(t, await first.inject(anonymousRequests[0]!), 3, 0, 'first instance again');
  limited(t, await second.inject(anonymousRequests[1]!), 3);

  const keys = await first.redisClient!.keys(`${env.REDIS_KEY_PREFIX}*`);
  t.ok(keys.includes(`${env.REDIS_KEY_PREFIX}rate-limit:anon:127.0.0.1`), `the counter lives under the prefix: ${keys.join(', ')}`);
});

t.test('a token buys nothing on operations that do not require one (no login brute force)', async (t) => {
  const app = await build(t, { env: { RATE_LIMIT_PASSWORD_PER_MIN: '3' } });
  const user = await userWithToken(app, 'token_holder');
  for (let i = 0; i < 3; i++) {
    const res = await app.inject({
      method: 'POST',
      url: '/api/auth/login',
      ...login,
      headers: { ...login.headers, ...bearer(user.token) },
    });
    t.equal(res.statusCode, 401, `guess ${i + 1} is answered`);
    counted(t, res, 3, 2 - i, `guess ${i + 1}`);
  }
  const res = await app.inject({ method: 'POST', url: '/api/auth/login', ...login, headers: { ...login.headers, ...bearer(user.token) } });
  limited(t, res, 3);
});

t.test('a percent-encoded path counts like the path it routes to', async (t) => {
  const app = await build(t, { env: { RATE_LIMIT_ANON_PER_MIN: '2', RATE_LIMIT_PASSWORD_PER_MIN: '2' } });
  for (const url of ['/%61pi/auth/login', '/api/auth/login']) {
    const res = await app.inject({ method: 'POST', url, ...login });
    t.equal(res.statusCode, 401);
  }
  limited(t, await app.inject({ method: 'POST', url: '/%61pi/auth/login', ...login }), 2);
  // Logins spent the anonymous bucket of 127.0.0.1 as well: another address.
  const remoteAddress = '203.0.113.5';
  for (const url of ['/%61pi/no-such-route', '/api/no-such-route'])
    t.equal((await app.inject({ method: 'GET', url, remoteAddress })).statusCode, 404);
  limited(t, await app.inject({ method: 'GET', url: '/%61pi/no-such-route', remoteAddress }), 2);
});

t.test('register, login and reset-password: in the anonymous bucket, and in a bucket of their own per address', async (t) => {
  const app = await build(t, { env: { RATE_LIMIT_PASSWORD_PER_MIN: '3', RATE_LIMIT_ANON_PER_MIN: '5' } });
  const passwordRequests: InjectOptions[] = [
    { method: 'POST', url: '/api/auth/login', ...login },
    { method: 'POST', url: '/api/auth/register', payload: {} },
    { method: 'POST', url: '/api/auth/reset-password', payload: { token: 'nope', password: 'long-enough-1' } },
  ];
  // The headers tell of the bucket with the fewest left: here the password bucket.
  for (const [i, request] of passwordRequests.entries()) counted(t, await app.inject(request), 3, 2 - i, `${request.url}`);
  limited(t, await app.inject(passwordRequests[0]!), 3);
  // Four of the anonymous bucket's five are gone (the refused login counted there first).
  counted(t, await app.inject(anonymousRequests[1]!), 5, 0, 'the anonymous bucket counted them');
  limited(t, await app.inject(anonymousRequests[1]!), 5);

  const from = (remoteAddress: string) => app.inject({ ...passwordRequests[0]!, remoteAddress });
  counted(t, await from('2001:db8:0:100::1'), 3, 2, 'first address');
  counted(t, await from('2001:db8:0:1ff:ffff::2'), 3, 1, 'same /56');
  counted(t, await from('2001:db8:0:1aa::3'), 3, 0, 'same /56');
  limited(t, await from('2001:db8:0:101::4'), 3);
  counted(t, await from('2001:db8:0:200::1'), 3, 2, 'another /56');

  // From an address whose anonymous bucket has fewer left, that bucket's headers and its 429.
  const remoteAddress = '203.0.113.77';
  const rateLimited = async () => (await app.inject({ method: 'GET', url: '/metrics' })).body;
  const before = await rateLimited();
  for (let i = 0; i < 3; i++) counted(t, await app.inject({ ...anonymousRequests[1]!, remoteAddress }), 5, 4 - i, `anonymous ${i + 1}`);
  counted(t, await app.inject({ ...passwordRequests[0]!, remoteAddress }), 5, 1, 'a login: the anonymous bucket has fewer left');
  counted(t, await app.inject({ ...passwordRequests[0]!, remoteAddress }), 5, 0, 'another');
  limited(t, await app.inject({ ...passwordRequests[0]!, remoteAddress }), 5);
  const count = (body: string, limit: string) =>
    Number(new RegExp(`contacts_rate_limited_total\\{limit="${limit}"\\} (\\d+)`).exec(body)![1]);
  const after = await rateLimited();
  t.equal(count(after, 'anonymous') - count(before, 'anonymous'), 1, 'counted as an anonymous 429');
  t.equal(count(after, 'password') - count(before, 'password'), 0, 'not as a password one');
});
