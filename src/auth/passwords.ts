import { bcryptCompare, bcryptHash } from './password-pool.js';

/*
 * The one place that knows how passwords are hashed. A stored hash names its scheme by its
 * prefix, so another scheme (argon2) or a raised cost is rolled in by rehashing at the next
 * successful login.
 */

/** bcrypt reads only the first 72 bytes; longer passwords are refused, never silently cut. */
export const MAX_PASSWORD_BYTES = 72;

const BCRYPT = /^\$2[aby]\$(\d{2})\$/;
/** A 22-character salt and 31-character digest in bcrypt's alphabet, of no password anyone has. */
const DUMMY_SALT_AND_DIGEST = 'abcdefghijklmnopqrstuuabcdefghijklmnopqrstuvwxyzABCDE';

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

/**
 * A compare against a well-formed bcrypt hash of nobody's password at the configured cost: an
 * unknown user takes as long as a wrong password. bcrypt's time depends only on the cost, so the
 * salt and digest can be fixed.
 */
export async function burnCompare(password: string, cost: number): Promise<void> {
  await bcryptCompare(password, `$2b$${String(cost).padStart(2, '0')}$${DUMMY_SALT_AND_DIGEST}`);
}
