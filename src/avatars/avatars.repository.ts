import type { Kysely } from 'kysely';
import type { Database } from '../db/database.js';
import type { UserRow } from '../users/users.repository.js';
import { avatarNameOwner } from './avatar-names.js';

/**
 * Forgets `name`, the user's avatar until now, in `legacy_avatar_names` when it is a name issued
 * before owners were named, so the old URL is 404 from the same commit on.
 */
export async function forgetLegacyAvatarName(trx: Kysely<Database>, userId: number, name: string | null): Promise<void> {
  if (name === null || avatarNameOwner(name) !== 'legacy') return;
  await trx.deleteFrom('legacy_avatar_names').where('name', '=', name).where('user_id', '=', userId).execute();
}

/**
 * Makes `image` the user's avatar under `name`, in one transaction: the user's row is locked first,
 * so concurrent uploads by one user take turns and the last one wins; the previous image is deleted
 * and `users.avatar` set in the same commit, so the old URL is 404 the moment the new one works.
 * Undefined when the user is gone.
 */
export function replaceAvatar(db: Kysely<Database>, userId: number, name: string, image: Buffer): Promise<UserRow | undefined> {
  return db.transaction().execute(async (trx) => {
    const user = await trx.selectFrom('users').select('avatar').where('id', '=', userId).forUpdate().executeTakeFirst();
    if (!user) return undefined;
    await trx.deleteFrom('avatars').where('user_id', '=', userId).execute();
    await forgetLegacyAvatarName(trx, userId, user.avatar);
    await trx.insertInto('avatars').values({ user_id: userId, name, image }).execute();
    return trx.updateTable('users').set({ avatar: name }).where('id', '=', userId).returningAll().executeTakeFirstOrThrow();
  });
}

/** Deletes the user's avatar, if any, and clears `users.avatar` in the same commit (under the user's row lock, as an upload). */
export async function deleteAvatar(db: Kysely<Database>, userId: number): Promise<void> {
  await db.transaction().execute(async (trx) => {
    const user = await trx.selectFrom('users').select('avatar').where('id', '=', userId).forUpdate().executeTakeFirst();
    if (!user) return;
    await trx.deleteFrom('avatars').where('user_id', '=', userId).execute();
    await forgetLegacyAvatarName(trx, userId, user.avatar);
    if (user.avatar !== null) await trx.updateTable('users').set({ avatar: null }).where('id', '=', userId).execute();
  });
}

/** Whose avatar the name `name`, issued before owners were named, is. */
export async function findLegacyAvatarOwner(db: Kysely<Database>, name: string): Promise<number | undefined> {
  const row = await db.selectFrom('legacy_avatar_names').select('user_id').where('name', '=', name).executeTakeFirst();
  return row?.user_id;
}

/** The user's image stored under `name`, as a Buffer on both backends (PGlite reads bytea as a Uint8Array). */
export async function findAvatarImage(db: Kysely<Database>, userId: number, name: string): Promise<Buffer | undefined> {
  const row = await db.selectFrom('avatars').select('image').where('user_id', '=', userId).where('name', '=', name).executeTakeFirst();
  if (!row) return undefined;
  const { image } = row;
  return Buffer.isBuffer(image) ? image : Buffer.from(image.buffer, image.byteOffset, image.byteLength);
}
