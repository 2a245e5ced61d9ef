/*
 * The piscina worker of plugins/passwords.ts: every password hash and compare runs here, off the
 * event loop. It imports nothing of this project, so it loads the same way as TypeScript (through
 * the loader a worker inherits from tsx or tap) and as compiled JavaScript.
 */
import { type Algorithm, hashSync as argon2Hash, verifySync as argon2Verify } from '@node-rs/argon2';
import bcrypt from 'bcryptjs';

/** How new hashes are made. */
export type HashPolicy =
  { algorithm: 'bcrypt'; cost: number } | { algorithm: 'argon2id'; memoryKib: number; timeCost: number; parallelism: number };

export type Scheme = HashPolicy['algorithm'];

/** `Algorithm.Argon2id`, which `isolatedModules` cannot read from the declared const enum. */
const ARGON2ID = 2 as Algorithm;

export type PasswordTask =
  { op: 'hash'; password: string; policy: HashPolicy } | { op: 'verify'; password: string; stored: string; scheme: Scheme };

/** A new hash of `password` under `policy`, with a fresh random salt. */
function hash(password: string, policy: HashPolicy): string {
  if (policy.algorithm === 'bcrypt') return bcrypt.hashSync(password, policy.cost);
  return argon2Hash(password, {
    algorithm: ARGON2ID,
    memoryCost: policy.memoryKib,
    timeCost: policy.timeCost,
    parallelism: policy.parallelism,
  });
}

/**
 * Whether `password` matches `stored`, a hash of `scheme` whose parameters it carries; null when
 * the hash cannot be read (a truncated digest, a bcrypt cost out of range).
 */
function verify(password: string, stored: string, scheme: Scheme): boolean | null {
  try {
    return scheme === 'bcrypt' ? bcrypt.compareSync(password, stored) : argon2Verify(stored, password);
  } catch {
    return null;
  }
}

/** piscina's entry point: one task, a hash (string) or a verdict (boolean, or null for an unreadable hash). */
export default function run(task: PasswordTask): string | boolean | null {
  return task.op === 'hash' ? hash(task.password, task.policy) : verify(task.password, task.stored, task.scheme);
}
