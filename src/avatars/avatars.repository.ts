import type { Kysely } from 'kysely';
import type { Database } from '../db/database.js';
import type { UserRow } from '../users/users.repository.js';

/**
 * Makes `image` the user's avatar under `name`, in one transaction: the user's row is locked first,
 * so concurrent uploads by one user take turns and the last one wins; the previous image is deleted
 * in the same commit, so its URL is 404 the moment the new one works. Undefined when the user is gone.
 */
export function replaceAvatar(db: Kysely<Database>, userId: number, name: string, image: Buffer): Promise<UserRow | undefined> {
  return db.transaction().execute(async (trx) => {
    const user = await trx.selectFrom('users').select('id').where('id', '=', userId).forUpdate().executeTakeFirst();
    if (!user) return undefined;
    await trx.deleteFrom('avatars').where('user_id', '=', userId).execute();
    await trx.insertInto('avatars').values({ name, user_id: userId, image }).execute();
    return trx.updateTable('users').set({ avatar: name }).where('id', '=', userId).returningAll().executeTakeFirstOrThrow();
  });
}

/** Deletes the user's avatar, if any; the foreign key clears `users.avatar`. */
export async function deleteAvatar(db: Kysely<Database>, userId: number): Promise<void> {
  await db.deleteFrom('avatars').where('user_id', '=', userId).execute();
}

/** The image stored under `name`, as a Buffer on both backends (PGlite reads bytea as a Uint8Array). */
export async function findAvatarImage(db: Kysely<Database>, name: string): Promise<Buffer | undefined> {
  const row = await db.selectFrom('avatars').select('image').where('name', '=', name).executeTakeFirst();
  if (!row) return undefined;
  const { image } = row;
  return Buffer.isBuffer(image) ? image : Buffer.from(image.buffer, image.byteOffset, image.byteLength);
}
