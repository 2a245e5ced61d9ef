import type { Kysely } from 'kysely';
import type { Database } from '../db/database.js';

/* The credential and token columns of users: what only authentication reads and writes. */

/** The instant (ms) at or before which the user's tokens are dead; null when none; undefined when the user is gone. */
export async function findTokenCutOff(db: Kysely<Database>, userId: number): Promise<number | null | undefined> {
  const user = await db.selectFrom('users').select('tokens_valid_after').where('id', '=', userId).executeTakeFirst();
  return user && (user.tokens_valid_after?.getTime() ?? null);
}

/** Stores the SHA-256 of the one refresh token that may be used (null revokes it). */
export async function setRefreshTokenHash(db: Kysely<Database>, id: number, hash: string | null): Promise<void> {
  await db.updateTable('users').set({ refresh_token_hash: hash }).where('id', '=', id).execute();
}

/** The user's pending reset token, as stored; undefined when the user is gone. */
export function findResetToken(db: Kysely<Database>, id: number): Promise<{ hash: string | null; jti: string | null } | undefined> {
  return db.selectFrom('users').select(['reset_token_hash as hash', 'reset_token_jti as jti']).where('id', '=', id).executeTakeFirst();
}

/**
 * Stores a new reset token (its SHA-256 and jti), superseding the one whose jti was `expectedJti`;
 * false when another was stored meanwhile, which then stays.
 */
export async function replaceResetToken(
  db: Kysely<Database>,
  id: number,
  expectedJti: string | null,
  token: { hash: string; jti: string },
): Promise<boolean> {
  const result = await db
    .updateTable('users')
    .set({ reset_token_hash: token.hash, reset_token_jti: token.jti })
    .where('id', '=', id)
    .where('reset_token_jti', expectedJti === null ? 'is' : '=', expectedJti)
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/** Replaces the password hash (a rehash at login), unless the password changed meanwhile; true when replaced. */
export async function replacePasswordHash(db: Kysely<Database>, id: number, oldHash: string, newHash: string): Promise<boolean> {
  const result = await db
    .updateTable('users')
    .set({ password_hash: newHash })
    .where('id', '=', id)
    .where('password_hash', '=', oldHash)
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/**
 * Stores a login's refresh token only while the password is still the one the login checked, so a
 * login racing a password reset cannot outlive it. False when the password changed meanwhile.
 */
export async function storeLoginRefreshToken(
  db: Kysely<Database>,
  id: number,
  hash: string,
  checkedPasswordHash: string,
): Promise<boolean> {
  const result = await db
    .updateTable('users')
    .set({ refresh_token_hash: hash })
    .where('id', '=', id)
    .where('password_hash', '=', checkedPasswordHash)
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/**
 * Completes a password reset if `resetTokenHash` is still the user's latest reset token: sets the
 * password, marks the e-mail verified, ends every token issued up to the cut-off and revokes every
 * app password. The cut-off
 * is read while holding the user's row lock, so a racing login either stored its refresh token
 * (and signed its tokens) before it, or finds the password changed. Null when the token was used
 * or superseded meanwhile.
 */
export async function completePasswordReset(
  db: Kysely<Database>,
  id: number,
  resetTokenHash: string,
  passwordHash: string,
  clock: () => Date,
): Promise<Date | null> {
  return db.transaction().execute(async (trx) => {
    const locked = await trx
      .selectFrom('users')
      .select('id')
      .where('id', '=', id)
      .where('reset_token_hash', '=', resetTokenHash)
      .forUpdate()
      .executeTakeFirst();
    if (!locked) return null;
    const cutOff = clock();
    await trx
      .updateTable('users')
      .set({
        password_hash: passwordHash,
        is_verified: true,
        refresh_token_hash: null,
        reset_token_hash: null,
        reset_token_jti: null,
        tokens_valid_after: cutOff,
      })
      .where('id', '=', id)
      .execute();
    // App passwords are checked against the database on every request, so this revokes them everywhere at once.
    await trx.deleteFrom('app_passwords').where('user_id', '=', id).execute();
    return cutOff;
  });
}
