import t, { type Test } from 'tap';
import { smtpCapture } from '../helper.js';
import { completePasswordReset, storeLoginRefreshToken } from '../../src/auth/auth.repository.js';
import { bearer, buildAccountsApp, credentials, decodeClaims, login, loggedInUser, register } from './accounts.js';

const FORGOT_ANSWER = { message: 'If an account uses this address, a password-reset e-mail has been sent' };
const BAD_RESET = { detail: 'Invalid or expired reset token' };
const NEW_PASSWORD = 'brand-new-password';

type App = Awaited<ReturnType<typeof buildAccountsApp>>;

function forgot(app: App, email: string) {
  return app.inject({ method: 'POST', url: '/api/auth/forgot-password', payload: { email } });
}

function reset(app: App, token: string, password = NEW_PASSWORD) {
  return app.inject({ method: 'POST', url: '/api/auth/reset-password', payload: { token, password } });
}

/** The token of a mailed reset link, after checking the link's shape. */
function tokenOf(t: Test, link: string | null): string {
  t.match(link, /^http:\/\/contacts\.test\/reset-password\?token=[\w-]+\.[\w-]+\.[\w-]+$/);
  return new URL(link!).searchParams.get('token')!;
}

t.test('forgot-password answers the same for any address and mails only existing accounts', async (t) => {
  const mailbox = await smtpCapture(t);
  const app = await buildAccountsApp(t, { env: { SMTP_URL: mailbox.url } });
  const session = await loggedInUser(app, { email: 'Known@Example.com' });
  await mailbox.next(); // the registration mail

  const unknown = await forgot(app, 'unknown@example.com');
  const known = await forgot(app, 'known@EXAMPLE.com');
  for (const res of [unknown, known]) {
    t.equal(res.statusCode, 202);
    t.same(res.json(), FORGOT_ANSWER);
  }
  t.equal(unknown.body, known.body, 'identical bodies: no user enumeration');
  t.same(
    Object.keys(unknown.headers)
      .filter((h) => !['date', 'x-request-id'].includes(h))
      .sort(),
    Object.keys(known.headers)
      .filter((h) => !['date', 'x-request-id'].includes(h))
      .sort(),
    'identical header names',
  );

  const mail = await mailbox.next();
  t.same(
    mail.to.map((a) => a.toLowerCase()),
    ['known@example.com'],
  );
  t.match(mail.raw, /^Subject: Reset your password\r?$/m);
  tokenOf(t, mail.link);
  t.equal(mailbox.messages.length, 0, 'nothing was sent for the unknown address');
  t.ok(session.id);

  const invalid = await forgot(app, 'not-an-email');
  t.equal(invalid.statusCode, 422);
  t.same(invalid.json(), { detail: 'body/email must match format "email"' });
});

t.test('a reset sets the password, verifies the e-mail and ends every earlier token', async (t) => {
  const mailbox = await smtpCapture(t);
  const app = await buildAccountsApp(t, { env: { SMTP_URL: mailbox.url } });
  const session = await loggedInUser(app);
  await mailbox.next();
  t.equal((await app.inject({ method: 'GET', url: '/api/users/me', headers: bearer(session.accessToken) })).statusCode, 200);

  t.equal((await forgot(app, session.email)).statusCode, 202);
  const token = tokenOf(t, (await mailbox.next()).link);
  const res = await reset(app, token);
  t.equal(res.statusCode, 200);
  t.same(res.json(), { message: 'Password has been reset' });

  const oldAccess = await app.inject({ method: 'GET', url: '/api/users/me', headers: bearer(session.accessToken) });
  t.equal(oldAccess.statusCode, 401, 'the access token from before the reset is dead');
  t.same(oldAccess.json(), { detail: 'Not authenticated' });
  const oldRefresh = await app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refresh_token: session.refreshToken } });
  t.equal(oldRefresh.statusCode, 401);
  t.same(oldRefresh.json(), { detail: 'Invalid refresh token' });

  const oldPassword = await login(app, session.username, session.password);
  t.equal(oldPassword.statusCode, 401);
  // Straight after the reset, in the same second: the new tokens must work.
  const fresh = await login(app, session.username, NEW_PASSWORD);
  t.equal(fresh.statusCode, 200);
  const { access_token, refresh_token } = fresh.json();
  t.equal((await app.inject({ method: 'GET', url: '/api/users/me', headers: bearer(access_token) })).statusCode, 200);
  t.equal((await app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refresh_token } })).statusCode, 200);

  const again = await reset(app, token, 'yet-another-password');
  t.equal(again.statusCode, 400, 'the token works once');
  t.same(again.json(), BAD_RESET);
  t.equal((await login(app, session.username, NEW_PASSWORD)).statusCode, 200, 'the used token changed nothing');
});

t.test('while a link lives, another request mails the same link; once it is used, a new one', async (t) => {
  const mailbox = await smtpCapture(t);
  const app = await buildAccountsApp(t, { env: { SMTP_URL: mailbox.url } });
  const session = await loggedInUser(app);
  await mailbox.next();
  await forgot(app, session.email);
  const mail = await mailbox.next();
  const first = tokenOf(t, mail.link);
  const exp = decodeClaims(first).exp as number;
  t.equal(exp - (decodeClaims(first).iat as number), 900, 'it lives 15 minutes');
  const until = new Date(exp * 1000).toISOString().slice(0, 16).replace('T', ' ');
  const text = mail.raw.replace(/=\r?\n/g, '');
  t.ok(text.includes(`The link works once, until ${until} UTC.`), `the mail says until when (${until} UTC)`);
  await forgot(app, session.email);
  t.equal(tokenOf(t, (await mailbox.next()).link), first, 'the same link again: the first one still works');

  t.equal((await reset(app, first)).statusCode, 200);
  await forgot(app, session.email);
  const second = tokenOf(t, (await mailbox.next()).link);
  t.not(second, first, 'a used link is not mailed again');
  const used = await reset(app, first, 'yet-another-password');
  t.equal(used.statusCode, 400);
  t.same(used.json(), BAD_RESET);
  t.equal((await reset(app, second, 'yet-another-password')).statusCode, 200);
});

t.test('once a link has expired, a request mails a new one', async (t) => {
  const mailbox = await smtpCapture(t);
  const app = await buildAccountsApp(t, { env: { SMTP_URL: mailbox.url, RESET_TOKEN_TTL: '1' } });
  const session = await loggedInUser(app);
  await mailbox.next();
  await forgot(app, session.email);
  const first = tokenOf(t, (await mailbox.next()).link);
  await new Promise((resolve) => setTimeout(resolve, 2100));
  await forgot(app, session.email);
  const second = tokenOf(t, (await mailbox.next()).link);
  t.not(second, first);
  const stored = await app.db.selectFrom('users').select('reset_token_jti').where('id', '=', session.id).executeTakeFirstOrThrow();
  t.equal(stored.reset_token_jti, decodeClaims(second).jti, 'the new one is the pending token');
});

t.test('a reset verifies an unverified account', async (t) => {
  const mailbox = await smtpCapture(t);
  const app = await buildAccountsApp(t, { env: { SMTP_URL: mailbox.url } });
  const creds = credentials();
  t.equal((await register(app, creds)).statusCode, 201);
  await mailbox.next();
  t.equal((await login(app, creds.username, creds.password)).statusCode, 403);
  t.equal((await forgot(app, creds.email)).statusCode, 202);
  // The token is stored, then mailed, after the answer.
  const token = tokenOf(t, (await mailbox.next()).link);
  const row = await app.db
    .selectFrom('users')
    .select(['id', 'reset_token_hash'])
    .where('email', '=', creds.email)
    .executeTakeFirstOrThrow();
  t.match(row.reset_token_hash, /^[0-9a-f]{64}$/, 'a reset token is pending, stored as a SHA-256 digest');
  t.equal((await reset(app, token)).statusCode, 200);
  t.equal((await login(app, creds.username, NEW_PASSWORD)).statusCode, 200);
  const after = await app.db
    .selectFrom('users')
    .select(['is_verified', 'reset_token_hash', 'reset_token_jti'])
    .where('id', '=', row.id)
    .executeTakeFirstOrThrow();
  t.same(after, { is_verified: true, reset_token_hash: null, reset_token_jti: null });
});

t.test('bad reset tokens and passwords', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  const cases: Record<string, string> = {
    garbage: 'garbage',
    accessToken: session.accessToken,
    refreshToken: session.refreshToken,
    verifyToken: app.tokens.sign(session.id, 'verify', 600),
    // Well signed, but never mailed: no digest of it is stored.
    notIssued: app.tokens.sign(session.id, 'reset', 600),
  };
  for (const [name, token] of Object.entries(cases)) {
    const res = await reset(app, token);
    t.equal(res.statusCode, 400, name);
    t.same(res.json(), BAD_RESET, name);
  }
  const tooLong = await reset(app, 'garbage', 'é'.repeat(36) + 'a');
  t.equal(tooLong.statusCode, 422, 'the password is checked before the token');
  t.same(tooLong.json(), { detail: 'body/password must be at most 72 bytes in UTF-8' });
  const tooShort = await reset(app, 'garbage', 'short');
  t.equal(tooShort.statusCode, 422);
  t.same(tooShort.json(), { detail: 'body/password must NOT have fewer than 8 characters' });
  t.equal((await login(app, session.username, session.password)).statusCode, 200, 'the password is unchanged');
});

t.test('an expired reset token is refused', async (t) => {
  const mailbox = await smtpCapture(t);
  const app = await buildAccountsApp(t, { env: { SMTP_URL: mailbox.url, RESET_TOKEN_TTL: '1' } });
  const session = await loggedInUser(app);
  await mailbox.next();
  await forgot(app, session.email);
  const token = tokenOf(t, (await mailbox.next()).link);
  await new Promise((resolve) => setTimeout(resolve, 2100));
  const res = await reset(app, token);
  t.equal(res.statusCode, 400);
  t.same(res.json(), BAD_RESET);
});

t.test('a login that checked the old password cannot store its tokens once a reset landed', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  const user = await app.db.selectFrom('users').selectAll().where('username', '=', session.username).executeTakeFirstOrThrow();
  await app.db.updateTable('users').set({ reset_token_hash: 'pending-reset' }).where('id', '=', user.id).execute();
  // The reset completes between the racing login's password check and its token store.
  const cutOff = await completePasswordReset(app.db, user.id, 'pending-reset', 'new-hash', () => new Date());
  t.type(cutOff, Date);
  t.equal(await storeLoginRefreshToken(app.db, user.id, 'racing-refresh-hash', user.password_hash), false, 'the racing login is refused');
  const after = await app.db
    .selectFrom('users')
    .select(['refresh_token_hash', 'password_hash'])
    .where('id', '=', user.id)
    .executeTakeFirstOrThrow();
  t.same(after, { refresh_token_hash: null, password_hash: 'new-hash' });
  t.equal(
    await completePasswordReset(app.db, user.id, 'pending-reset', 'other-hash', () => new Date()),
    null,
    'a used reset token completes nothing',
  );
});
