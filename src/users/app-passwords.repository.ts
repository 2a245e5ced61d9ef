import type { Kysely } from 'kysely';
import type { Database } from '../db/database.js';
import { findUserIdByLogin } from './users.repository.js';

const LISTED = ['id', 'name', 'created_at', 'last_used_at'] as const;

export interface AppPasswordRow {
  id: number;
  name: string;
  created_at: Date;
  last_used_at: Date | null;
}

/**
 * Stores a new app password of `userId` by its keyed hash, if the user's password is still
 * `checkedPasswordHash` (the one the request proved) and the user has fewer than `max`. The user's
 * row is locked meanwhile, so concurrent creations count one after another, and a password reset
 * (which deletes every app password under the same lock) comes wholly before or after.
 */
export async function insertAppPassword(
  db: Kysely<Database>,
  userId: number,
  checkedPasswordHash: string,
  max: number,
  password: { name: string; secretHash: Uint8Array },
): Promise<AppPasswordRow | 'password changed' | 'full'> {
  return db.transaction().execute(async (trx) => {
    const user = await trx.selectFrom('users').select('password_hash').where('id', '=', userId).forUpdate().executeTakeFirst();
    if (user?.password_hash !== checkedPasswordHash) return 'password changed';
    const { count } = await trx
      .selectFrom('app_passwords')
      .select((eb) => eb.fn.countAll<string>().as('count'))
      .where('user_id', '=', userId)
      .executeTakeFirstOrThrow();
    if (Number(count) >= max) return 'full';
    return trx
      .insertInto('app_passwords')
      .values({ user_id: userId, name: password.name, secret_hash: password.secretHash })
      .returning(LISTED)
      .executeTakeFirstOrThrow();
  });
}

/** The user's app passwords in id order. */
export async function listAppPasswords(db: Kysely<Database>, userId: number): Promise<AppPasswordRow[]> {
  return db.selectFrom('app_passwords').select(LISTED).where('user_id', '=', userId).orderBy('id').execute();
}

/** Deletes one of the user's app passwords; false when the user has none with this id. */
export async function deleteAppPassword(db: Kysely<Database>, userId: number, id: number): Promise<boolean> {
  const result = await db.deleteFrom('app_passwords').where('user_id', '=', userId).where('id', '=', id).executeTakeFirst();
  return result.numDeletedRows > 0n;
}

/**
 * The user an app password with this keyed hash signs in, when `login` is that user's username or
 * e-mail address (ignoring case): the user is found by the name, then the password among theirs by
 * the hash (on Citus, one shard each).
 */
export async function findAppPasswordUser(
  db: Kysely<Database>,
  login: string,
  secretHash: Uint8Array,
): Promise<{ userId: number; passwordId: number; lastUsedAt: Date | null } | undefined> {
  const userId = await findUserIdByLogin(db, login);
  if (userId === undefined) return undefined;
  const row = await db
    .selectFrom('app_passwords')
    .select(['id', 'last_used_at'])
    .where('user_id', '=', userId)
    .where('secret_hash', '=', secretHash)
    .executeTakeFirst();
  return row && { userId, passwordId: row.id, lastUsedAt: row.last_used_at };
}

/** Records a use of the user's app password `id`, unless one was recorded less than a minute ago. */
export async function touchAppPassword(db: Kysely<Database>, userId: number, id: number, now: Date): Promise<void> {
  await db
    .updateTable('app_passwords')
    .set({ last_used_at: now })
    .where('user_id', '=', userId)
    .where('id', '=', id)
    .where((eb) => eb.or([eb('last_used_at', 'is', null), eb('last_used_at', '<', new Date(now.getTime() - 60_000))]))
    .execute();
}
