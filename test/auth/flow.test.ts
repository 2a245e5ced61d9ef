import t from 'tap';
import { smtpCapture } from '../helper.js';
import { bearer, buildAccountsApp, credentials, login, register } from './accounts.js';

t.test('register → mailed link → verify → login → refresh → /me → logout → refresh refused', async (t) => {
  const mailbox = await smtpCapture(t);
  const app = await buildAccountsApp(t, { env: { SMTP_URL: mailbox.url } });
  const creds = credentials();

  const registered = await register(app, creds);
  t.equal(registered.statusCode, 201);
  const user = registered.json();
  t.equal(user.is_verified, false);

  const mail = await mailbox.next();
  t.same(mail.to, [creds.email]);
  const link = new URL(mail.link!);
  t.equal(link.origin, 'http://contacts.test');

  const beforeVerify = await login(app, creds.username, creds.password);
  t.equal(beforeVerify.statusCode, 403);
  t.same(beforeVerify.json(), { detail: 'Email not verified' });

  const verified = await app.inject({ method: 'GET', url: `${link.pathname}${link.search}` });
  t.equal(verified.statusCode, 200);
  t.same(verified.json(), { message: 'Email verified' });

  const loggedIn = await login(app, creds.email, creds.password, 'multipart');
  t.equal(loggedIn.statusCode, 200);
  const tokens = loggedIn.json();

  const refreshed = await app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refresh_token: tokens.refresh_token } });
  t.equal(refreshed.statusCode, 200);
  const { access_token } = refreshed.json();

  const me = await app.inject({ method: 'GET', url: '/api/users/me', headers: bearer(access_token) });
  t.equal(me.statusCode, 200);
  t.same(me.json(), { ...user, is_verified: true });

  const out = await app.inject({ method: 'POST', url: '/api/auth/logout', headers: bearer(access_token) });
  t.equal(out.statusCode, 204);

  const refused = await app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refresh_token: tokens.refresh_token } });
  t.equal(refused.statusCode, 401);
  t.same(refused.json(), { detail: 'Invalid refresh token' });
  t.equal(refused.headers['www-authenticate'], 'Bearer');
});
