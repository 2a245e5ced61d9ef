/**
 * Making app passwords (openapi.yaml, createAppPassword): the account password is required, a
 * wrong one counts as a failed sign-in, 50 per user at most, a notice to the owner, and a bucket
 * per user. The DAV side of app passwords is test/carddav/auth.test.ts.
 */
import type { LightMyRequestResponse } from 'fastify';
import t, { type Test } from 'tap';
import { appPasswordHash } from '../../src/users/app-passwords.service.js';
import { bearer, buildAccountsApp, loggedInUser, type Session } from '../auth/accounts.js';
import { DEFAULT_LIMITS, smtpCapture, TEST_JWT_SECRET } from '../helper.js';

type App = Awaited<ReturnType<typeof buildAccountsApp>>;

function create(app: App, user: Session, body: Record<string, unknown>): Promise<LightMyRequestResponse> {
  return app.inject({ method: 'POST', url: '/api/users/me/app-passwords', headers: bearer(user.accessToken), payload: body });
}

function list(app: App, user: Session): Promise<unknown[]> {
  return app.inject({ method: 'GET', url: '/api/users/me/app-passwords', headers: bearer(user.accessToken) }).then((res) => res.json());
}

function exactly(t: Test, res: LightMyRequestResponse, status: number, detail: string) {
  t.equal(res.statusCode, status, detail);
  t.equal(res.body, JSON.stringify({ detail }), `${detail}: body`);
}

t.test('an access token alone makes nothing: the password is required, and a wrong one is 403', async (t) => {
  const app = await buildAccountsApp(t);
  const user = await loggedInUser(app);
  // The case: the access token still works for its 15 minutes after a logout.
  t.equal((await app.inject({ method: 'POST', url: '/api/auth/logout', headers: bearer(user.accessToken) })).statusCode, 204);
  exactly(t, await create(app, user, { name: 'stolen' }), 422, 'body/password is required');
  exactly(t, await create(app, user, { name: 'stolen', password: 'not-the-password' }), 403, 'Invalid password');
  exactly(t, await create(app, user, { name: 'stolen', password: `${user.password}${'x'.repeat(80)}` }), 403, 'Invalid password');
  exactly(t, await create(app, user, { name: 'stolen', password: '' }), 422, 'body/password must NOT have fewer than 1 characters');
  t.same(await list(app, user), [], 'nothing was made');
  const made = await create(app, user, { name: 'phone', password: user.password });
  t.equal(made.statusCode, 201, 'with the password it is the owner');
  t.equal(made.json().name, 'phone');
});

t.test('a wrong password counts as a failed sign-in of the account, as at login', async (t) => {
  const app = await buildAccountsApp(t, { env: { SIGN_IN_ACCOUNT_FAILURES: '2', SIGN_IN_ADDRESS_FAILURES: '2' } });
  const user = await loggedInUser(app);
  for (let i = 0; i < 2; i++) exactly(t, await create(app, user, { name: 'guess', password: `guess-${i}` }), 403, 'Invalid password');
  const locked = await create(app, user, { name: 'guess', password: user.password });
  t.equal(locked.statusCode, 429, 'the account is now refused from this address, even with the right password');
  const after = Number(locked.headers['retry-after']);
  t.equal(
    locked.body,
    JSON.stringify({
      detail: `Too many failed sign-ins for this account from this address, retry in ${after} seconds or reset the password`,
    }),
  );
  const form = new URLSearchParams({ username: user.username, password: user.password }).toString();
  const login = await app.inject({
    method: 'POST',
    url: '/api/auth/login',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    payload: form,
  });
  t.equal(login.statusCode, 429, 'and so is a login from it: the guesses here count there');
});

t.test('at most 50 per user: concurrent creations past it are 409, exactly; a revocation makes room', async (t) => {
  const app = await buildAccountsApp(t);
  const user = await loggedInUser(app);
  const other = await loggedInUser(app);
  await app.db
    .insertInto('app_passwords')
    .values(
      Array.from({ length: 40 }, (_, i) => ({
        user_id: user.id,
        name: `old ${i}`,
        secret_hash: appPasswordHash(TEST_JWT_SECRET, `old-${i}`),
      })),
    )
    .execute();
  const answers = await Promise.all(Array.from({ length: 15 }, (_, i) => create(app, user, { name: `new ${i}`, password: user.password })));
  const statuses = answers.map((res) => res.statusCode).sort();
  t.same(statuses, [...Array<number>(10).fill(201), ...Array<number>(5).fill(409)], 'ten made, five refused');
  for (const res of answers.filter((answer) => answer.statusCode === 409)) {
    exactly(t, res, 409, 'Too many app passwords (at most 50); revoke one first');
  }
  const listed = (await list(app, user)) as { id: number }[];
  t.equal(listed.length, 50, 'the listing holds the 50');
  t.equal((await create(app, other, { name: 'mine', password: other.password })).statusCode, 201, 'another user has room of their own');

  const removed = await app.inject({
    method: 'DELETE',
    url: `/api/users/me/app-passwords/${listed[0]!.id}`,
    headers: bearer(user.accessToken),
  });
  t.equal(removed.statusCode, 204);
  t.equal((await create(app, user, { name: 'again', password: user.password })).statusCode, 201, 'room again after a revocation');
  exactly(
    t,
    await create(app, user, { name: 'one more', password: user.password }),
    409,
    'Too many app passwords (at most 50); revoke one first',
  );
});

t.test('the owner is mailed a notice naming the new app password and when, never the password', async (t) => {
  const mailbox = await smtpCapture(t);
  const app = await buildAccountsApp(t, { env: { SMTP_URL: mailbox.url } });
  const user = await loggedInUser(app, { email: 'Owner@Example.com' });
  await mailbox.next(); // the registration mail
  const made = (await create(app, user, { name: "Jane's phone", password: user.password })).json();
  const notice = await mailbox.next();
  t.same(
    notice.to.map((address) => address.toLowerCase()),
    ['owner@example.com'],
    "to the owner's address",
  );
  const text = notice.raw
    .replace(/=\r?\n/g, '')
    .replace(/=3D/g, '=')
    .replace(/=27/g, "'");
  t.ok(notice.raw.split(/\r?\n/).includes('Subject: A new app password was created'), 'its subject');
  t.ok(text.includes(`An app password named "Jane's phone" was created for your account ${user.username} at ${made.created_at} (UTC).`));
  t.ok(text.includes('If this was not you, someone knows your password: reset it now, which revokes every app password.'));
  for (const secret of [made.password, made.password.replaceAll('-', '')]) t.notOk(notice.raw.includes(secret), 'no password in it');
  t.equal(notice.link, null, 'and no link');
});

t.test('5 creations a minute per user (RATE_LIMIT_APP_PASSWORD_PER_MIN), then 429', async (t) => {
  const app = await buildAccountsApp(t, { env: DEFAULT_LIMITS });
  const user = await loggedInUser(app);
  const other = await loggedInUser(app);
  for (let i = 0; i < 5; i++) {
    const res = await create(app, user, { name: `device ${i}`, password: user.password });
    t.equal(res.statusCode, 201, `creation ${i + 1}`);
    t.equal(res.headers['x-ratelimit-limit'], '5');
    t.equal(res.headers['x-ratelimit-remaining'], String(4 - i));
  }
  const over = await create(app, user, { name: 'device 6', password: user.password });
  t.equal(over.statusCode, 429);
  const after = Number(over.headers['retry-after']);
  t.ok(Number.isInteger(after) && after >= 1 && after <= 60, `Retry-After ${after} in 1..60`);
  t.equal(over.body, JSON.stringify({ detail: `Rate limit exceeded, retry in ${after} seconds` }));
  t.equal(over.headers['x-ratelimit-remaining'], '0');
  // Counted before the body is read: a wrong password spends the bucket too, and is no cheaper way to guess.
  t.equal((await create(app, user, { name: 'x', password: 'wrong-password' })).statusCode, 429);
  t.equal(
    (await create(app, other, { name: 'device', password: other.password })).statusCode,
    201,
    'another user has a bucket of their own',
  );
  t.equal((await list(app, user)).length, 5, 'listing and the other operations are not counted');
  const metrics = await app.inject({ method: 'GET', url: '/metrics' });
  t.match(metrics.body, /contacts_rate_limited_total\{limit="app-password"\} 2\n/);
});
