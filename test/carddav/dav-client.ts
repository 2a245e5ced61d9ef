/** Helpers shared by the CardDAV tests: a user with an app password, and DAV requests through inject. */
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { createUser, type TestUser } from '../contacts/fixtures.js';

export interface DavUser extends TestUser {
  username: string;
  appPassword: string;
  /** `Authorization: Basic …` with the username and the app password. */
  basic: string;
}

/** The account password of every davUser. */
const DAV_ACCOUNT_PASSWORD = 'correct-horse-battery';

/** A verified user with one app password made over REST (which takes the account password). */
export async function davUser(app: FastifyInstance): Promise<DavUser> {
  const user = await createUser(app);
  const { username } = await app.db
    .updateTable('users')
    .set({ password_hash: await app.passwords.hash(DAV_ACCOUNT_PASSWORD, 'test') })
    .where('id', '=', user.id)
    .returning('username')
    .executeTakeFirstOrThrow();
  // A sign-in finds the user by this key (migration 034); createUser writes the user row alone.
  await app.db.insertInto('user_names').values({ name: username.toLowerCase(), user_id: user.id }).execute();
  const res = await app.inject({
    method: 'POST',
    url: '/api/users/me/app-passwords',
    headers: { authorization: `Bearer ${user.token}` },
    payload: { name: 'test device', password: DAV_ACCOUNT_PASSWORD },
  });
  if (res.statusCode !== 201) throw new Error(`app password: ${res.statusCode} ${res.body}`);
  const appPassword = res.json<{ password: string }>().password;
  return { ...user, username, appPassword, basic: basicAuth(username, appPassword) };
}

export function basicAuth(login: string, password: string): string {
  return `Basic ${Buffer.from(`${login}:${password}`, 'utf8').toString('base64')}`;
}

export interface DavCall {
  (method: string, url: string, body?: string, headers?: Record<string, string>): Promise<LightMyRequestResponse>;
}

/** DAV requests as `user` (an XML body gets `application/xml` unless headers say otherwise). */
export function davAs(app: FastifyInstance, user: Pick<DavUser, 'basic'>): DavCall {
  return (method, url, body, headers = {}) =>
    app.inject({
      method: method as 'GET',
      url,
      headers: {
        authorization: user.basic,
        ...(body !== undefined && body.startsWith('<') ? { 'content-type': 'application/xml' } : {}),
        ...headers,
      },
      ...(body === undefined ? {} : { payload: body }),
    });
}

/** A minimal vCard 3.0 with this UID and name; `extra` lines go before END. */
export function card(uid: string, fn: string, extra: string[] = []): string {
  return ['BEGIN:VCARD', 'VERSION:3.0', `UID:${uid}`, `FN:${fn}`, ...extra, 'END:VCARD', ''].join('\r\n');
}

/** The D:href texts of a multistatus body, in order. */
export function responseHrefs(body: string): string[] {
  return [...body.matchAll(/<D:response><D:href>([^<]*)<\/D:href>/g)].map((match) => match[1]!);
}

/** An ETag as it stands in XML text (the builder escapes its quotes). */
export function xmlTag(etag: string | string[] | undefined): string {
  return String(etag).replaceAll('"', '&quot;');
}
