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

/**
 * Every method takes the client the work is for (its address, as the rate limit groups it): the
 * queue serves clients in turn and lets each hold PASSWORD_QUEUE_PER_CLIENT places at most.
 */
export interface Passwords {
  /** A new hash of `password` with the configured algorithm. */
  hash(password: string, client: string): Promise<string>;
  /** Checks `password` against a stored bcrypt (`$2a$`, `$2b$`, `$2y$`) or argon2id (`$argon2id$`) hash. */
  verify(password: string, stored: string, client: string): Promise<PasswordCheck>;
  /** A compare that costs what a real one costs with the configured algorithm, for logins of unknown users. */
  burn(password: string, client: string): Promise<void>;
}

/** 503: PASSWORD_QUEUE_LIMIT jobs wait already, or PASSWORD_QUEUE_PER_CLIENT of this client's. */
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
 * the threads need nothing. Run from TypeScript (tsx: development and the tests), it is
 * `password-worker.ts`, loaded through tsx's require hook (piscina's worker requires the file). Node
 * 22 would install the ESM loader a thread inherits through `execArgv` too, but a loader is slow to
 * start in each thread: under the one tap once used, two threads took 11 s on Node 26 and 22 s on
 * Node 22 to answer their first hash, 0.6 s and 2 s with the hook.
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

interface Job {
  task: PasswordTask;
  resolve: (result: unknown) => void;
  reject: (error: unknown) => void;
}

/** Clients whose use the queue remembers while it is busy; past it, it starts counting afresh. */
const REMEMBERED_CLIENTS = 10_000;

/**
 * The jobs waiting for a thread, by client. Within a client, first in, first out. Across clients,
 * the next job is the oldest of the client that has asked for the fewest jobs since the queue was
 * last empty, clients that asked equally often taking turns: someone signing in during a flood is
 * served next, not after a turn of every flooding client. When the queue is full, a client with
 * fewer jobs waiting takes the place of the newest job of the client with the most. piscina's own
 * queue stays empty (it is handed one job per thread at most): it serves in arrival order only,
 * where whoever keeps it full keeps everyone else out.
 */
class FairQueue {
  /** Waiting jobs by client; among equals, the first here is due first (a Map keeps insertion order). */
  private readonly waiting = new Map<string, Job[]>();
  /** Jobs each client has queued since the queue was last empty. */
  private readonly asked = new Map<string, number>();
  size = 0;

  constructor(
    private readonly limit: number,
    private readonly perClient: number,
  ) {}

  /** Queues the job, or answers false; `evicted` is given a job that lost its place to this one. */
  offer(client: string, job: Job, evicted: (job: Job) => void): boolean {
    const own = this.waiting.get(client)?.length ?? 0;
    if (own >= this.perClient) return false;
    if (this.size >= this.limit) {
      const [longest, jobs] = [...this.waiting].reduce((a, b) => (b[1].length > a[1].length ? b : a));
      if (jobs.length <= own + 1) return false;
      evicted(jobs.pop()!);
      this.size--;
      if (jobs.length === 0) this.waiting.delete(longest);
    }
    const jobs = this.waiting.get(client);
    if (jobs) jobs.push(job);
    else this.waiting.set(client, [job]);
    this.size++;
    if (this.asked.size >= REMEMBERED_CLIENTS) this.asked.clear();
    this.asked.set(client, (this.asked.get(client) ?? 0) + 1);
    return true;
  }

  shift(): Job | undefined {
    let next: [string, Job[]] | undefined;
    for (const entry of this.waiting) {
      if (!next || (this.asked.get(entry[0]) ?? 0) < (this.asked.get(next[0]) ?? 0)) next = entry;
    }
    if (!next) return undefined;
    const [client, jobs] = next;
    const job = jobs.shift()!;
    // To the back of the line, behind the clients that asked as often.
    this.waiting.delete(client);
    if (jobs.length > 0) this.waiting.set(client, jobs);
    this.size--;
    if (this.size === 0) this.asked.clear();
    return job;
  }
}

/**
 * `contacts_password_queue_depth` and `contacts_password_queue_limit`, read at each scrape, and
 * `contacts_password_hash_duration_seconds`, which the caller observes per job (queue wait included).
 */
function passwordMetrics(registry: Registry, queue: FairQueue, limit: number): Histogram {
  new Gauge({
    name: 'contacts_password_queue_depth',
    help: 'Password hashes and checks waiting for a worker thread.',
    registers: [registry],
    collect() {
      this.set(queue.size);
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
 * `app.passwords`: bcrypt and argon2id hashing on a piscina worker pool with one bounded, fair
 * queue for all password work. New hashes use PASSWORD_HASH; stored hashes of either scheme
 * verify. When PASSWORD_QUEUE_LIMIT jobs already wait, or PASSWORD_QUEUE_PER_CLIENT of the
 * client's, a job is refused with PasswordQueueFull (503).
 */
export default fp(
  async (app) => {
    const { passwordHash, bcryptCost, argon2MemoryKib, argon2TimeCost, argon2Parallelism, passwordQueueLimit, passwordQueuePerClient } =
      app.config;
    const policy: HashPolicy =
      passwordHash === 'bcrypt'
        ? { algorithm: 'bcrypt', cost: bcryptCost }
        : { algorithm: 'argon2id', memoryKib: argon2MemoryKib, timeCost: argon2TimeCost, parallelism: argon2Parallelism };
    const burnHash = dummyHash(policy);

    const threads = availableParallelism();
    const pool = new Piscina({
      ...worker(),
      // One thread per core: a hash is pure CPU, and the event loop mostly waits on I/O meanwhile.
      maxThreads: threads,
      minThreads: 1,
      idleTimeout: IDLE_TIMEOUT_MS,
    });
    const queue = new FairQueue(passwordQueueLimit, passwordQueuePerClient);
    let running = 0;

    // piscina takes work again after destroy(), starting new threads; a closed app must not.
    let closed = false;
    const jobDuration = passwordMetrics(app.metrics.registry, queue, passwordQueueLimit);

    /** Hands waiting jobs to piscina while a thread is free. */
    function dispatch(): void {
      while (running < threads && !closed) {
        const job = queue.shift();
        if (!job) return;
        running++;
        pool
          .run(job.task)
          .then(job.resolve, job.reject)
          .finally(() => {
            running--;
            dispatch();
          });
      }
    }

    async function run<T extends string | boolean | null>(task: PasswordTask, client: string): Promise<T> {
      if (closed) throw new Error('the password pool is closed');
      const refusal = () => new PasswordQueueFull(retryAfterSeconds(queue.size, pool.histogram.runTime.mean, threads));
      const done = jobDuration.startTimer();
      const result = await new Promise<unknown>((resolve, reject) => {
        if (!queue.offer(client, { task, resolve, reject }, (evicted) => evicted.reject(refusal()))) reject(refusal());
        else dispatch();
      });
      done();
      return result as T;
    }

    async function burn(password: string, client: string): Promise<void> {
      // An unreadable burn hash would answer at once, and unknown users would show by their speed.
      if ((await run<boolean | null>({ op: 'verify', password, stored: burnHash, scheme: policy.algorithm }, client)) === null) {
        throw new Error('the burn hash could not be read');
      }
    }

    app.decorate('passwords', {
      hash(password, client) {
        if (policy.algorithm === 'bcrypt' && Buffer.byteLength(password, 'utf8') > BCRYPT_MAX_BYTES) {
          return Promise.reject(new RangeError(`bcrypt hashes at most ${BCRYPT_MAX_BYTES} bytes; refuse longer passwords before hashing`));
        }
        return run<string>({ op: 'hash', password, policy }, client);
      },
      async verify(password, stored, client) {
        const known = readStored(stored, policy);
        // A bcrypt hash would match any longer password that starts with the real one.
        if (!known || (known.scheme === 'bcrypt' && Buffer.byteLength(password, 'utf8') > BCRYPT_MAX_BYTES)) {
          await burn(password, client);
          return { ok: false, needsRehash: false };
        }
        const ok = await run<boolean | null>({ op: 'verify', password, stored, scheme: known.scheme }, client);
        if (ok === null) {
          // It looked like a hash but could not be read: it matches nothing, after a full compare's time.
          app.log.warn('a stored password hash could not be read');
          await burn(password, client);
          return { ok: false, needsRehash: false };
        }
        return { ok, needsRehash: ok && known.differs };
      },
      burn,
    } satisfies Passwords);

    app.addHook('onClose', async () => {
      closed = true;
      for (let job = queue.shift(); job; job = queue.shift()) job.reject(new Error('the password pool is closed'));
      await pool.destroy();
    });
  },
  { name: 'passwords', dependencies: ['config', 'metrics'], fastify: '5.x' },
);
