/**
 * Avatars named before names began with the owner's id (migration 034): the 22 random characters
 * alone, whose owner `legacy_avatar_names` says. They are served until replaced or removed, and
 * nothing of them is left after either, or after the account is deleted.
 */
import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import sharp from 'sharp';
import t, { type Test } from 'tap';
import { bearer, buildAccountsApp, loggedInUser, type Session } from '../auth/accounts.js';
import { png } from './images.js';

const app = await buildAccountsApp(t);
const image = await sharp(await png())
  .resize(256, 256)
  .webp()
  .toBuffer();

/** Stores an avatar as migration 034 leaves one issued before it; its URL. */
async function legacyAvatar(session: Session): Promise<string> {
  const name = randomBytes(16).toString('base64url');
  await app.db.insertInto('avatars').values({ user_id: session.id, name, image }).execute();
  await app.db.insertInto('legacy_avatar_names').values({ name, user_id: session.id }).execute();
  await app.db.updateTable('users').set({ avatar: name }).where('id', '=', session.id).execute();
  return `http://contacts.test/avatars/${name}.webp`;
}

const legacyNames = (userId: number) => app.db.selectFrom('legacy_avatar_names').select('name').where('user_id', '=', userId).execute();

async function status(t: Test, url: string, expected: number): Promise<void> {
  const res = await app.inject({ method: 'GET', url: new URL(url).pathname });
  t.equal(res.statusCode, expected, `${url}: ${expected}`);
  if (expected === 200) {
    t.ok(res.rawPayload.equals(image), 'the stored image');
    t.equal(res.headers['cache-control'], 'public, max-age=3600');
  } else t.same(res.json(), { detail: 'Avatar not found' });
}

function me(session: Session): Promise<{ avatar: string | null }> {
  return app.inject({ method: 'GET', url: '/api/users/me', headers: bearer(session.accessToken) }).then((res) => res.json());
}

function put(app: FastifyInstance, session: Session, bytes: Buffer) {
  return app.inject({
    method: 'PUT',
    url: '/api/users/me/avatar',
    payload: bytes,
    headers: { 'content-type': 'image/png', ...bearer(session.accessToken) },
  });
}

t.test('served at its old URL, which the user still shows, until an upload replaces it', async (t) => {
  const session = await loggedInUser(app);
  const old = await legacyAvatar(session);
  t.equal((await me(session)).avatar, old);
  await status(t, old, 200);
  const res = await put(app, session, await png());
  t.equal(res.statusCode, 200);
  t.match(res.json().avatar, new RegExp(`^http://contacts\\.test/avatars/${session.id}-[A-Za-z0-9_-]{22}\\.webp$`));
  await status(t, old, 404);
  t.same(await legacyNames(session.id), [], 'the old name is forgotten in the same commit');
});

t.test('a removal forgets it', async (t) => {
  const session = await loggedInUser(app);
  const old = await legacyAvatar(session);
  const res = await app.inject({ method: 'DELETE', url: '/api/users/me/avatar', headers: bearer(session.accessToken) });
  t.equal(res.statusCode, 204);
  await status(t, old, 404);
  t.equal((await me(session)).avatar, null);
  t.same(await legacyNames(session.id), []);
});

t.test('a deleted account leaves no legacy name', async (t) => {
  const session = await loggedInUser(app);
  const old = await legacyAvatar(session);
  const other = await loggedInUser(app);
  const kept = await legacyAvatar(other);
  const res = await app.inject({
    method: 'DELETE',
    url: '/api/users/me',
    headers: bearer(session.accessToken),
    payload: { password: session.password },
  });
  t.equal(res.statusCode, 204);
  await status(t, old, 404);
  t.same(await legacyNames(session.id), []);
  await status(t, kept, 200);
});

t.test("a legacy name is served only as its owner's current avatar", async (t) => {
  const session = await loggedInUser(app);
  const name = randomBytes(16).toString('base64url');
  // The table names the user, but the user's avatar is another (or none): the avatar row decides.
  await app.db.insertInto('legacy_avatar_names').values({ name, user_id: session.id }).execute();
  await status(t, `http://contacts.test/avatars/${name}.webp`, 404);
  await status(t, `http://contacts.test/avatars/${session.id}-${name}.webp`, 404);
});
