import { type Kysely, type Selectable, sql } from 'kysely';
import type { Database, UsersTable } from '../db/database.js';

export type UserRow = Selectable<UsersTable>;

/** Whether the user exists and a token issued at `issuedAtMs` postdates their latest password reset. */
export async function isTokenCurrent(db: Kysely<Database>, userId: number, issuedAtMs: number): Promise<boolean> {
  const user = await db.selectFrom('users').select('tokens_valid_after').where('id', '=', userId).executeTakeFirst();
  if (!user) return false;
  return user.tokens_valid_after === null || issuedAtMs > user.tokens_valid_after.getTime();
}

/** The user with this id, if any. */
export function findUserById(db: Kysely<Database>, id: number): Promise<UserRow | undefined> {
  return db.selectFrom('users').selectAll().where('id', '=', id).executeTakeFirst();
}

/** The user whose e-mail address is `email`, ignoring case. */
export function findUserByEmail(db: Kysely<Database>, email: string): Promise<UserRow | undefined> {
  return db.selectFrom('users').selectAll().where(sql<string>`lower(email)`, '=', sql<string>`lower(${email})`).executeTakeFirst();
}

/** The user whose username or e-mail address is `login`, ignoring case (a username holds no `@`, so at most one matches). */
export function findUserByLogin(db: Kysely<Database>, login: string): Promise<UserRow | undefined> {
  return db
    .selectFrom('users')
    .selectAll()
    .where((eb) =>
      eb.or([
        eb(sql<string>`lower(username)`, '=', sql<string>`lower(${login})`),
        eb(sql<string>`lower(email)`, '=', sql<string>`lower(${login})`),
      ]),
    )
    .executeTakeFirst();
}

/** Which of `username` and `email` another account already uses, ignoring case. */
export async function findTaken(db: Kysely<Database>, username: string, email: string): Promise<{ username: boolean; email: boolean }> {
  const rows = await db
    .selectFrom('users')
    .select([sql<boolean>`lower(username) = lower(${username})`.as('same_username'), sql<boolean>`lower(email) = lower(${email})`.as('same_email')])
    .where((eb) =>
      eb.or([
        eb(sql<string>`lower(username)`, '=', sql<string>`lower(${username})`),
        eb(sql<string>`lower(email)`, '=', sql<string>`lower(${email})`),
      ]),
    )
    .execute();
  return { username: rows.some((row) => row.same_username), email: rows.some((row) => row.same_email) };
}

/** Inserts an unverified user. Throws the database's unique violation when the username or e-mail is taken. */
export function insertUser(db: Kysely<Database>, user: { username: string; email: string; password_hash: string }): Promise<UserRow> {
  return db.insertInto('users').values(user).returningAll().executeTakeFirstOrThrow();
}

/** Marks the user verified; false when they already were (or are gone). */
export async function markVerified(db: Kysely<Database>, id: number): Promise<boolean> {
  const result = await db.updateTable('users').set({ is_verified: true }).where('id', '=', id).where('is_verified', '=', false).executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/** Stores the SHA-256 of the one refresh token that may be used (null revokes it). */
export async function setRefreshTokenHash(db: Kysely<Database>, id: number, hash: string | null): Promise<void> {
  await db.updateTable('users').set({ refresh_token_hash: hash }).where('id', '=', id).execute();
}

/** Stores the SHA-256 of the latest reset token, superseding any earlier one. */
export async function setResetTokenHash(db: Kysely<Database>, id: number, hash: string): Promise<void> {
  await db.updateTable('users').set({ reset_token_hash: hash }).where('id', '=', id).execute();
}

/** Replaces the password hash (a rehash at login), unless the password changed meanwhile; true when replaced. */
export async function replacePasswordHash(db: Kysely<Database>, id: number, oldHash: string, newHash: string): Promise<boolean> {
  const result = await db.updateTable('users').set({ password_hash: newHash }).where('id', '=', id).where('password_hash', '=', oldHash).executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/**
 * Stores a login's refresh token only while the password is still the one the login checked, so a
 * login racing a password reset cannot outlive it. False when the password changed meanwhile.
 */
export async function storeLoginRefreshToken(db: Kysely<Database>, id: number, hash: string, checkedPasswordHash: string): Promise<boolean> {
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
 * password, marks the e-mail verified and ends every token issued up to the cut-off. The cut-off
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
      .set({ password_hash: passwordHash, is_verified: true, refresh_token_hash: null, reset_token_hash: null, tokens_valid_after: cutOff })
      .where('id', '=', id)
      .execute();
    return cutOff;
  });
}
