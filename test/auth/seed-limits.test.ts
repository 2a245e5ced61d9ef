/**
 * The seed's numbers with the production defaults (openapi.yaml, "Rate limits"): 20 requests a
 * minute per client address without a valid access token, logins included. Stricter protection
 * (the password bucket, the per-account failure throttle) never refuses earlier: 20 wrong logins
 * from one address are 401 twenty times, and the 21st is 429.
 */
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify';
import t, { type Test } from 'tap';
import { build, DEFAULT_LIMITS } from '../helper.js';
import { formBody, verifiedUser } from './accounts.js';

const A = '203.0.113.1';

/** Asserts the exact 401 of a wrong login, counted with `remaining` left. */
function wrongLogin(t: Test, res: LightMyRequestResponse, remaining: number, label: string) {
  t.equal(res.statusCode, 401, label);
  t.equal(res.body, JSON.stringify({ detail: 'Incorrect username or password' }), `${label}: body`);
  t.equal(res.headers['www-authenticate'], 'Bearer', `${label}: WWW-Authenticate`);
  t.equal(res.headers['x-ratelimit-limit'], '20', `${label}: limit`);
  t.equal(res.headers['x-ratelimit-remaining'], String(remaining), `${label}: remaining`);
}

/** Asserts the exact 429 of a full bucket of 20. */
function limited(t: Test, res: LightMyRequestResponse, label: string) {
  t.equal(res.statusCode, 429, label);
  const after = Number(res.headers['retry-after']);
  t.ok(Number.isInteger(after) && after >= 1 && after <= 60, `${label}: Retry-After ${after} in 1..60`);
  t.equal(res.body, JSON.stringify({ detail: `Rate limit exceeded, retry in ${after} seconds` }), `${label}: body`);
  t.equal(res.headers['x-ratelimit-limit'], '20', `${label}: limit`);
  t.equal(res.headers['x-ratelimit-remaining'], '0', `${label}: remaining`);
  t.equal(res.headers['x-ratelimit-reset'], String(after), `${label}: reset`);
}

function loginFrom(app: FastifyInstance, remoteAddress: string, username: string, password: string): Promise<LightMyRequestResponse> {
  const form = formBody({ username, password });
  return app.inject({ method: 'POST', url: '/api/auth/login', payload: form.payload, headers: form.headers, remoteAddress });
}

const app = await build(t, { env: DEFAULT_LIMITS });
// Registered from another address: the test's own requests must not spend A's bucket.
const user = await verifiedUser(app);

t.test('20 wrong logins from one address within a minute: 401 twenty times, then 429', async (t) => {
  for (let i = 0; i < 20; i++) wrongLogin(t, await loginFrom(app, A, user.username, 'wrong-password'), 19 - i, `login ${i + 1}`);
  limited(t, await loginFrom(app, A, user.username, 'wrong-password'), 'login 21');
  limited(t, await loginFrom(app, A, user.username, user.password), 'the right password too: the address has spent its minute');
  // The same bucket as every other request without a token.
  limited(t, await app.inject({ method: 'GET', url: '/api/contacts/', remoteAddress: A }), 'an anonymous list');
  // Another address is untouched, and the owner's account is not locked for it.
  const owner = await loginFrom(app, '203.0.113.2', user.username, user.password);
  t.equal(owner.statusCode, 200, 'the owner from another address signs in');
});

t.test('register, reset-password and every other anonymous request share the 20 with logins', async (t) => {
  const B = '198.51.100.1';
  const requests: InjectOptions[] = [
    { method: 'POST', url: '/api/auth/register', payload: { username: 'x' } },
    { method: 'POST', url: '/api/auth/reset-password', payload: { token: 'nope', password: 'long-enough-1' } },
    { method: 'POST', url: '/api/auth/forgot-password', payload: { email: 'nobody@example.com' } },
    { method: 'POST', url: '/api/auth/login', ...formBody({ username: 'nobody', password: 'wrong-password' }) },
  ];
  const statuses = [422, 400, 202, 401];
  for (let i = 0; i < 20; i++) {
    const res = await app.inject({ ...requests[i % 4]!, remoteAddress: B });
    t.equal(res.statusCode, statuses[i % 4], `request ${i + 1}: ${requests[i % 4]!.url}`);
    t.equal(res.headers['x-ratelimit-remaining'], String(19 - i), `request ${i + 1}: remaining`);
  }
  for (const request of requests) limited(t, await app.inject({ ...request, remoteAddress: B }), `then ${request.url}`);
});
