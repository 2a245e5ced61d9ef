import t from 'tap';
import { TEST_JWT_SECRET } from '../helper.js';
import { bearer, buildAccountsApp, craftToken, decodeClaims, jti, loggedInUser } from './accounts.js';

const NOT_AUTHENTICATED = { detail: 'Not authenticated' };
const BAD_REFRESH = { detail: 'Invalid refresh token' };

function me(app: Awaited<ReturnType<typeof buildAccountsApp>>, headers: Record<string, string> = {}) {
  return app.inject({ method: 'GET', url: '/api/users/me', headers });
}

function refresh(app: Awaited<ReturnType<typeof buildAccountsApp>>, token: string) {
  return app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refresh_token: token } });
}

t.test('refresh returns a new access token and the refresh token sent', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  const res = await refresh(app, session.refreshToken);
  t.equal(res.statusCode, 200);
  t.equal(res.headers['cache-control'], 'no-store', 'tokens are never cached (RFC 6749 §5.1)');
  const body = res.json();
  t.same(Object.keys(body).sort(), ['access_token', 'refresh_token', 'token_type']);
  t.equal(body.refresh_token, session.refreshToken);
  t.equal(body.token_type, 'bearer');
  t.not(body.access_token, session.accessToken);
  t.equal((await me(app, bearer(body.access_token))).statusCode, 200, 'the new access token works');
  t.equal((await refresh(app, session.refreshToken)).statusCode, 200, 'the refresh token stays usable');
});

t.test('refresh refuses every token that is not the stored refresh token', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  const now = Math.floor(Date.now() / 1000);
  const sub = String(session.id);
  const cases: Record<string, string> = {
    garbage: 'garbage',
    accessToken: session.accessToken,
    verifyToken: app.tokens.sign(session.id, 'verify', 600),
    resetToken: app.tokens.sign(session.id, 'reset', 600),
    validButNotStored: app.tokens.sign(session.id, 'refresh', 600),
    expired: craftToken({ sub, typ: 'refresh', iat: now - 100, exp: now - 1 }),
    algNone: craftToken({ sub, typ: 'refresh' }, { alg: 'none' }),
    otherSecret: craftToken({ sub, typ: 'refresh' }, { secret: 'another-secret-that-is-also-32-characters' }),
    tamperedSignature: `${session.refreshToken.slice(0, -3)}${session.refreshToken.endsWith('abc') ? 'xyz' : 'abc'}`,
  };
  for (const [name, token] of Object.entries(cases)) {
    const res = await refresh(app, token);
    t.equal(res.statusCode, 401, name);
    t.same(res.json(), BAD_REFRESH, name);
    t.equal(res.headers['www-authenticate'], 'Bearer', name);
  }
  const missing = await app.inject({ method: 'POST', url: '/api/auth/refresh', payload: {} });
  t.equal(missing.statusCode, 422);
  t.same(missing.json(), { detail: 'body/refresh_token is required' });
});

t.test('logout revokes the refresh token; the access token lives out its lifetime', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  const out = await app.inject({ method: 'POST', url: '/api/auth/logout', headers: bearer(session.accessToken) });
  t.equal(out.statusCode, 204);
  t.equal(out.body, '');
  const row = await app.db.selectFrom('users').select('refresh_token_hash').where('id', '=', session.id).executeTakeFirstOrThrow();
  t.equal(row.refresh_token_hash, null);
  const res = await refresh(app, session.refreshToken);
  t.equal(res.statusCode, 401);
  t.same(res.json(), BAD_REFRESH);
  t.equal((await me(app, bearer(session.accessToken))).statusCode, 200);

  const anonymous = await app.inject({ method: 'POST', url: '/api/auth/logout' });
  t.equal(anonymous.statusCode, 401);
  t.same(anonymous.json(), NOT_AUTHENTICATED);
  t.equal(anonymous.headers['www-authenticate'], 'Bearer');
});

t.test('JWT attacks on protected endpoints are 401 Not authenticated', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  const victim = await loggedInUser(app);
  const now = Math.floor(Date.now() / 1000);
  const sub = String(session.id);
  const [head, payload, signature] = session.accessToken.split('.') as [string, string, string];
  const claims = JSON.parse(Buffer.from(payload, 'base64url').toString()) as Record<string, unknown>;
  const reencode = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');

  const attacks: Record<string, Record<string, string>> = {
    noHeader: {},
    emptyBearer: { authorization: 'Bearer ' },
    basicScheme: { authorization: `Basic ${Buffer.from('a:b').toString('base64')}` },
    garbage: bearer('not.a.jwt'),
    algNone: bearer(craftToken({ sub, typ: 'access' }, { alg: 'none' })),
    algNoneNoDot: bearer(craftToken({ sub, typ: 'access' }, { alg: 'none' }).slice(0, -1)),
    otherSecret: bearer(craftToken({ sub, typ: 'access' }, { secret: 'another-secret-that-is-also-32-characters' })),
    hs512WithOurSecret: bearer(craftToken({ sub, typ: 'access' }, { alg: 'HS512', secret: TEST_JWT_SECRET })),
    tamperedSignature: bearer(`${head}.${payload}.${signature.slice(0, 10)}${signature[10] === 'A' ? 'B' : 'A'}${signature.slice(11)}`),
    tamperedSubject: bearer(`${head}.${reencode({ ...claims, sub: String(victim.id) })}.${signature}`),
    headerSaysNone: bearer(`${reencode({ alg: 'none', typ: 'JWT' })}.${payload}.${signature}`),
    refreshTokenAsAccess: bearer(session.refreshToken),
    verifyTokenAsAccess: bearer(app.tokens.sign(session.id, 'verify', 600)),
    resetTokenAsAccess: bearer(app.tokens.sign(session.id, 'reset', 600)),
    expired: bearer(craftToken({ sub, typ: 'access', iat: now - 1000, exp: now - 100 })),
    noTyp: bearer(craftToken({ sub, typ: undefined })),
    nonNumericSub: bearer(craftToken({ sub: 'admin', typ: 'access' })),
    subBeyondInteger: bearer(craftToken({ sub: '100000000000000000000', typ: 'access' })),
    subBeyondInt32: bearer(craftToken({ sub: '2147483648', typ: 'access' })),
    subZero: bearer(craftToken({ sub: '0', typ: 'access' })),
    numericSub: bearer(craftToken({ sub: session.id, typ: 'access' })),
    noJti: bearer(craftToken({ sub, typ: 'access', jti: undefined })),
    unknownUser: bearer(craftToken({ sub: '987654', typ: 'access' })),
    issuedBeforeReset: bearer(craftToken({ sub, typ: 'access', jti: jti(Date.now() - 60_000) })),
  };
  await app.db
    .updateTable('users')
    .set({ tokens_valid_after: new Date(Date.now() - 30_000) })
    .where('id', '=', session.id)
    .execute();
  await app.tokens.cutOffChanged(session.id);

  for (const [name, headers] of Object.entries(attacks)) {
    for (const [method, url] of [
      ['GET', '/api/users/me'],
      ['POST', '/api/auth/logout'],
    ] as const) {
      const res = await app.inject({ method, url, headers });
      t.equal(res.statusCode, 401, `${name} ${method} ${url}`);
      t.same(res.json(), NOT_AUTHENTICATED, name);
      t.equal(res.headers['www-authenticate'], 'Bearer', name);
    }
  }
  t.equal((await me(app, bearer(session.accessToken))).statusCode, 200, 'the genuine token still works');
  t.equal((await me(app, { authorization: `bearer   ${session.accessToken}` })).statusCode, 200, 'the scheme is case-insensitive');
});

t.test('a jti that is not a UUIDv7 is accepted, and compared with a reset at whole-second precision', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  const sub = String(session.id);
  const now = Math.floor(Date.now() / 1000);
  const opaque = (iat: number) => bearer(craftToken({ sub, typ: 'access', iat, exp: iat + 900, jti: 'opaque-token-id' }));
  t.equal((await me(app, opaque(now))).statusCode, 200, 'any jti string is accepted');

  // A reset half-way through second `now - 5`: a token of that second may predate it, so it is refused.
  await app.db
    .updateTable('users')
    .set({ tokens_valid_after: new Date((now - 5) * 1000 + 500) })
    .where('id', '=', session.id)
    .execute();
  await app.tokens.cutOffChanged(session.id);
  t.equal((await me(app, opaque(now - 5))).statusCode, 401, 'same second as the reset: refused');
  t.equal((await me(app, opaque(now - 4))).statusCode, 200, 'the next second: accepted');
  const uuidJti = bearer(craftToken({ sub, typ: 'access', iat: now - 5, exp: now + 900, jti: jti((now - 5) * 1000 + 501) }));
  t.equal((await me(app, uuidJti)).statusCode, 200, 'a UUIDv7 jti one millisecond after the reset: accepted');
});

t.test('an expired access token is refused (short ACCESS_TOKEN_TTL)', async (t) => {
  const app = await buildAccountsApp(t, { env: { ACCESS_TOKEN_TTL: '1' } });
  const session = await loggedInUser(app);
  // The clock is the JWT library's; wait past the one-second lifetime rather than fake time.
  await new Promise((resolve) => setTimeout(resolve, 2100));
  const res = await me(app, bearer(session.accessToken));
  t.equal(res.statusCode, 401);
  t.same(res.json(), NOT_AUTHENTICATED);
  const renewed = await refresh(app, session.refreshToken);
  t.equal(renewed.statusCode, 200, 'the refresh token outlives it');
  // Not used here: exp is rounded down to the second, so a 1 s token issued at x.990 s is dead at
  // x+1.000 s, and using it would race the clock ('the new access token works' covers that).
  const claims = decodeClaims(renewed.json().access_token);
  t.equal(Number(claims.exp) - Number(claims.iat), 1, 'the renewed access token gets the short lifetime too');
});

t.test('a deleted user is not authenticated', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  t.equal((await me(app, bearer(session.accessToken))).statusCode, 200, 'known before the deletion');
  // A tool that deletes users out of band announces it, as a password reset does.
  await app.db.deleteFrom('users').where('id', '=', session.id).execute();
  await app.tokens.cutOffChanged(session.id);
  const res = await me(app, bearer(session.accessToken));
  t.equal(res.statusCode, 401);
  t.same(res.json(), NOT_AUTHENTICATED);
  const renewed = await refresh(app, session.refreshToken);
  t.equal(renewed.statusCode, 401);
  t.same(renewed.json(), BAD_REFRESH);
});
