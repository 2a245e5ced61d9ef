import type { Migration } from 'kysely';
import * as users from './001-users.js';

/** Every migration in order. Listed here (not read from disk) so they run the same from TS and built JS. */
export const migrations: Record<string, Migration> = {
  '001-users': users,
};
