import { bcryptCompare, bcryptHash } from './password-pool.js';

/*
 * The one place that knows how passwords are hashed. A stored hash names its scheme by its
 * prefix, so another scheme (argon2) or a raised cost is rolled in by rehashing at the next
 * successful login.
 */

/** bcrypt reads only the first 72 bytes; longer passwords are refused, never silently cut. */
export const MAX_PASSWORD_BYTES = 72;

const BCRYPT = /^\$2[aby]\$(\d{2})\$/;

export interface PasswordCheck {
  ok: boolean;
  /** The password was right but the hash uses another scheme or cost than configured. */
  needsRehash: boolean;
}

/** Whether a password fits bcrypt's 72-byte input. */
export function passwordFits(password: string): boolean {
  return Buffer.byteLength(password, 'utf8') <= MAX_PASSWORD_BYTES;
}

/** A new hash of `password` with the configured scheme (bcrypt at `cost`). */
export function hashPassword(password: string, cost: number): Promise<string> {
  return bcryptHash(password, cost);
}

/** Checks `password` against a stored hash of any known scheme. */
export async function verifyPassword(password: string, stored: string, cost: number): Promise<PasswordCheck> {
  const bcrypt = BCRYPT.exec(stored);
  if (!bcrypt || !passwordFits(password)) {
    // Still spend a compare, so an unusable hash or an oversize password answers no faster.
    await burnCompare(password, cost);
    return { ok: false, needsRehash: false };
  }
  const ok = await bcryptCompare(password, stored);
  return { ok, needsRehash: ok && Number(bcrypt[1]) !== cost };
}

const dummyHashes = new Map<number, Promise<string>>();

/**
 * A compare against a fixed hash at the configured cost: an unknown user takes as long as a
 * wrong password.
 */
export async function burnCompare(password: string, cost: number): Promise<void> {
  let dummy = dummyHashes.get(cost);
  if (!dummy) {
    dummy = bcryptHash('not-a-password-anyone-has', cost);
    dummyHashes.set(cost, dummy);
  }
  await bcryptCompare(password, await dummy);
}
