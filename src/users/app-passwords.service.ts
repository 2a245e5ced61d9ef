import { createHmac, randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { Conflict, Forbidden, NotFound, Unauthorized } from '../../plugins/http/errors.js';
import type { MailMessage } from '../../plugins/mail.js';
import { userAccount } from '../../plugins/sign-in-throttle.js';
import type { components } from '../generated/openapi.js';
import * as repository from './app-passwords.repository.js';
import { findUserById } from './users.repository.js';

type AppPassword = components['schemas']['AppPassword'];
type AppPasswordCreated = components['schemas']['AppPasswordCreated'];

/** What app passwords need from the app. */
export type AppPasswordDeps = Pick<FastifyInstance, 'db' | 'config' | 'now' | 'passwords' | 'signInThrottle' | 'mail' | 'log'>;

/** App passwords one user may have (openapi.yaml): one per device, and a bounded listing. */
const MAX_APP_PASSWORDS = 50;
const INVALID_PASSWORD = 'Invalid password';

/** A use is recorded at most this often, so a syncing client does not write on every request. */
export const LAST_USED_RESOLUTION_MS = 60_000;
/** 20 random bytes: 160 bits, above the 128 openapi.yaml promises. */
const PASSWORD_BYTES = 20;

/**
 * The keyed hash kept of an app password: HMAC-SHA-256 under a key of its own derived from the
 * server secret (JWT_SECRET), so the stored hashes are worthless without it, and a check costs
 * microseconds (the passwords are random: no slow hash is needed to resist guessing).
 */
export function appPasswordHash(secret: string, password: string): Buffer {
  const key = createHmac('sha256', secret).update('contacts app passwords').digest();
  return createHmac('sha256', key).update(password, 'utf8').digest();
}

/** 32 base32-like characters in groups of four joined by `-`: letters and digits only, no `:`. */
function newPassword(): string {
  const alphabet = 'abcdefghijkmnpqrstuvwxyz23456789';
  const bytes = randomBytes(PASSWORD_BYTES);
  let bits = 0;
  let buffer = 0;
  let text = '';
  for (const byte of bytes) {
    buffer = (buffer << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      text += alphabet[(buffer >> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  return text.match(/.{1,4}/g)!.join('-');
}

function listed(row: repository.AppPasswordRow): AppPassword {
  return { id: row.id, name: row.name, created_at: row.created_at.toISOString(), last_used_at: row.last_used_at?.toISOString() ?? null };
}

/** The owner's notice of a new app password: its name and when, never the password. */
function noticeMail(to: string, username: string, created: AppPasswordCreated): MailMessage {
  return {
    to,
    subject: 'A new app password was created',
    text:
      `An app password named "${created.name}" was created for your account ${username} at ${created.created_at} (UTC). ` +
      `It signs a CardDAV client (a phone or desktop address book) in to your contacts.\n\n` +
      `If this was not you, someone knows your password: reset it now, which revokes every app password.\n`,
  };
}

/**
 * Makes an app password for the user, who proves the account password first (a wrong one counts
 * as a failed sign-in of the account, as at login), and mails the owner a notice. The password is
 * in this answer only. `client` is the address as the password limits count it.
 */
export async function createAppPassword(
  deps: AppPasswordDeps,
  userId: number,
  input: { name: string; password: string },
  client: string,
): Promise<AppPasswordCreated> {
  const user = await findUserById(deps.db, userId);
  if (!user) throw new Unauthorized();
  const account = userAccount(userId);
  await deps.signInThrottle.check(account, client);
  if (!(await deps.passwords.verify(input.password, user.password_hash, client)).ok) {
    await deps.signInThrottle.failed(account, client);
    throw new Forbidden(INVALID_PASSWORD);
  }
  const password = newPassword();
  const row = await repository.insertAppPassword(deps.db, userId, user.password_hash, MAX_APP_PASSWORDS, {
    name: input.name,
    secretHash: appPasswordHash(deps.config.jwtSecret, password),
  });
  // Changed since it was checked: the password sent is no longer the account's.
  if (row === 'password changed') throw new Forbidden(INVALID_PASSWORD);
  if (row === 'full') throw new Conflict(`Too many app passwords (at most ${MAX_APP_PASSWORDS}); revoke one first`);
  const created = { id: row.id, name: row.name, password, created_at: row.created_at.toISOString() };
  deps.mail.later(() =>
    deps.mail.send(noticeMail(user.email, user.username, created)).catch((err: unknown) => {
      deps.log.warn({ err, userId }, 'app password notice could not be sent');
    }),
  );
  return created;
}

/** The user's app passwords, without the passwords. */
export async function listAppPasswords(deps: Pick<AppPasswordDeps, 'db'>, userId: number): Promise<AppPassword[]> {
  return (await repository.listAppPasswords(deps.db, userId)).map(listed);
}

/** Revokes one of the user's app passwords; 404 for an unknown or someone else's. */
export async function deleteAppPassword(deps: AppPasswordDeps, userId: number, id: number): Promise<void> {
  if (!(await repository.deleteAppPassword(deps.db, userId, id))) throw new NotFound('App password not found');
}

/**
 * The user that `login` (username or e-mail) and `password` sign in with an app password, or null.
 * Nothing is remembered between requests: a revoked password is refused at once on every instance.
 */
export async function verifyAppPassword(deps: AppPasswordDeps, login: string, password: string): Promise<number | null> {
  const found = await repository.findAppPasswordUser(deps.db, login, appPasswordHash(deps.config.jwtSecret, password));
  if (!found) return null;
  const now = deps.now();
  if (found.lastUsedAt === null || now.getTime() - found.lastUsedAt.getTime() >= LAST_USED_RESOLUTION_MS) {
    await repository.touchAppPassword(deps.db, found.userId, found.passwordId, now);
  }
  return found.userId;
}
