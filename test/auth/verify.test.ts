import t from 'tap';
import { smtpCapture } from '../helper.js';
import { buildAccountsApp, craftToken, credentials, register, verifiedUser } from './accounts.js';

const BAD_TOKEN = { detail: 'Invalid or expired verification token' };
const RESEND_ANSWER = { message: 'If an unverified account uses this address, a verification e-mail has been sent' };

function verify(app: Awaited<ReturnType<typeof buildAccountsApp>>, token: string) {
  return app.inject({ method: 'GET', url: `/api/auth/verify-email?token=${encodeURIComponent(token)}` });
}

t.test('the mailed link verifies once; later it answers already verified', async (t) => {
  const mailbox = await smtpCapture(t);
  const app = await buildAccountsApp(t, { env: { SMTP_URL: mailbox.url } });
  const creds = credentials();
  const { id } = (await register(app, creds)).json();
  const { link } = await mailbox.next();
  const url = new URL(link!);
  t.equal(url.pathname, '/api/auth/verify-email');

  const first = await app.inject({ method: 'GET', url: `${url.pathname}${url.search}` });
  t.equal(first.statusCode, 200);
  t.same(first.json(), { message: 'Email verified' });
  const row = await app.db.selectFrom('users').select('is_verified').where('id', '=', id).executeTakeFirstOrThrow();
  t.equal(row.is_verified, true);

  const again = await app.inject({ method: 'GET', url: `${url.pathname}${url.search}` });
  t.equal(again.statusCode, 200);
  t.same(again.json(), { message: 'Email already verified' });
});

t.test('invalid, tampered, expired, foreign and wrong-type tokens are 400', async (t) => {
  const app = await buildAccountsApp(t);
  const { id } = (await register(app, credentials())).json();
  const good = app.tokens.sign(id, 'verify', 600);
  const [head, payload, signature] = good.split('.') as [string, string, string];
  const now = Math.floor(Date.now() / 1000);
  const bad: Record<string, string> = {
    garbage: 'not-a-token',
    tamperedSignature: `${head}.${payload}.${signature.slice(0, -2)}${signature.endsWith('AA') ? 'BB' : 'AA'}`,
    tamperedPayload: `${head}.${Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(payload, 'base64url').toString()), sub: '999' })).toString('base64url')}.${signature}`,
    expired: craftToken({ sub: String(id), typ: 'verify', iat: now - 100, exp: now - 10 }),
    otherSecret: craftToken({ sub: String(id), typ: 'verify' }, { secret: 'another-secret-that-is-also-32-characters' }),
    algNone: craftToken({ sub: String(id), typ: 'verify' }, { alg: 'none' }),
    accessToken: app.tokens.sign(id, 'access', 600),
    refreshToken: app.tokens.sign(id, 'refresh', 600),
    resetToken: app.tokens.sign(id, 'reset', 600),
    unknownUser: app.tokens.sign(id + 1000, 'verify', 600),
  };
  for (const [name, token] of Object.entries(bad)) {
    const res = await verify(app, token);
    t.equal(res.statusCode, 400, name);
    t.same(res.json(), BAD_TOKEN, name);
  }
  const row = await app.db.selectFrom('users').select('is_verified').where('id', '=', id).executeTakeFirstOrThrow();
  t.equal(row.is_verified, false, 'none of them verified the user');

  const missing = await app.inject({ method: 'GET', url: '/api/auth/verify-email' });
  t.equal(missing.statusCode, 422);
  t.same(missing.json(), { detail: 'querystring/token is required' });
});

t.test('resending a verification link answers the same whatever the account state', async (t) => {
  const mailbox = await smtpCapture(t);
  const app = await buildAccountsApp(t, { env: { SMTP_URL: mailbox.url } });
  const unverified = credentials({ email: 'Pending@Example.com' });
  t.equal((await register(app, unverified)).statusCode, 201);
  await mailbox.next(); // the registration mail
  const verified = await verifiedUser(app);
  await mailbox.next();

  const answers = [];
  for (const email of ['nobody@example.com', verified.email, 'pending@example.com']) {
    const res = await app.inject({ method: 'POST', url: '/api/auth/request-verification', payload: { email } });
    answers.push(res);
    t.equal(res.statusCode, 202, email);
    t.same(res.json(), RESEND_ANSWER, email);
  }
  t.equal(answers[0]!.body, answers[1]!.body);
  t.equal(answers[1]!.body, answers[2]!.body);

  // Only the unverified account gets a mail, matched ignoring case.
  const mail = await mailbox.next();
  t.same(
    mail.to.map((a) => a.toLowerCase()),
    ['pending@example.com'],
  );
  t.equal(mailbox.messages.length, 0, 'no mail for the unknown or the verified address');
  const res = await app.inject({ method: 'GET', url: new URL(mail.link!).pathname + new URL(mail.link!).search });
  t.same(res.json(), { message: 'Email verified' });

  const invalid = await app.inject({ method: 'POST', url: '/api/auth/request-verification', payload: { email: 'nope' } });
  t.equal(invalid.statusCode, 422);
  t.same(invalid.json(), { detail: 'body/email must match format "email"' });
});
