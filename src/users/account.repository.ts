import type { Kysely } from 'kysely';
import { allowLongStatements } from '../../plugins/db.js';
import { forgetLegacyAvatarName } from '../avatars/avatars.repository.js';
import type { Database } from '../db/database.js';
import { deleteUserKeys } from './users.repository.js';

/**
 * Deletes the user and every row the user owns in one transaction, if the password is still
 * `checkedPasswordHash` (the one the request proved): the user's row lock is taken first, so a
 * password change or reset comes wholly before or after. The address book goes first: without it
 * the contacts' deletion trigger writes no tombstones and counts nothing (migration 033), which
 * would otherwise update the book once per contact. The foreign keys cascade to contacts (and their
 * cards), the avatar, app passwords, idempotency keys and large_owners; the tombstones of earlier
 * deletions and the purge horizon have no foreign key, so both go here; so do the username and
 * e-mail keys and a legacy avatar name, which are keyed by the name, not by the user. False when the password
 * changed meanwhile or the user is gone. A book of 100,000 contacts takes seconds, so the
 * transaction's statements have the bulk bound (`statementTimeoutMs`), as an import's do.
 */
export async function deleteAccount(
  db: Kysely<Database>,
  userId: number,
  checkedPasswordHash: string,
  statementTimeoutMs: number,
): Promise<boolean> {
  return db.transaction().execute(async (trx) => {
    await allowLongStatements(trx, statementTimeoutMs);
    const user = await trx
      .selectFrom('users')
      .select(['password_hash', 'username', 'email', 'avatar'])
      .where('id', '=', userId)
      .forUpdate()
      .executeTakeFirst();
    if (user?.password_hash !== checkedPasswordHash) return false;
    await trx.deleteFrom('address_books').where('owner_id', '=', userId).execute();
    await trx.deleteFrom('users').where('id', '=', userId).execute();
    await deleteUserKeys(trx, { id: userId, username: user.username, email: user.email });
    await forgetLegacyAvatarName(trx, userId, user.avatar);
    await trx.deleteFrom('contact_tombstones').where('owner_id', '=', userId).execute();
    await trx.deleteFrom('tombstone_horizons').where('owner_id', '=', userId).execute();
    return true;
  });
}

/**
 * Sets a new password if the password is still `checkedPasswordHash`, revokes the stored refresh
 * token and ends every token issued up to the cut-off, as a reset does (auth.repository.ts,
 * completePasswordReset), but keeps the app passwords. The cut-off is read while holding the
 * user's row lock, so a racing login either stored its refresh token before it or finds the
 * password changed. Null when the password changed meanwhile or the user is gone.
 */
export async function changePassword(
  db: Kysely<Database>,
  userId: number,
  checkedPasswordHash: string,
  newPasswordHash: string,
  clock: () => Date,
): Promise<Date | null> {
  return db.transaction().execute(async (trx) => {
    const user = await trx.selectFrom('users').select('password_hash').where('id', '=', userId).forUpdate().executeTakeFirst();
    if (user?.password_hash !== checkedPasswordHash) return null;
    const cutOff = clock();
    await trx
      .updateTable('users')
      .set({ password_hash: newPasswordHash, refresh_token_hash: null, tokens_valid_after: cutOff })
      .where('id', '=', userId)
      .execute();
    return cutOff;
  });
}

/** The user's avatar image, if any. */
export async function findUserAvatar(db: Kysely<Database>, userId: number): Promise<Uint8Array | undefined> {
  const row = await db.selectFrom('avatars').select('image').where('user_id', '=', userId).executeTakeFirst();
  return row?.image;
}
