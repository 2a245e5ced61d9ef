import t from 'tap';
import { hashPassword } from '../../src/auth/passwords.js';
import { buildAccountsApp, credentials, decodeClaims, formBody, login, register, verifiedUser } from './accounts.js';

const BAD_LOGIN = { detail: 'Incorrect username or password' };

t.test('login takes a urlencoded or a multipart form, by username or e-mail ignoring case', async (t) => {
  const app = await buildAccountsApp(t);
  const user = await verifiedUser(app, { username: 'Mixed.Case', email: 'Mixed.Case@Example.com' });
  for (const kind of ['urlencoded', 'multipart'] as const) {
    for (const name of ['Mixed.Case', 'mixed.case', 'MIXED.CASE', 'Mixed.Case@Example.com', 'mixed.case@example.COM']) {
      const res = await login(app, name, user.password, kind);
      t.equal(res.statusCode, 200, `${kind}: ${name}`);
      t.equal(res.headers['cache-control'], 'no-store', 'tokens are never cached (RFC 6749 §5.1)');
      const body = res.json();
      t.same(Object.keys(body).sort(), ['access_token', 'refresh_token', 'token_type']);
      t.equal(body.token_type, 'bearer');
      t.match(decodeClaims(body.access_token), { sub: String(user.id), typ: 'access' });
      t.match(decodeClaims(body.refresh_token), { sub: String(user.id), typ: 'refresh' });
    }
  }
});

t.test('tokens carry sub, typ, iat, exp and a UUIDv7 jti, with the configured lifetimes', async (t) => {
  const app = await buildAccountsApp(t, { env: { ACCESS_TOKEN_TTL: '120', REFRESH_TOKEN_TTL: '3600' } });
  const user = await verifiedUser(app);
  const before = Date.now();
  const body = (await login(app, user.username, user.password)).json();
  const access = decodeClaims(body.access_token) as { sub: string; typ: string; iat: number; exp: number; jti: string };
  const refresh = decodeClaims(body.refresh_token) as typeof access;
  t.same(Object.keys(access).sort(), ['exp', 'iat', 'jti', 'sub', 'typ']);
  t.equal(access.exp - access.iat, 120);
  t.equal(refresh.exp - refresh.iat, 3600);
  t.match(access.jti, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  const issuedMs = parseInt(access.jti.replace(/-/g, '').slice(0, 12), 16);
  t.ok(issuedMs >= before && issuedMs <= Date.now(), 'the jti starts with the issue time in ms');
  const header = JSON.parse(Buffer.from(body.access_token.split('.')[0], 'base64url').toString());
  t.equal(header.alg, 'HS256');
});

t.test('wrong password and unknown user get the same 401 with a Bearer challenge', async (t) => {
  const app = await buildAccountsApp(t);
  const user = await verifiedUser(app);
  const wrongPassword = await login(app, user.username, 'wrong-password');
  const unknownUser = await login(app, 'nobody_here', 'wrong-password');
  const unknownEmail = await login(app, 'nobody@example.com', user.password);
  for (const res of [wrongPassword, unknownUser, unknownEmail]) {
    t.equal(res.statusCode, 401);
    t.same(res.json(), BAD_LOGIN);
    t.equal(res.headers['www-authenticate'], 'Bearer');
  }
  t.equal(wrongPassword.body, unknownUser.body, 'identical bodies: no user enumeration');
  const multipart = await login(app, user.username, 'wrong-password', 'multipart');
  t.equal(multipart.statusCode, 401);
  t.same(multipart.json(), BAD_LOGIN);
});

t.test('an unverified user gets 403 only with the right password', async (t) => {
  const app = await buildAccountsApp(t);
  const creds = credentials();
  t.equal((await register(app, creds)).statusCode, 201);
  const right = await login(app, creds.username, creds.password);
  t.equal(right.statusCode, 403);
  t.same(right.json(), { detail: 'Email not verified' });
  const wrong = await login(app, creds.username, 'wrong-password');
  t.equal(wrong.statusCode, 401);
  t.same(wrong.json(), BAD_LOGIN);
  t.equal(wrong.headers['www-authenticate'], 'Bearer');
});

t.test('login refuses JSON and validates the form', async (t) => {
  const app = await buildAccountsApp(t);
  const json = await app.inject({ method: 'POST', url: '/api/auth/login', payload: { username: 'a', password: 'b' } });
  t.equal(json.statusCode, 415);
  t.same(json.json(), { detail: 'Unsupported Media Type: application/json' });

  const missing = formBody({ username: 'someone' });
  const noPassword = await app.inject({ method: 'POST', url: '/api/auth/login', ...missing });
  t.equal(noPassword.statusCode, 422);
  t.same(noPassword.json(), { detail: 'body/password is required' });

  const extra = formBody({ username: 'someone', password: 'whatever', grant_type: 'password' }, 'multipart');
  const extraField = await app.inject({ method: 'POST', url: '/api/auth/login', ...extra });
  t.equal(extraField.statusCode, 422);
  t.same(extraField.json(), { detail: 'body/grant_type is not an allowed property' });
});

t.test('a newer login replaces the stored refresh token, stored as a SHA-256 digest', async (t) => {
  const app = await buildAccountsApp(t);
  const user = await verifiedUser(app);
  const first = (await login(app, user.username, user.password)).json();
  const second = (await login(app, user.username, user.password)).json();
  const row = await app.db.selectFrom('users').select('refresh_token_hash').where('id', '=', user.id).executeTakeFirstOrThrow();
  const { createHash } = await import('node:crypto');
  t.equal(row.refresh_token_hash, createHash('sha256').update(second.refresh_token).digest('hex'));

  const old = await app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refresh_token: first.refresh_token } });
  t.equal(old.statusCode, 401);
  t.same(old.json(), { detail: 'Invalid refresh token' });
  const current = await app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refresh_token: second.refresh_token } });
  t.equal(current.statusCode, 200);
});

t.test('a hash with another cost is upgraded at the next successful login', async (t) => {
  const app = await buildAccountsApp(t, { env: { BCRYPT_COST: '5' } });
  const user = await verifiedUser(app);
  const oldHash = await hashPassword(user.password, 4);
  await app.db.updateTable('users').set({ password_hash: oldHash }).where('id', '=', user.id).execute();

  t.equal((await login(app, user.username, 'wrong-password')).statusCode, 401);
  const afterWrong = await app.db.selectFrom('users').select('password_hash').where('id', '=', user.id).executeTakeFirstOrThrow();
  t.equal(afterWrong.password_hash, oldHash, 'a failed login changes nothing');

  t.equal((await login(app, user.username, user.password)).statusCode, 200);
  const upgraded = await app.db.selectFrom('users').select('password_hash').where('id', '=', user.id).executeTakeFirstOrThrow();
  t.match(upgraded.password_hash, /^\$2[aby]\$05\$/);
  t.equal((await login(app, user.username, user.password)).statusCode, 200, 'the new hash works');
});

t.test('a hash of an unknown scheme never matches', async (t) => {
  const app = await buildAccountsApp(t);
  const user = await verifiedUser(app);
  await app.db.updateTable('users').set({ password_hash: user.password }).where('id', '=', user.id).execute();
  const res = await login(app, user.username, user.password);
  t.equal(res.statusCode, 401);
  t.same(res.json(), BAD_LOGIN);
});
