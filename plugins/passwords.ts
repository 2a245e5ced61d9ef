import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import fp from 'fastify-plugin';
import { Piscina } from 'piscina';
import { Gauge, Histogram, type Registry } from 'prom-client';
import { HttpError } from './http/errors.js';
import type { HashPolicy, PasswordTask, Scheme } from './password-worker.js';

export interface PasswordCheck {
  ok: boolean;
  /** The password was right but the stored hash uses another algorithm or other parameters than configured. */
  needsRehash: boolean;
}

export interface Passwords {
  /** A new hash of `password` with the configured algorithm. */
  hash(password: string): Promise<string>;
  /** Checks `password` against a stored bcrypt (`$2a$`, `$2b$`, `$2y$`) or argon2id (`$argon2id$`) hash. */
  verify(password: string, stored: string): Promise<PasswordCheck>;
  /** A compare that costs what a real one costs with the configured algorithm, for logins of unknown users. */
  burn(password: string): Promise<void>;
}

/** 503: the pool already has as many password jobs waiting as PASSWORD_QUEUE_LIMIT allows. */
export class PasswordQueueFull extends HttpError {
  constructor(retryAfterSeconds: number) {
    super(503, 'Too many password checks in progress', { 'Retry-After': retryAfterSeconds });
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    passwords: Passwords;
  }
}

/** bcrypt reads only the first 72 bytes of a password; beyond them it would match a prefix. */
const BCRYPT_MAX_BYTES = 72;
const BCRYPT = /^\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}$/;
const ARGON2ID = /^\$argon2id\$(?:v=(\d+)\$)?m=(\d+),t=(\d+),p=(\d+)\$[A-Za-z0-9+/]+\$[A-Za-z0-9+/]+$/;
/** The version of argon2 this service hashes with (0x13). */
const ARGON2_VERSION = 19;

/** Piscina's rejection when `maxQueue` tasks already wait; it carries no code, only this message. */
const QUEUE_AT_LIMIT = 'Task queue is at limit';
/** Extra threads (beyond minThreads) end after this long without work. */
const IDLE_TIMEOUT_MS = 60_000;

/**
 * The `Retry-After` of a refusal: seconds until the jobs waiting now have run on `threads` threads
 * at the mean time a job has taken so far (NaN before the first); at least 1.
 */
export function retryAfterSeconds(waiting: number, meanRunMs: number, threads: number): number {
  if (!Number.isFinite(meanRunMs)) return 1;
  return Math.max(1, Math.ceil((waiting * meanRunMs) / threads / 1000));
}

/**
 * The worker beside this file, and how a thread loads it. Compiled, it is `password-worker.js` and
 * the threads need nothing. Run from TypeScript (tsx, tap), it is `password-worker.ts`, loaded
 * through tsx's require hook (piscina's worker requires the file). Node 22 would install the loader
 * a thread inherits through `execArgv` too, but tap's is slow to start in each thread: two threads
 * took 11 s on Node 26 and 22 s on Node 22 to answer their first hash under tap's loader, 0.6 s and
 * 2 s with the hook, and the password tests timed out.
 */
function worker(): { filename: string; execArgv: string[] } {
  const self = fileURLToPath(import.meta.url);
  const extension = path.extname(self);
  const filename = path.join(path.dirname(self), `password-worker${extension}`);
  if (extension !== '.ts') return { filename, execArgv: [] };
  return { filename, execArgv: ['--require', createRequire(import.meta.url).resolve('tsx/cjs')] };
}

/** A well-formed hash of nobody's password with the policy's parameters: verifying against it costs a real compare. */
function dummyHash(policy: HashPolicy): string {
  if (policy.algorithm === 'bcrypt') {
    return `$2b$${String(policy.cost).padStart(2, '0')}$abcdefghijklmnopqrstuuabcdefghijklmnopqrstuvwxyzABCDE`;
  }
  // A 16-byte salt and a 32-byte digest, both zero: argon2's time depends only on m, t and p.
  return `$argon2id$v=${ARGON2_VERSION}$m=${policy.memoryKib},t=${policy.timeCost},p=${policy.parallelism}$${'A'.repeat(22)}$${'A'.repeat(43)}`;
}

/** Which scheme a stored hash uses, and whether it differs from the policy; null when it is no hash this service reads. */
function readStored(stored: string, policy: HashPolicy): { scheme: Scheme; differs: boolean } | null {
  const bcrypt = BCRYPT.exec(stored);
  if (bcrypt) return { scheme: 'bcrypt', differs: policy.algorithm !== 'bcrypt' || Number(bcrypt[1]) !== policy.cost };
  const argon2 = ARGON2ID.exec(stored);
  if (argon2) {
    const [version, memoryKib, timeCost, parallelism] = [argon2[1] ?? '16', argon2[2], argon2[3], argon2[4]].map(Number);
    const same =
      policy.algorithm === 'argon2id' &&
      version === ARGON2_VERSION &&
      memoryKib === policy.memoryKib &&
      timeCost === policy.timeCost &&
      parallelism === policy.parallelism;
    return { scheme: 'argon2id', differs: !same };
  }
  return null;
}

/**
 * `contacts_password_queue_depth` and `contacts_password_queue_limit`, read at each scrape, and
 * `contacts_password_hash_duration_seconds`, which the caller observes per job (queue wait included).
 */
function passwordMetrics(registry: Registry, pool: Piscina, limit: number): Histogram {
  new Gauge({
    name: 'contacts_password_queue_depth',
    help: 'Password hashes and checks waiting for a worker thread.',
    registers: [registry],
    collect() {
      this.set(pool.queueSize);
    },
  });
  new Gauge({
    name: 'contacts_password_queue_limit',
    help: 'PASSWORD_QUEUE_LIMIT: waiting jobs beyond it are refused with 503.',
    registers: [registry],
  }).set(limit);
  return new Histogram({
    name: 'contacts_password_hash_duration_seconds',
    help: 'Time of each password hash or check, from being queued to its result.',
    buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  });
}

/**
 * `app.passwords`: bcrypt and argon2id hashing on a piscina worker pool with one bounded queue for
 * all password work. New hashes use PASSWORD_HASH; stored hashes of either scheme verify. When
 * PASSWORD_QUEUE_LIMIT jobs already wait, a job is refused with PasswordQueueFull (503).
 */
export default fp(
  async (app) => {
    const { passwordHash, bcryptCost, argon2MemoryKib, argon2TimeCost, argon2Parallelism, passwordQueueLimit } = app.config;
    const policy: HashPolicy =
      passwordHash === 'bcrypt'
        ? { algorithm: 'bcrypt', cost: bcryptCost }
        : { algorithm: 'argon2id', memoryKib: argon2MemoryKib, timeCost: argon2TimeCost, parallelism: argon2Parallelism };
    const burnHash = dummyHash(policy);

    const pool = new Piscina({
      ...worker(),
      // One thread per core: a hash is pure CPU, and the event loop mostly waits on I/O meanwhile.
      maxThreads: availableParallelism(),
      minThreads: 1,
      idleTimeout: IDLE_TIMEOUT_MS,
      maxQueue: passwordQueueLimit,
    });

    // piscina takes work again after destroy(), starting new threads; a closed app must not.
    let closed = false;
    const jobDuration = passwordMetrics(app.metrics.registry, pool, passwordQueueLimit);

    async function run<T extends string | boolean | null>(task: PasswordTask): Promise<T> {
      if (closed) throw new Error('the password pool is closed');
      try {
        const done = jobDuration.startTimer();
        const result = (await pool.run(task)) as T;
        done();
        return result;
      } catch (error) {
        if (error instanceof Error && error.message === QUEUE_AT_LIMIT) {
          throw new PasswordQueueFull(retryAfterSeconds(pool.queueSize, pool.histogram.runTime.mean, pool.maxThreads));
        }
        throw error;
      }
    }

    async function burn(password: string): Promise<void> {
      // An unreadable burn hash would answer at once, and unknown users would show by their speed.
      if ((await run<boolean | null>({ op: 'verify', password, stored: burnHash, scheme: policy.algorithm })) === null) {
        throw new Error('the burn hash could not be read');
      }
    }

    app.decorate('passwords', {
      hash(password) {
        if (policy.algorithm === 'bcrypt' && Buffer.byteLength(password, 'utf8') > BCRYPT_MAX_BYTES) {
          return Promise.reject(new RangeError(`bcrypt hashes at most ${BCRYPT_MAX_BYTES} bytes; refuse longer passwords before hashing`));
        }
        return run<string>({ op: 'hash', password, policy });
      },
      async verify(password, stored) {
        const known = readStored(stored, policy);
        // A bcrypt hash would match any longer password that starts with the real one.
        if (!known || (known.scheme === 'bcrypt' && Buffer.byteLength(password, 'utf8') > BCRYPT_MAX_BYTES)) {
          await burn(password);
          return { ok: false, needsRehash: false };
        }
        const ok = await run<boolean | null>({ op: 'verify', password, stored, scheme: known.scheme });
        if (ok === null) {
          // It looked like a hash but could not be read: it matches nothing, after a full compare's time.
          app.log.warn('a stored password hash could not be read');
          await burn(password);
          return { ok: false, needsRehash: false };
        }
        return { ok, needsRehash: ok && known.differs };
      },
      burn,
    } satisfies Passwords);

    app.addHook('onClose', async () => {
      closed = true;
      await pool.destroy();
    });
  },
  { name: 'passwords', dependencies: ['config', 'metrics'], fastify: '5.x' },
);
