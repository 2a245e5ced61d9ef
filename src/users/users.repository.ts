import { type Kysely, type Selectable, sql } from 'kysely';
import type { Database, UsersTable } from '../db/database.js';

export type UserRow = Selectable<UsersTable>;

/** The user with this id, if any. */
export function findUserById(db: Kysely<Database>, id: number): Promise<UserRow | undefined> {
  return db.selectFrom('users').selectAll().where('id', '=', id).executeTakeFirst();
}

/** The user whose e-mail address is `email`, ignoring case. */
export function findUserByEmail(db: Kysely<Database>, email: string): Promise<UserRow | undefined> {
  return db
    .selectFrom('users')
    .selectAll()
    .where(sql<string>`lower(email)`, '=', sql<string>`lower(${email})`)
    .executeTakeFirst();
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
    .select([
      sql<boolean>`lower(username) = lower(${username})`.as('same_username'),
      sql<boolean>`lower(email) = lower(${email})`.as('same_email'),
    ])
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
  const result = await db
    .updateTable('users')
    .set({ is_verified: true })
    .where('id', '=', id)
    .where('is_verified', '=', false)
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}
