import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { v7 as uuidV7 } from 'uuid';
import { issuedAtMs } from '../../plugins/auth.js';
import { userAccount } from '../../plugins/sign-in-throttle.js';
import { violatesUnique } from '../../plugins/db.js';
import type { MailMessage } from '../../plugins/mail.js';
import { BadRequest, Conflict, Forbidden, Unauthorized, ValidationFailed } from '../../plugins/http/errors.js';
import type { components } from '../generated/openapi.js';
import {
  EMAIL_KEY,
  findTaken,
  findUserByEmail,
  findUserById,
  findUserByLogin,
  insertUser,
  markVerified,
  USERNAME_KEY,
} from '../users/users.repository.js';
import {
  completePasswordReset,
  findResetToken,
  replacePasswordHash,
  replaceResetToken,
  setRefreshTokenHash,
  storeLoginRefreshToken,
} from './auth.repository.js';
import { toUser, type User } from '../users/users.service.js';

/** What the account operations need from the app. */
export type AuthDeps = Pick<FastifyInstance, 'db' | 'config' | 'tokens' | 'mail' | 'mailLimit' | 'passwords' | 'signInThrottle' | 'log'>;

type TokenPair = components['schemas']['TokenPair'];
type Message = components['schemas']['Message'];

const USERNAME_TAKEN = 'Username already taken';
const EMAIL_TAKEN = 'Email already registered';
const BAD_LOGIN = 'Incorrect username or password';
const BAD_REFRESH = 'Invalid refresh token';
const BAD_VERIFY = 'Invalid or expired verification token';
const BAD_RESET = 'Invalid or expired reset token';

/** Tokens are stored only as SHA-256 digests, so a database leak hands out no usable token. */
function digest(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

/** The contract's limit whatever the algorithm (bcrypt reads only 72 bytes): longer is refused, never silently cut. */
const MAX_PASSWORD_BYTES = 72;

function passwordFits(password: string): boolean {
  return Buffer.byteLength(password, 'utf8') <= MAX_PASSWORD_BYTES;
}

function checkPasswordBytes(password: string): void {
  if (!passwordFits(password)) throw new ValidationFailed(`body/password must be at most ${MAX_PASSWORD_BYTES} bytes in UTF-8`);
}

/** Which field a unique-key violation is about, or null for any other error. */
function uniqueViolation(error: unknown): 'username' | 'email' | null {
  if (violatesUnique(error, USERNAME_KEY)) return 'username';
  return violatesUnique(error, EMAIL_KEY) ? 'email' : null;
}

/** Sends a mail; a failure is logged, never passed on (the user can ask for another link). */
async function sendQuietly(deps: AuthDeps, message: MailMessage): Promise<void> {
  try {
    await deps.mail.send(message);
  } catch (err) {
    deps.log.warn({ err, subject: message.subject }, 'mail could not be sent');
  }
}

/**
 * Composes a mail after the answer and sends it, when `compose` gives one; failures are logged,
 * never passed on. Neither the answer nor its timing then tells whether anything was sent.
 */
function mailLater(deps: AuthDeps, compose: () => Promise<MailMessage | null>): void {
  deps.mail.later(async () => {
    try {
      const message = await compose();
      if (message) await sendQuietly(deps, message);
    } catch (err) {
      deps.log.warn({ err }, 'mail could not be composed');
    }
  });
}

function verificationMail(deps: AuthDeps, to: string, userId: number): MailMessage {
  const token = deps.tokens.sign(userId, 'verify', deps.config.verifyTokenTtl);
  const link = `${deps.config.publicBaseUrl}/api/auth/verify-email?token=${encodeURIComponent(token)}`;
  const days = Math.round(deps.config.verifyTokenTtl / 86_400);
  return {
    to,
    subject: 'Verify your e-mail address',
    text: `Welcome! Open this link to verify your e-mail address:\n\n${link}\n\nThe link is valid for ${days} days. If you did not register, ignore this mail.\n`,
  };
}

/** `2026-06-10 12:15 UTC`: the minute, cut down, so the link works at least until then. */
function utcMinute(date: Date): string {
  return `${date.toISOString().slice(0, 16).replace('T', ' ')} UTC`;
}

function resetMail(deps: AuthDeps, to: string, reset: LiveResetToken): MailMessage {
  const link = `${deps.config.publicBaseUrl}/reset-password?token=${encodeURIComponent(reset.token)}`;
  return {
    to,
    subject: 'Reset your password',
    text: `Open this link to choose a new password:\n\n${link}\n\nThe link works once, until ${utcMinute(reset.expiresAt)}. If you did not ask for it, ignore this mail.\n`,
  };
}

/**
 * Creates an unverified user and mails the verification link. The password is hashed before the
 * uniqueness check, so a taken username or e-mail answers 409 no sooner than a new one answers 201
 * (openapi.yaml, registerUser).
 */
export async function registerUser(
  deps: AuthDeps,
  input: { username: string; email: string; password: string },
  client: string,
): Promise<User> {
  checkPasswordBytes(input.password);
  const passwordHash = await deps.passwords.hash(input.password, client);
  const taken = await findTaken(deps.db, input.username, input.email);
  if (taken.username) throw new Conflict(USERNAME_TAKEN);
  if (taken.email) throw new Conflict(EMAIL_TAKEN);
  let row;
  try {
    row = await insertUser(deps.db, { username: input.username, email: input.email, password_hash: passwordHash });
  } catch (error) {
    // A concurrent registration won the race between the check above and the insert.
    const field = uniqueViolation(error);
    if (field === 'username') throw new Conflict(USERNAME_TAKEN);
    if (field === 'email') throw new Conflict(EMAIL_TAKEN);
    throw error;
  }
  if (await deps.mailLimit.take('verification', row.email)) await sendQuietly(deps, verificationMail(deps, row.email, row.id));
  return toUser(row, deps.config.publicBaseUrl);
}

/** Marks the e-mail of the token's user verified. */
export async function verifyEmail(deps: AuthDeps, token: string): Promise<Message> {
  const claims = deps.tokens.verify(token, 'verify');
  const user = claims ? await findUserById(deps.db, Number(claims.sub)) : undefined;
  if (!user) throw new BadRequest(BAD_VERIFY);
  if (user.is_verified || !(await markVerified(deps.db, user.id))) return { message: 'Email already verified' };
  return { message: 'Email verified' };
}

/**
 * Mails a new verification link when an unverified account has this address, within the address's
 * allowance of verification mails (earlier links stay valid). The mail goes out after the answer,
 * so neither the body nor the timing tells whether the account exists, or whether it was mailed.
 */
export async function requestVerification(deps: AuthDeps, email: string): Promise<Message> {
  const user = await findUserByEmail(deps.db, email);
  if (user && !user.is_verified) {
    mailLater(deps, async () =>
      (await deps.mailLimit.take('verification', user.email)) ? verificationMail(deps, user.email, user.id) : null,
    );
  }
  return { message: 'If an unverified account uses this address, a verification e-mail has been sent' };
}

/** Whom failed sign-ins count against: the user whichever name was typed, else the name as typed, ignoring case. */
function accountOf(user: { id: number } | undefined, login: string): string {
  return user ? userAccount(user.id) : `name:${digest(login.toLowerCase())}`;
}

/**
 * Checks the password (username or e-mail, ignoring case) and issues a token pair; the refresh
 * token replaces any stored before. `client` is the address as the password limits count it;
 * wrong passwords count against the account (openapi.yaml, login).
 */
export async function login(deps: AuthDeps, username: string, password: string, client: string): Promise<TokenPair> {
  const user = await findUserByLogin(deps.db, username);
  const account = accountOf(user, username);
  await deps.signInThrottle.check(account, client);
  // An unknown user or an oversize password still costs a compare, so neither answers sooner.
  if (!user || !passwordFits(password)) {
    await deps.passwords.burn(password, client);
    await deps.signInThrottle.failed(account, client);
    throw new Unauthorized(BAD_LOGIN);
  }
  const check = await deps.passwords.verify(password, user.password_hash, client);
  if (!check.ok) {
    await deps.signInThrottle.failed(account, client);
    throw new Unauthorized(BAD_LOGIN);
  }
  if (!user.is_verified) throw new Forbidden('Email not verified');
  let checkedHash = user.password_hash;
  if (check.needsRehash) {
    try {
      const rehashed = await deps.passwords.hash(password, client);
      if (await replacePasswordHash(deps.db, user.id, checkedHash, rehashed)) checkedHash = rehashed;
    } catch (err) {
      deps.log.warn({ err, userId: user.id }, 'password rehash failed; the old hash stays valid');
    }
  }
  // Signed before they are stored: a reset that lands after the store ends them (its cut-off is
  // later), and one that landed before it makes the store fail.
  const accessToken = deps.tokens.sign(user.id, 'access', deps.config.accessTokenTtl);
  const refreshToken = deps.tokens.sign(user.id, 'refresh', deps.config.refreshTokenTtl);
  if (!(await storeLoginRefreshToken(deps.db, user.id, digest(refreshToken), checkedHash))) throw new Unauthorized(BAD_LOGIN);
  return { access_token: accessToken, refresh_token: refreshToken, token_type: 'bearer' };
}

/** A new access token for the stored refresh token, which is returned unchanged. */
export async function refreshToken(deps: AuthDeps, refreshToken: string): Promise<TokenPair> {
  const claims = deps.tokens.verify(refreshToken, 'refresh');
  const user = claims ? await findUserById(deps.db, Number(claims.sub)) : undefined;
  if (!claims || !user || user.refresh_token_hash !== digest(refreshToken)) throw new Unauthorized(BAD_REFRESH);
  if (user.tokens_valid_after && issuedAtMs(claims) <= user.tokens_valid_after.getTime()) throw new Unauthorized(BAD_REFRESH);
  return {
    access_token: deps.tokens.sign(user.id, 'access', deps.config.accessTokenTtl),
    refresh_token: refreshToken,
    token_type: 'bearer',
  };
}

/** Revokes the stored refresh token; access tokens live out their lifetime. */
export async function logout(deps: AuthDeps, userId: number): Promise<void> {
  await setRefreshTokenHash(deps.db, userId, null);
}

/**
 * Mails a reset link when an account has this address, within the address's allowance of reset
 * mails: the live link again while there is one, so a flood of requests never voids the link in the
 * owner's mailbox. Everything happens after the answer, so neither body nor timing reveals whether
 * the account exists, or whether a mail was sent.
 */
export async function forgotPassword(deps: AuthDeps, email: string): Promise<Message> {
  const user = await findUserByEmail(deps.db, email);
  if (user) {
    mailLater(deps, async () => {
      if (!(await deps.mailLimit.take('reset', user.email))) return null;
      const reset = await liveResetToken(deps, user.id);
      return reset && resetMail(deps, user.email, reset);
    });
  }
  return { message: 'If an account uses this address, a password-reset e-mail has been sent' };
}

interface LiveResetToken {
  token: string;
  expiresAt: Date;
}

/** The reset token with its expiry, or null once it has expired. */
function unexpired(deps: AuthDeps, token: string): LiveResetToken | null {
  const claims = deps.tokens.verify(token, 'reset');
  return claims && { token, expiresAt: new Date(claims.exp * 1000) };
}

/**
 * The user's unused, unexpired reset token, signed again from its stored jti (the same token, so
 * the same link); else a new one, stored. Null when the user is gone.
 */
async function liveResetToken(deps: AuthDeps, userId: number): Promise<LiveResetToken | null> {
  const ttl = deps.config.resetTokenTtl;
  // A second pass only when a concurrent request stored its token between the read and the write.
  for (let pass = 0; pass < 2; pass++) {
    const stored = await findResetToken(deps.db, userId);
    if (!stored) return null;
    if (stored.jti) {
      const token = deps.tokens.sign(userId, 'reset', ttl, stored.jti);
      const live = digest(token) === stored.hash ? unexpired(deps, token) : null;
      if (live) return live;
    }
    const jti = uuidV7();
    const token = deps.tokens.sign(userId, 'reset', ttl, jti);
    if (await replaceResetToken(deps.db, userId, stored.jti, { hash: digest(token), jti })) return unexpired(deps, token);
  }
  deps.log.warn({ userId }, 'reset token raced twice; no mail sent');
  return null;
}

/** Sets a new password with the latest reset token, once; ends every earlier token of the user. */
export async function resetPassword(deps: AuthDeps, token: string, password: string, client: string): Promise<Message> {
  checkPasswordBytes(password);
  const claims = deps.tokens.verify(token, 'reset');
  const user = claims ? await findUserById(deps.db, Number(claims.sub)) : undefined;
  const tokenHash = digest(token);
  if (!user || user.reset_token_hash !== tokenHash) throw new BadRequest(BAD_RESET);
  const passwordHash = await deps.passwords.hash(password, client);
  // Token issue times come from the wall clock (the jti), so the cut-off must too.
  const cutOff = await completePasswordReset(deps.db, user.id, tokenHash, passwordHash, () => new Date());
  if (!cutOff) throw new BadRequest(BAD_RESET);
  await deps.tokens.cutOffChanged(user.id);
  // The owner proved the mailbox: guesses before the reset no longer hold the account.
  await deps.signInThrottle.clear(accountOf(user, ''));
  // Tokens count as issued after the reset only from the next millisecond; answer no sooner, so a
  // login that follows the answer always gets tokens that work.
  while (Date.now() <= cutOff.getTime()) await sleep(1);
  return { message: 'Password has been reset' };
}
