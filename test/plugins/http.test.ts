import { sql } from 'kysely';
import t, { type Test } from 'tap';
import type { LightMyRequestResponse } from 'fastify';
import { buildApp } from '../../src/app.js';
import { loadConfig } from '../../plugins/config.js';
import { bearer, buildAccountsApp, loggedInUser } from '../auth/accounts.js';
import { testEnv } from '../helper.js';

/** The one error shape: JSON `{detail}` and nothing else, with no internals. */
function error(t: Test, res: LightMyRequestResponse, status: number, detail: string) {
  t.equal(res.statusCode, status, detail);
  t.match(res.headers['content-type'], /^application\/json/);
  t.equal(res.body, JSON.stringify({ detail }));
  t.notMatch(res.body, /\bat .+:\d+:\d+|node_modules|\.ts\b|stack/i, 'no stack trace');
}

t.test('unknown routes are 404 Not Found', async (t) => {
  const app = await buildAccountsApp(t);
  error(t, await app.inject({ method: 'GET', url: '/nope' }), 404, 'Not Found');
  error(t, await app.inject({ method: 'GET', url: '/api/nope' }), 404, 'Not Found');
  error(t, await app.inject({ method: 'DELETE', url: '/api/auth/login' }), 404, 'Not Found');
  error(t, await app.inject({ method: 'POST', url: '/api/users/me' }), 404, 'Not Found');
});

t.test('a body in a content type the operation does not take is 415', async (t) => {
  const app = await buildAccountsApp(t);
  const text = await app.inject({ method: 'POST', url: '/api/auth/register', payload: 'hello', headers: { 'content-type': 'text/plain' } });
  error(t, text, 415, 'Unsupported Media Type: text/plain');
  const form = await app.inject({
    method: 'POST',
    url: '/api/auth/register',
    payload: 'username=a&email=b&password=c',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
  });
  error(t, form, 415, 'Unsupported Media Type: application/x-www-form-urlencoded');
  const json = await app.inject({ method: 'POST', url: '/api/auth/login', payload: { username: 'a', password: 'b' } });
  error(t, json, 415, 'Unsupported Media Type: application/json');
  const xml = await app.inject({
    method: 'POST',
    url: '/api/auth/refresh',
    payload: '<a/>',
    headers: { 'content-type': 'application/xml' },
  });
  error(t, xml, 415, 'Unsupported Media Type: application/xml');
});

t.test('a body over 1 MiB is 413', async (t) => {
  const app = await buildAccountsApp(t);
  const payload = JSON.stringify({ refresh_token: 'x'.repeat(1024 * 1024) });
  const res = await app.inject({ method: 'POST', url: '/api/auth/refresh', payload, headers: { 'content-type': 'application/json' } });
  error(t, res, 413, 'Request body is too large');
  const form = `username=a&password=${'x'.repeat(1024 * 1024)}`;
  const login = await app.inject({
    method: 'POST',
    url: '/api/auth/login',
    payload: form,
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
  });
  error(t, login, 413, 'Request body is too large');
});

t.test('malformed or empty JSON is 400', async (t) => {
  const app = await buildAccountsApp(t);
  const json = { 'content-type': 'application/json' };
  error(
    t,
    await app.inject({ method: 'POST', url: '/api/auth/register', payload: '{"username": ', headers: json }),
    400,
    'Malformed JSON body',
  );
  error(t, await app.inject({ method: 'POST', url: '/api/auth/register', payload: "{'a': 1}", headers: json }), 400, 'Malformed JSON body');
  error(t, await app.inject({ method: 'POST', url: '/api/auth/register', payload: '', headers: json }), 400, 'Malformed JSON body');
  error(t, await app.inject({ method: 'POST', url: '/api/auth/forgot-password' }), 400, 'Malformed JSON body');
  error(t, await app.inject({ method: 'POST', url: '/api/auth/refresh', payload: '[1,2', headers: json }), 400, 'Malformed JSON body');
});

t.test('schema failures are 422 naming the field and the problem', async (t) => {
  const app = await buildAccountsApp(t);
  const post = (url: string, payload: unknown) =>
    app.inject({ method: 'POST', url, payload: JSON.stringify(payload), headers: { 'content-type': 'application/json' } });
  error(t, await post('/api/auth/register', { email: 'a@example.com', password: 'long-enough' }), 422, 'body/username is required');
  error(
    t,
    await post('/api/auth/register', { username: 'abc', email: 'nope', password: 'long-enough' }),
    422,
    'body/email must match format "email"',
  );
  error(
    t,
    await post('/api/auth/register', { username: 'abc', email: 'a@example.com', password: 'long-enough', admin: true }),
    422,
    'body/admin is not an allowed property',
  );
  error(
    t,
    await post('/api/auth/register', { username: 5, email: 'a@example.com', password: 'long-enough' }),
    422,
    'body/username must be string',
  );
  error(t, await post('/api/auth/register', []), 422, 'body must be object');
  error(t, await post('/api/auth/register', 'text'), 422, 'body must be object');
  error(t, await post('/api/auth/refresh', { refresh_token: '' }), 422, 'body/refresh_token must NOT have fewer than 1 characters');
  error(t, await post('/api/auth/reset-password', { token: 'x' }), 422, 'body/password is required');
  error(t, await app.inject({ method: 'GET', url: '/api/auth/verify-email' }), 422, 'querystring/token is required');
  error(
    t,
    await app.inject({ method: 'GET', url: `/api/auth/verify-email?token=${'x'.repeat(2049)}` }),
    422,
    'querystring/token must NOT have more than 2048 characters',
  );
});

t.test('authentication comes before content-type and body checks on protected operations', async (t) => {
  const app = await buildAccountsApp(t);
  const res = await app.inject({ method: 'POST', url: '/api/auth/logout', payload: '{bad', headers: { 'content-type': 'text/plain' } });
  error(t, res, 401, 'Not authenticated');
  t.equal(res.headers['www-authenticate'], 'Bearer');
  const session = await loggedInUser(app);
  const authed = await app.inject({ method: 'POST', url: '/api/auth/logout', headers: bearer(session.accessToken) });
  t.equal(authed.statusCode, 204);
});

t.test('500s say only Internal Server Error: no message, no stack, no SQL', async (t) => {
  const config = await loadConfig({ ...(await testEnv(t)), RATE_LIMIT_ANON_PER_MIN: '1000' });
  const app = await buildApp({ config });
  t.teardown(() => app.close());
  app.get('/api/test-only/throw', async () => {
    throw new Error('secret internals at /srv/app.ts:1:1');
  });
  app.get('/api/test-only/sql', async () => sql`select * from no_such_table_here`.execute(app.db));
  await app.ready();
  const thrown = await app.inject({ method: 'GET', url: '/api/test-only/throw' });
  error(t, thrown, 500, 'Internal Server Error');
  t.notMatch(thrown.body, /secret/);
  const database = await app.inject({ method: 'GET', url: '/api/test-only/sql' });
  error(t, database, 500, 'Internal Server Error');
  t.notMatch(database.body, /no_such_table/);
});

t.test('NUL characters and deep nesting are 422, wherever they are', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  const contact = { first_name: 'Ann', last_name: 'Lee', email: 'ann@example.com', phone: '+14155550123', birthday: '1990-01-01' };
  const create = (payload: object) => app.inject({ method: 'POST', url: '/api/contacts/', payload, headers: bearer(session.accessToken) });
  error(t, await create({ ...contact, first_name: 'A\u0000nn' }), 422, 'body/first_name must not contain NUL characters');
  error(
    t,
    await create({ ...contact, additional_data: { notes: ['ok', 'b\u0000d'] } }),
    422,
    'body/additional_data/notes/1 must not contain NUL characters',
  );
  error(
    t,
    await create({ ...contact, additional_data: { 'k\u0000': 1 } }),
    422,
    'body/additional_data must not have keys with NUL characters',
  );
  // Built as text: JSON.stringify itself would overflow on 7000 levels.
  const deep = `${JSON.stringify(contact).slice(0, -1)},"additional_data":{"deep":${'['.repeat(7000)}1${']'.repeat(7000)}}}`;
  const deepRes = await app.inject({
    method: 'POST',
    url: '/api/contacts/',
    payload: deep,
    headers: { ...bearer(session.accessToken), 'content-type': 'application/json' },
  });
  error(t, deepRes, 422, `body/additional_data/deep${'/0'.repeat(30)} must not nest more than 32 levels deep`);
  const list = await app.inject({ method: 'GET', url: '/api/contacts/?query=first_name:eq:a%00b', headers: bearer(session.accessToken) });
  error(t, list, 422, 'querystring/query must not contain NUL characters');
  const login = await app.inject({
    method: 'POST',
    url: '/api/auth/login',
    payload: 'username=a%00b&password=whatever',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
  });
  error(t, login, 422, 'body/username must not contain NUL characters');
  const count = await app.db
    .selectFrom('contacts')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .executeTakeFirstOrThrow();
  t.equal(count.n, 0, 'nothing was stored');
});

t.test('framework-level failures keep the {detail} shape', async (t) => {
  const app = await buildAccountsApp(t);
  error(t, await app.inject({ method: 'GET', url: '/api/contacts/%zz' }), 400, 'Malformed URL');
  const noBoundary = await app.inject({
    method: 'POST',
    url: '/api/auth/login',
    payload: 'x',
    headers: { 'content-type': 'multipart/form-data' },
  });
  error(t, noBoundary, 415, 'Unsupported Media Type: multipart/form-data without a valid boundary');
  const boundary = 'XyZ';
  const withFile = [
    `--${boundary}\r\nContent-Disposition: form-data; name="username"\r\n\r\nann\r\n`,
    `--${boundary}\r\nContent-Disposition: form-data; name="avatar"; filename="a.txt"\r\nContent-Type: text/plain\r\n\r\nhello\r\n`,
    `--${boundary}--\r\n`,
  ].join('');
  const file = await app.inject({
    method: 'POST',
    url: '/api/auth/login',
    payload: withFile,
    headers: { 'content-type': `multipart/form-data; boundary=${boundary}` },
  });
  error(t, file, 422, 'body must not contain files');
  const proto = await app.inject({
    method: 'POST',
    url: '/api/auth/register',
    payload: '{"username":"ann_lee","email":"ann@example.com","password":"correct-horse","__proto__":{"x":1}}',
    headers: { 'content-type': 'application/json' },
  });
  error(t, proto, 422, 'body must not contain "__proto__" or "constructor.prototype" keys');
  const session = await loggedInUser(app);
  const logout = await app.inject({
    method: 'POST',
    url: '/api/auth/logout',
    payload: '{bad',
    headers: { ...bearer(session.accessToken), 'content-type': 'application/json' },
  });
  error(t, logout, 400, 'Malformed JSON body');
});

t.test('every path works with or without its trailing slash', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  for (const url of ['/api/contacts', '/api/contacts/', '/api/users/me/', '/healthz/']) {
    const res = await app.inject({ method: 'GET', url, headers: bearer(session.accessToken) });
    t.equal(res.statusCode, 200, url);
  }
  const anonymous = await app.inject({ method: 'GET', url: '/api/contacts' });
  error(t, anonymous, 401, 'Not authenticated');
});

t.test('every answer carries the baseline security headers; the docs keep their own CSP', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  const answers = {
    ok: await app.inject({ method: 'GET', url: '/api/users/me', headers: bearer(session.accessToken) }),
    error: await app.inject({ method: 'GET', url: '/api/contacts/', headers: bearer('garbage') }),
    unknownRoute: await app.inject({ method: 'GET', url: '/nope' }),
    probe: await app.inject({ method: 'GET', url: '/healthz' }),
  };
  for (const [name, res] of Object.entries(answers)) {
    t.equal(res.headers['x-content-type-options'], 'nosniff', name);
    t.equal(res.headers['x-frame-options'], 'SAMEORIGIN', name);
    t.equal(res.headers['cross-origin-resource-policy'], 'cross-origin', `${name}: other origins may read the API`);
    t.equal(res.headers['content-security-policy'], undefined, `${name}: JSON needs no CSP`);
  }
  const docs = await app.inject({ method: 'GET', url: '/redoc' });
  t.equal(docs.headers['x-content-type-options'], 'nosniff');
  t.match(docs.headers['content-security-policy'], /^default-src 'self'; script-src 'self'/);
});
