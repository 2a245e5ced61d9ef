import { type Kysely, type Selectable, sql } from 'kysely';
import type { Database, UsersTable } from '../db/database.js';

export type UserRow = Selectable<UsersTable>;

/** The user with this id, if any. */
export function findUserById(db: Kysely<Database>, id: number): Promise<UserRow | undefined> {
  return db.selectFrom('users').selectAll().where('id', '=', id).executeTakeFirst();
}

/*
 * Usernames and e-mail addresses are unique ignoring case through `user_names` and `user_emails`
 * (migration 034), keyed by the value as PostgreSQL's lower() gives it, so a lookup by either reads
 * one row by its key and then the user by id: on Citus, one shard each.
 */

/** The id of the user whose e-mail address is `email`, ignoring case. */
async function userIdByEmail(db: Kysely<Database>, email: string): Promise<number | undefined> {
  const row = await db
    .selectFrom('user_emails')
    .select('user_id')
    .where('email', '=', sql<string>`lower(${email})`)
    .executeTakeFirst();
  return row?.user_id;
}

/** The id of the user whose username is `username`, ignoring case. */
async function userIdByName(db: Kysely<Database>, username: string): Promise<number | undefined> {
  const row = await db
    .selectFrom('user_names')
    .select('user_id')
    .where('name', '=', sql<string>`lower(${username})`)
    .executeTakeFirst();
  return row?.user_id;
}

/** The id of the user whose username or e-mail address is `login`, ignoring case (a username holds no `@`). */
export function findUserIdByLogin(db: Kysely<Database>, login: string): Promise<number | undefined> {
  return login.includes('@') ? userIdByEmail(db, login) : userIdByName(db, login);
}

/** The user whose e-mail address is `email`, ignoring case. */
export async function findUserByEmail(db: Kysely<Database>, email: string): Promise<UserRow | undefined> {
  const id = await userIdByEmail(db, email);
  return id === undefined ? undefined : findUserById(db, id);
}

/** The user whose username or e-mail address is `login`, ignoring case. */
export async function findUserByLogin(db: Kysely<Database>, login: string): Promise<UserRow | undefined> {
  const id = await findUserIdByLogin(db, login);
  return id === undefined ? undefined : findUserById(db, id);
}

/** Which of `username` and `email` another account already uses, ignoring case. */
export async function findTaken(db: Kysely<Database>, username: string, email: string): Promise<{ username: boolean; email: boolean }> {
  return { username: (await userIdByName(db, username)) !== undefined, email: (await userIdByEmail(db, email)) !== undefined };
}

/** The unique keys whose violation means a taken username or e-mail address. */
export const USERNAME_KEY = 'user_names_pkey';
export const EMAIL_KEY = 'user_emails_pkey';

/**
 * Inserts an unverified user with its username and e-mail address in one transaction. Throws the
 * database's unique violation of USERNAME_KEY or EMAIL_KEY when either is taken (the username is
 * claimed first, so it is the one named when both are).
 */
export function insertUser(db: Kysely<Database>, user: { username: string; email: string; password_hash: string }): Promise<UserRow> {
  return db.transaction().execute(async (trx) => {
    const row = await trx.insertInto('users').values(user).returningAll().executeTakeFirstOrThrow();
    await trx
      .insertInto('user_names')
      .values({ name: sql<string>`lower(${user.username})`, user_id: row.id })
      .execute();
    await trx
      .insertInto('user_emails')
      .values({ email: sql<string>`lower(${user.email})`, user_id: row.id })
      .execute();
    return row;
  });
}

/**
 * Removes the keys of a user's username and e-mail address, in the transaction `trx` that deletes
 * the user (the tables have no foreign key to `users`).
 */
export async function deleteUserKeys(trx: Kysely<Database>, user: { id: number; username: string; email: string }): Promise<void> {
  await trx
    .deleteFrom('user_names')
    .where('name', '=', sql<string>`lower(${user.username})`)
    .where('user_id', '=', user.id)
    .execute();
  await trx
    .deleteFrom('user_emails')
    .where('email', '=', sql<string>`lower(${user.email})`)
    .where('user_id', '=', user.id)
    .execute();
}

/** Marks the user verified; false when they already were (or are gone). */
export async function markVerified(db: Kysely<Database>, id: number): Promise<boolean> {
  const result = await db
    .updateTable('users')
    .set({ is_verified: true })
    .where('id', '=', id)
    .where('is_verified', '=', false)
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}
