import type { Kysely } from 'kysely';
import type { Database } from '../db/database.js';

/** Whether the user exists and a token issued at `issuedAtMs` postdates their latest password reset. */
export async function isTokenCurrent(db: Kysely<Database>, userId: number, issuedAtMs: number): Promise<boolean> {
  const user = await db.selectFrom('users').select('tokens_valid_after').where('id', '=', userId).executeTakeFirst();
  if (!user) return false;
  return user.tokens_valid_after === null || issuedAtMs > user.tokens_valid_after.getTime();
}
