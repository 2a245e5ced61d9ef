import { type Algorithm, hashSync as argon2Hash } from '@node-rs/argon2';
import bcrypt from 'bcryptjs';
import type { FastifyInstance } from 'fastify';
import t from 'tap';
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

  // The form parser cuts a text field at 4096 bytes: never silently.
  const long = formBody({ username: 'u'.repeat(4097), password: 'whatever' }, 'multipart');
  const tooLong = await app.inject({ method: 'POST', url: '/api/auth/login', ...long });
  t.equal(tooLong.statusCode, 422);
  t.strictSame(tooLong.json(), { detail: 'body/username must be at most 4096 bytes' });
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

async function storedHash(app: FastifyInstance, userId: number): Promise<string> {
  const row = await app.db.selectFrom('users').select('password_hash').where('id', '=', userId).executeTakeFirstOrThrow();
  return row.password_hash;
}

async function setStoredHash(app: FastifyInstance, userId: number, hash: string): Promise<void> {
  await app.db.updateTable('users').set({ password_hash: hash }).where('id', '=', userId).execute();
}

/** An argon2id hash made outside the service, as another system would have. */
function argon2idHash(password: string, memoryKib: number, timeCost: number): string {
  // 2 is Algorithm.Argon2id, a const enum that isolatedModules cannot read.
  return argon2Hash(password, { algorithm: 2 as Algorithm, memoryCost: memoryKib, timeCost, parallelism: 1 });
}

const FAST_ARGON2 = { PASSWORD_HASH: 'argon2id', ARGON2_MEMORY_KIB: '1024', ARGON2_TIME_COST: '1', ARGON2_PARALLELISM: '1' };

t.test('a hash with another bcrypt cost is upgraded at the next successful login', async (t) => {
  const app = await buildAccountsApp(t, { env: { BCRYPT_COST: '5' } });
  const user = await verifiedUser(app);
  const oldHash = bcrypt.hashSync(user.password, 4);
  await setStoredHash(app, user.id, oldHash);

  t.equal((await login(app, user.username, 'wrong-password')).statusCode, 401);
  t.equal(await storedHash(app, user.id), oldHash, 'a failed login changes nothing');

  t.equal((await login(app, user.username, user.password)).statusCode, 200);
  const upgraded = await storedHash(app, user.id);
  t.match(upgraded, /^\$2b\$05\$[./A-Za-z0-9]{53}$/);
  t.equal((await login(app, user.username, user.password)).statusCode, 200, 'the new hash works');
  t.equal(await storedHash(app, user.id), upgraded, 'and is kept');
});

t.test('under PASSWORD_HASH=argon2id a bcrypt hash becomes argon2id at the next successful login', async (t) => {
  const app = await buildAccountsApp(t, { env: FAST_ARGON2 });
  const user = await verifiedUser(app);
  t.match(await storedHash(app, user.id), /^\$argon2id\$v=19\$m=1024,t=1,p=1\$/, 'registration hashes with argon2id');
  const oldHash = bcrypt.hashSync(user.password, 4);
  await setStoredHash(app, user.id, oldHash);

  t.equal((await login(app, user.username, 'wrong-password')).statusCode, 401);
  t.equal(await storedHash(app, user.id), oldHash, 'a failed login changes nothing');

  t.equal((await login(app, user.username, user.password)).statusCode, 200, 'the bcrypt hash still logs in');
  const migrated = await storedHash(app, user.id);
  t.match(migrated, /^\$argon2id\$v=19\$m=1024,t=1,p=1\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}$/);
  t.equal((await login(app, user.username, user.password)).statusCode, 200, 'the argon2id hash logs in');
  t.equal(await storedHash(app, user.id), migrated, 'and is kept');
  t.equal((await login(app, user.username, 'wrong-password')).statusCode, 401);
});

t.test('under PASSWORD_HASH=bcrypt an argon2id hash from another system becomes bcrypt at the next successful login', async (t) => {
  const app = await buildAccountsApp(t, { env: { PASSWORD_HASH: 'bcrypt', BCRYPT_COST: '4' } });
  const user = await verifiedUser(app);
  const migratedIn = argon2idHash(user.password, 1024, 1);
  await setStoredHash(app, user.id, migratedIn);

  t.equal((await login(app, user.username, 'wrong-password')).statusCode, 401);
  t.equal(await storedHash(app, user.id), migratedIn, 'a failed login changes nothing');

  t.equal((await login(app, user.username, user.password)).statusCode, 200, 'the argon2id hash logs in');
  const rehashed = await storedHash(app, user.id);
  t.match(rehashed, /^\$2b\$04\$[./A-Za-z0-9]{53}$/);
  t.equal((await login(app, user.username, user.password)).statusCode, 200, 'the bcrypt hash logs in');
  t.equal(await storedHash(app, user.id), rehashed, 'and is kept');
});

t.test('an argon2id hash with other parameters is rehashed with the configured ones', async (t) => {
  const app = await buildAccountsApp(t, { env: { ...FAST_ARGON2, ARGON2_MEMORY_KIB: '2048', ARGON2_TIME_COST: '2' } });
  const user = await verifiedUser(app);
  await setStoredHash(app, user.id, argon2idHash(user.password, 1024, 1));
  t.equal((await login(app, user.username, user.password)).statusCode, 200);
  const rehashed = await storedHash(app, user.id);
  t.match(rehashed, /^\$argon2id\$v=19\$m=2048,t=2,p=1\$/);
  t.equal((await login(app, user.username, user.password)).statusCode, 200);
  t.equal(await storedHash(app, user.id), rehashed);
});

t.test("the reference implementation's argon2id vector logs in as it is", async (t) => {
  // P-H-C/phc-winner-argon2 src/test.c: "password", salt "somesalt", t=2, m=65536, p=1.
  const reference = '$argon2id$v=19$m=65536,t=2,p=1$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8ArZWb2GRPPc';
  const app = await buildAccountsApp(t, { env: { PASSWORD_HASH: 'argon2id', ARGON2_MEMORY_KIB: '65536', ARGON2_TIME_COST: '2' } });
  const user = await verifiedUser(app);
  await setStoredHash(app, user.id, reference);
  t.equal((await login(app, user.username, 'password')).statusCode, 200);
  t.equal(await storedHash(app, user.id), reference, 'its parameters are the configured ones: no rehash');
  const wrong = await login(app, user.username, 'passwore');
  t.equal(wrong.statusCode, 401);
  t.same(wrong.json(), BAD_LOGIN);
});

t.test('a hash of an unknown scheme never matches', async (t) => {
  const app = await buildAccountsApp(t);
  const user = await verifiedUser(app);
  await app.db.updateTable('users').set({ password_hash: user.password }).where('id', '=', user.id).execute();
  const res = await login(app, user.username, user.password);
  t.equal(res.statusCode, 401);
  t.same(res.json(), BAD_LOGIN);
});
