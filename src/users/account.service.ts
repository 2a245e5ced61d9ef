import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { Forbidden, Unauthorized, ValidationFailed } from '../../plugins/http/errors.js';
import type { MailMessage } from '../../plugins/mail.js';
import { userAccount } from '../../plugins/sign-in-throttle.js';
import * as repository from './account.repository.js';
import { findUserById, type UserRow } from './users.repository.js';

/** What the account operations need from the app. */
export type AccountDeps = Pick<
  FastifyInstance,
  'db' | 'config' | 'passwords' | 'signInThrottle' | 'tokens' | 'cache' | 'forgetUserCounts' | 'mail' | 'log'
>;

const INVALID_PASSWORD = 'Invalid password';
/** The register rule (openapi.yaml, Password): bcrypt reads only 72 bytes, so longer is refused, never cut. */
const MAX_PASSWORD_BYTES = 72;

/**
 * The user, once `password` proved to be theirs: the check waits in the password queue under the
 * client's address and a wrong one counts as a failed sign-in of the account, as at login, so
 * these operations are no way around the login's bound on guesses. 401 when the user is gone.
 */
async function provenUser(deps: AccountDeps, userId: number, password: string, client: string): Promise<UserRow> {
  const user = await findUserById(deps.db, userId);
  if (!user) throw new Unauthorized();
  const account = userAccount(userId);
  await deps.signInThrottle.check(account, client);
  if (!(await deps.passwords.verify(password, user.password_hash, client)).ok) {
    await deps.signInThrottle.failed(account, client);
    throw new Forbidden(INVALID_PASSWORD);
  }
  return user;
}

/** Sends a notice after the answer; a failure is logged, never passed on (the change is done). */
function noticeLater(deps: AccountDeps, userId: number, message: MailMessage): void {
  deps.mail.later(() =>
    deps.mail.send(message).catch((err: unknown) => {
      deps.log.warn({ err, userId, subject: message.subject }, 'account notice could not be sent');
    }),
  );
}

/**
 * Deletes the account and everything it holds (docs/accounts.md lists each place): its rows in one
 * transaction, then, before the answer, everything outside PostgreSQL: the tokens every instance
 * remembers, cached answers, per-user rate-limit counters and failed sign-in counts. The address
 * is told by mail.
 */
export async function deleteAccount(deps: AccountDeps, userId: number, password: string, client: string): Promise<void> {
  const user = await provenUser(deps, userId, password, client);
  // Changed since it was checked: the password sent is no longer the account's.
  if (!(await repository.deleteAccount(deps.db, userId, user.password_hash, deps.config.dbBulkStatementTimeoutMs)))
    throw new Forbidden(INVALID_PASSWORD);
  // Each instance remembers cut-offs only until told; the user being gone, every token is then 401.
  await deps.tokens.cutOffChanged(userId);
  await deps.cache.forget(userId);
  await deps.forgetUserCounts(userId);
  await deps.signInThrottle.clear(userAccount(userId));
  noticeLater(deps, userId, {
    to: user.email,
    subject: 'Your account was deleted',
    text:
      `The account ${user.username} and everything it held (contacts, avatar, app passwords) were deleted at ` +
      `${new Date().toISOString()} (UTC), at the request of someone who knew its password.\n\n` +
      `Nothing of it is kept. This address and the username can be used for a new account.\n`,
  });
}

/**
 * Sets a new password, ending every earlier token of the user on every instance and revoking the
 * stored refresh token, as a reset does; app passwords stay. The owner is told by mail.
 */
export async function changePassword(
  deps: AccountDeps,
  userId: number,
  input: { current_password: string; new_password: string },
  client: string,
): Promise<void> {
  if (Buffer.byteLength(input.new_password, 'utf8') > MAX_PASSWORD_BYTES) {
    throw new ValidationFailed(`body/new_password must be at most ${MAX_PASSWORD_BYTES} bytes in UTF-8`);
  }
  const user = await provenUser(deps, userId, input.current_password, client);
  const passwordHash = await deps.passwords.hash(input.new_password, client);
  // Token issue times come from the wall clock (the jti), so the cut-off must too.
  const cutOff = await repository.changePassword(deps.db, userId, user.password_hash, passwordHash, () => new Date());
  if (!cutOff) throw new Forbidden(INVALID_PASSWORD);
  await deps.tokens.cutOffChanged(userId);
  noticeLater(deps, userId, {
    to: user.email,
    subject: 'Your password was changed',
    text:
      `The password of your account ${user.username} was changed at ${cutOff.toISOString()} (UTC); ` +
      `every session signed in before then has ended. App passwords of CardDAV clients still work.\n\n` +
      `If this was not you, reset your password now with "Forgot password", which also revokes every app password.\n`,
  });
  // Tokens count as issued after the change only from the next millisecond; answer no sooner, so a
  // login that follows the answer always gets tokens that work.
  while (Date.now() <= cutOff.getTime()) await sleep(1);
}
