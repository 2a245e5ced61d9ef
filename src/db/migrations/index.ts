import type { Migration } from 'kysely';
import * as users from './001-users.js';
import * as contacts from './002-contacts.js';
import * as avatars from './005-avatars.js';

/** Every migration in order. Listed here (not read from disk) so they run the same from TS and built JS. */
export const migrations: Record<string, Migration> = {
  '001-users': users,
  '002-contacts': contacts,
  '005-avatars': avatars,
};
