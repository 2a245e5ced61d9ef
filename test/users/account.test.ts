/**
 * The account operations (openapi.yaml, deleteAccount, changePassword, exportAccount; docs/accounts.md):
 * a deletion leaves no row of the user in any table and nothing usable on any instance, a password
 * change ends earlier tokens everywhere and keeps app passwords, and the archive holds exactly what
 * the account had. On the postgres backend a second instance shares the database and Redis.
 */
import { execFileSync } from 'node:child_process';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { sql } from 'kysely';
import t, { type Test } from 'tap';
import { loadConfig } from '../../plugins/config.js';
import { buildApp } from '../../src/app.js';
import { bearer, buildAccountsApp, login, loggedInUser, register, type Session } from '../auth/accounts.js';
import { png } from '../avatars/images.js';
import { basicAuth } from '../carddav/dav-client.js';
import { backend, smtpCapture, testEnv } from '../helper.js';

const mailbox = await smtpCapture(t);
const env = { ...(await testEnv(t)), SMTP_URL: mailbox.url, RATE_LIMIT_ANON_PER_MIN: '100000' };
const app = await buildAccountsApp(t, { env });
/** Another instance on the same PostgreSQL and Redis; on the embedded database (one process's own) the same app. */
const second: FastifyInstance = backend !== 'embedded' ? await buildApp({ config: await loadConfig(env) }) : app;
if (second !== app) t.teardown(() => second.close());

/** The next mail to `to` with this subject; others in between are passed over. */
async function nextMail(to: string, subject: string) {
  for (;;) {
    const mail = await mailbox.next();
    if (mail.to.some((address) => address.toLowerCase() === to.toLowerCase()) && mail.raw.split(/\r?\n/).includes(`Subject: ${subject}`)) {
      return mail;
    }
  }
}

function exactly(t: Test, res: LightMyRequestResponse, status: number, detail: string) {
  t.equal(res.statusCode, status, detail);
  t.equal(res.body, JSON.stringify({ detail }), `${detail}: body`);
}

const get = (instance: FastifyInstance, url: string, token: string) => instance.inject({ method: 'GET', url, headers: bearer(token) });
const propfind = (instance: FastifyInstance, authorization: string) =>
  instance.inject({ method: 'PROPFIND' as 'GET', url: '/dav/', headers: { depth: '0', authorization } });

async function makeAppPassword(user: Session, name: string): Promise<string> {
  const res = await app.inject({
    method: 'POST',
    url: '/api/users/me/app-passwords',
    headers: bearer(user.accessToken),
    payload: { name, password: user.password },
  });
  if (res.statusCode !== 201) throw new Error(`app password: ${res.statusCode} ${res.body}`);
  return res.json<{ password: string }>().password;
}

const CONTACTS = [
  { first_name: 'Ada', last_name: 'Lovelace', email: 'ada@example.com', phone: '+441234567890', birthday: '1915-12-10' },
  {
    first_name: 'Émile',
    last_name: 'Zola; Jr.',
    email: 'emile@example.com',
    phone: '+33123456789',
    birthday: '1940-04-02',
    additional_data: { company: 'Acme, Inc.', tags: ['line\nbreak', 'ünïcode'] },
  },
  { first_name: 'Grace', last_name: 'Hopper', email: 'grace@example.com', phone: '+12025550123', birthday: '1906-12-09' },
];

/** A user holding something in every place an account keeps data: contacts, a tombstone, an avatar, an app password, an idempotency key. */
async function fullUser(): Promise<Session & { appPassword: string; avatarPath: string }> {
  const user = await loggedInUser(app);
  for (const [i, contact] of CONTACTS.entries()) {
    const res = await app.inject({
      method: 'POST',
      url: '/api/contacts/',
      headers: { ...bearer(user.accessToken), 'idempotency-key': `key-${i}` },
      payload: contact,
    });
    if (res.statusCode !== 201) throw new Error(`create: ${res.statusCode} ${res.body}`);
  }
  const gone = await app.inject({
    method: 'POST',
    url: '/api/contacts/',
    headers: bearer(user.accessToken),
    payload: { ...CONTACTS[0], email: 'gone@example.com' },
  });
  await app.inject({ method: 'DELETE', url: `/api/contacts/${gone.json<{ id: number }>().id}`, headers: bearer(user.accessToken) });
  const avatar = await app.inject({
    method: 'PUT',
    url: '/api/users/me/avatar',
    headers: { ...bearer(user.accessToken), 'content-type': 'image/png' },
    payload: await png(),
  });
  if (avatar.statusCode !== 200) throw new Error(`avatar: ${avatar.statusCode} ${avatar.body}`);
  const avatarPath = new URL(avatar.json<{ avatar: string }>().avatar).pathname;
  return { ...user, appPassword: await makeAppPassword(user, 'phone'), avatarPath };
}

/** Every table with a column naming a user (`user_id`, `owner_id`), found in the catalog, so a table added later is covered too. */
async function rowsOfUser(userId: number): Promise<Record<string, number>> {
  const { rows } = await sql<{ table_name: string; column_name: string }>`
    select table_name, column_name from information_schema.columns
    where table_schema = current_schema() and column_name in ('user_id', 'owner_id')
    order by table_name`.execute(app.db);
  const counts: Record<string, number> = {};
  for (const { table_name, column_name } of [...rows, { table_name: 'users', column_name: 'id' }]) {
    const { rows: found } = await sql<{
      n: string;
    }>`select count(*) as n from ${sql.table(table_name)} where ${sql.ref(column_name)} = ${userId}`.execute(app.db);
    counts[table_name] = Number(found[0]!.n);
  }
  return counts;
}

/** The entries of a ZIP archive, read by Python's zipfile (another implementation than the one that wrote it). */
function unzip(archive: Buffer): Record<string, Buffer> {
  const script =
    'import sys, zipfile, io, json, base64\n' +
    'z = zipfile.ZipFile(io.BytesIO(sys.stdin.buffer.read()))\n' +
    'assert z.testzip() is None\n' +
    'print(json.dumps({i.filename: base64.b64encode(z.read(i)).decode() for i in z.infolist()}))\n';
  const listed = JSON.parse(execFileSync('python3', ['-c', script], { input: archive }).toString()) as Record<string, string>;
  return Object.fromEntries(Object.entries(listed).map(([name, data]) => [name, Buffer.from(data, 'base64')]));
}

t.test('DELETE /api/users/me: the password is required and checked; a wrong one counts as a failed sign-in', async (t) => {
  const user = await loggedInUser(app);
  const del = (payload: Record<string, unknown>) =>
    app.inject({ method: 'DELETE', url: '/api/users/me', headers: bearer(user.accessToken), payload });
  exactly(t, await del({}), 422, 'body/password is required');
  exactly(t, await del({ password: 'not-the-password' }), 403, 'Invalid password');
  t.equal((await get(app, '/api/contacts/', user.accessToken)).statusCode, 200, 'nothing was deleted');
  const strict = await buildAccountsApp(t, { env: { SIGN_IN_ACCOUNT_FAILURES: '2', SIGN_IN_ADDRESS_FAILURES: '2' } });
  const guessed = await loggedInUser(strict);
  const guess = (password: string) =>
    strict.inject({ method: 'DELETE', url: '/api/users/me', headers: bearer(guessed.accessToken), payload: { password } });
  exactly(t, await guess('guess-1'), 403, 'Invalid password');
  exactly(t, await guess('guess-2'), 403, 'Invalid password');
  const locked = await guess(guessed.password);
  t.equal(locked.statusCode, 429, 'the account is refused from this address after the guesses, even with the password');
  t.match(locked.json().detail, /^Too many failed sign-ins for this account from this address/);
});

t.test('DELETE /api/users/me removes everything, everywhere', async (t) => {
  const user = await fullUser();
  await nextMail(user.email, 'A new app password was created');
  const daved = basicAuth(user.username, user.appPassword);
  t.equal((await propfind(second, daved)).statusCode, 207, 'the app password works before');
  t.equal((await get(second, user.avatarPath, user.accessToken)).statusCode, 200, 'the avatar shows before');
  t.equal((await get(second, '/api/contacts/', user.accessToken)).statusCode, 200, 'the token works on the other instance');
  t.equal((await get(app, '/api/contacts/', user.accessToken)).headers['x-cache'], 'HIT', 'the list is cached');
  const before = await rowsOfUser(user.id);
  for (const table of [
    'users',
    'user_names',
    'user_emails',
    'contacts',
    'contact_tombstones',
    'address_books',
    'avatars',
    'app_passwords',
    'idempotency_keys',
  ]) {
    t.ok(before[table]! > 0, `${table} held rows of the user before`);
  }

  const res = await app.inject({
    method: 'DELETE',
    url: '/api/users/me',
    headers: bearer(user.accessToken),
    payload: { password: user.password },
  });
  t.equal(res.statusCode, 204);
  t.equal(res.body, '');

  if (app.redisClient) {
    const keys = await app.redisClient.keys(`${app.config.redisKeyPrefix}*{u${user.id}}*`);
    t.same(
      keys.filter((key) => !/:g(-node)?$/.test(key)),
      [],
      "right after the answer, no cached answer, ledger or rate-limit counter of the user is left in Redis (the cache's generation stays: it keeps the old answers unreachable); a request with the dead token counts again, before its 401",
    );
  }

  const after = await rowsOfUser(user.id);
  t.same(after, Object.fromEntries(Object.keys(after).map((table) => [table, 0])), 'no row of the user in any table');
  t.ok(Object.keys(after).length >= 9, 'the catalog named every table with a user column');
  for (const instance of new Set([app, second])) {
    exactly(t, await get(instance, '/api/contacts/', user.accessToken), 401, 'Not authenticated');
    exactly(t, await get(instance, '/api/users/me', user.accessToken), 401, 'Not authenticated');
    t.equal((await propfind(instance, daved)).statusCode, 401, 'the app password is refused on /dav');
    exactly(t, await instance.inject({ method: 'GET', url: user.avatarPath }), 404, 'Avatar not found');
  }
  exactly(
    t,
    await app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refresh_token: user.refreshToken } }),
    401,
    'Invalid refresh token',
  );
  exactly(
    t,
    await app.inject({ method: 'DELETE', url: '/api/users/me', headers: bearer(user.accessToken), payload: { password: user.password } }),
    401,
    'Not authenticated',
  );
  const cached = await app.cache.read(user.id, 'anything');
  t.equal(cached.answer, undefined);
  const notice = await nextMail(user.email, 'Your account was deleted');
  t.match(notice.raw, new RegExp(`The account ${user.username} and everything it held`));
  t.equal(
    (await register(app, { username: user.username, email: user.email, password: 'another-password' })).statusCode,
    201,
    'the username and e-mail are free again',
  );
});

t.test('POST /api/users/me/password: new password, earlier tokens ended on every instance, app passwords kept', async (t) => {
  const user = await loggedInUser(app);
  const appPassword = await makeAppPassword(user, 'laptop');
  const change = (payload: Record<string, unknown>, token = user.accessToken) =>
    app.inject({ method: 'POST', url: '/api/users/me/password', headers: bearer(token), payload });
  exactly(t, await change({ current_password: user.password }), 422, 'body/new_password is required');
  exactly(t, await change({ new_password: 'a-new-password' }), 422, 'body/current_password is required');
  exactly(
    t,
    await change({ current_password: user.password, new_password: 'short' }),
    422,
    'body/new_password must NOT have fewer than 8 characters',
  );
  exactly(
    t,
    await change({ current_password: user.password, new_password: 'é'.repeat(40) }),
    422,
    'body/new_password must be at most 72 bytes in UTF-8',
  );
  exactly(t, await change({ current_password: 'wrong-password', new_password: 'a-new-password' }), 403, 'Invalid password');
  t.equal((await get(second, '/api/contacts/', user.accessToken)).statusCode, 200, 'the token works on the other instance before');

  const res = await change({ current_password: user.password, new_password: 'a-new-password' });
  t.equal(res.statusCode, 204);
  t.equal(res.body, '');
  for (const instance of new Set([app, second]))
    exactly(t, await get(instance, '/api/contacts/', user.accessToken), 401, 'Not authenticated');
  exactly(
    t,
    await app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refresh_token: user.refreshToken } }),
    401,
    'Invalid refresh token',
  );
  t.equal((await propfind(second, basicAuth(user.username, appPassword))).statusCode, 207, 'the app password still works');
  exactly(t, await login(app, user.username, user.password), 401, 'Incorrect username or password');
  const fresh = await login(app, user.username, 'a-new-password');
  t.equal(fresh.statusCode, 200, 'the new password works at once');
  t.equal((await get(second, '/api/contacts/', fresh.json().access_token)).statusCode, 200, 'and its token on the other instance');
  const notice = await nextMail(user.email, 'Your password was changed');
  t.notOk(notice.raw.includes('a-new-password'), 'the notice holds no password');
});

t.test('GET /api/users/me/export: the archive holds exactly what the account has, and its vCard imports back', async (t) => {
  const user = await fullUser();
  const first = await get(app, '/api/contacts/export', user.accessToken);
  const res = await get(app, '/api/users/me/export', user.accessToken);
  t.equal(res.statusCode, 200);
  t.equal(res.headers['content-type'], 'application/zip');
  t.equal(res.headers['content-disposition'], 'attachment; filename="account.zip"');
  t.equal(Number(res.headers['content-length']), res.rawPayload.length);
  t.equal(Number(res.headers['x-ratelimit-remaining']), Number(first.headers['x-ratelimit-remaining']) - 1, 'counted in the export bucket');

  const entries = unzip(res.rawPayload);
  t.same(Object.keys(entries).sort(), ['app-passwords.json', 'avatar.webp', 'contacts.json', 'contacts.vcf', 'profile.json']);
  t.same(
    JSON.parse(entries['profile.json']!.toString()),
    (await get(app, '/api/users/me', user.accessToken)).json(),
    'profile.json is GET /api/users/me',
  );
  t.equal(entries['contacts.vcf']!.toString(), first.body, 'contacts.vcf is the vCard export');
  const pages = [];
  for (let skip = 0; skip < CONTACTS.length; skip += 2) {
    pages.push(...(await get(app, `/api/contacts/?limit=2&skip=${skip}`, user.accessToken)).json<unknown[]>());
  }
  t.same(JSON.parse(entries['contacts.json']!.toString()), pages, 'contacts.json is every page of the list');
  const listed = (await get(app, '/api/users/me/app-passwords', user.accessToken)).json();
  t.same(JSON.parse(entries['app-passwords.json']!.toString()), listed, 'app-passwords.json is the listing');
  t.notOk(entries['app-passwords.json']!.toString().includes(user.appPassword), 'without the secret');
  t.same(entries['avatar.webp'], (await app.inject({ method: 'GET', url: user.avatarPath })).rawPayload, 'avatar.webp is the avatar');

  const other = await loggedInUser(app);
  const imported = await app.inject({
    method: 'POST',
    url: '/api/contacts/import',
    headers: { ...bearer(other.accessToken), 'content-type': 'text/vcard' },
    payload: entries['contacts.vcf'],
  });
  t.same(imported.json(), { created: CONTACTS.length, errors: [] });
  const fields = (contacts: Record<string, unknown>[]) =>
    contacts.map(({ first_name, last_name, email, phone, birthday, additional_data }) => ({
      first_name,
      last_name,
      email,
      phone,
      birthday,
      additional_data,
    }));
  t.same(
    fields((await get(app, '/api/contacts/', other.accessToken)).json()),
    fields(pages as Record<string, unknown>[]),
    'the round trip keeps every field',
  );
});

t.test('an account with nothing but a profile exports empty files and no avatar', async (t) => {
  const user = await loggedInUser(app);
  const entries = unzip((await get(app, '/api/users/me/export', user.accessToken)).rawPayload);
  t.same(Object.keys(entries).sort(), ['app-passwords.json', 'contacts.json', 'contacts.vcf', 'profile.json']);
  t.equal(entries['contacts.vcf']!.length, 0);
  t.equal(entries['contacts.json']!.toString(), '[]');
  t.equal(entries['app-passwords.json']!.toString(), '[]');
});

t.test('a write whose token was checked just before the account went is 401, never 500', async (t) => {
  const user = await loggedInUser(app);
  t.equal((await get(app, '/api/contacts/', user.accessToken)).statusCode, 200, 'the token is checked, its cut-off remembered');
  // Gone without the announcement a deletion makes: as a deletion committing between a request's check and its write.
  await app.db.deleteFrom('users').where('id', '=', user.id).execute();
  exactly(
    t,
    await app.inject({ method: 'POST', url: '/api/contacts/', headers: bearer(user.accessToken), payload: CONTACTS[0] }),
    401,
    'Not authenticated',
  );
});

t.test(
  'deletion and password change share a bucket of 5 a minute per user (RATE_LIMIT_ACCOUNT_PER_MIN); bodies over 4 KiB are 413',
  async (t) => {
    const limited = await buildAccountsApp(t, { env: { RATE_LIMIT_ACCOUNT_PER_MIN: undefined } });
    const user = await loggedInUser(limited);
    const other = await loggedInUser(limited);
    const send = (method: 'POST' | 'DELETE', url: string, token: string, payload: Record<string, unknown>) =>
      limited.inject({ method, url, headers: bearer(token), payload });
    exactly(
      t,
      await send('POST', '/api/users/me/password', user.accessToken, {
        current_password: 'x'.repeat(4096),
        new_password: 'a-new-password',
      }),
      413,
      'Request body is too large',
    );
    for (let i = 0; i < 2; i++) {
      exactly(
        t,
        await send('POST', '/api/users/me/password', user.accessToken, { current_password: 'wrong', new_password: 'a-new-password' }),
        403,
        'Invalid password',
      );
    }
    const last = await send('DELETE', '/api/users/me', user.accessToken, { password: 'wrong' });
    exactly(t, last, 403, 'Invalid password');
    t.equal(last.headers['x-ratelimit-limit'], '5');
    t.equal(last.headers['x-ratelimit-remaining'], '1', 'the 413 counted too: the bucket counts each request as it arrives');
    await send('DELETE', '/api/users/me', user.accessToken, { password: 'wrong' });
    const refused = await send('DELETE', '/api/users/me', user.accessToken, { password: user.password });
    t.equal(refused.statusCode, 429);
    const retry = Number(refused.headers['retry-after']);
    t.ok(retry >= 1 && retry <= 60);
    t.equal(refused.body, JSON.stringify({ detail: `Rate limit exceeded, retry in ${retry} seconds` }));
    t.equal((await get(limited, '/api/contacts/', user.accessToken)).statusCode, 200, 'nothing was deleted');
    t.equal(
      (await send('DELETE', '/api/users/me', other.accessToken, { password: other.password })).statusCode,
      204,
      'another user has a bucket of their own',
    );
  },
);
