import type { FastifyBaseLogger } from 'fastify';
import fp from 'fastify-plugin';
import { LRUCache } from 'lru-cache';
import { outageLog } from './outage-log.js';
import { type RedisClient, userTag } from './redis.js';

/** A cached answer: its serialized JSON body and the headers that go with it. */
export interface CachedAnswer {
  body: string;
  headers: Record<string, string | number>;
}

export interface CacheRead {
  /** The answer cached under the user's current generation, if any. */
  answer: CachedAnswer | undefined;
  /** The generation the answer belongs to; null when the cache must not be used now. */
  generation: number | null;
}

/**
 * Per-user answer cache. Each user has a generation; an answer is stored under the generation that
 * was current before it was computed, and `invalidate` moves the user to a new generation, so
 * every earlier answer becomes unreachable at once (no key scans). Never throws: a failing backend
 * reads as "do not cache" and a failed write is dropped.
 */
export interface AnswerCache {
  read(userId: number, key: string): Promise<CacheRead>;
  /** Stores `answer` for `ttlMs` (at most MAX_TTL_MS) if `generation` is still the user's. */
  write(userId: number, key: string, generation: number, answer: CachedAnswer, ttlMs: number): Promise<void>;
  /** After a committed write by the user: all of their cached answers miss from now on. */
  invalidate(userId: number): Promise<void>;
  /**
   * The account is gone: its answers miss from now on, as after a write, and are deleted from
   * Redis and this process (other processes' copies can no longer be read, and expire).
   */
  forget(userId: number): Promise<void>;
}

declare module 'fastify' {
  interface FastifyInstance {
    cache: AnswerCache;
  }
}

/** The longest TTL any answer gets (upcoming birthdays: one hour). */
export const MAX_TTL_MS = 3_600_000;
/** Bytes of answers this process keeps; the least recently used go first. */
const MEMORY_BYTES = 64 * 1024 * 1024;
const PURGE_INTERVAL_MS = 60_000;

/** How much the cache holds for one answer and for one user (CACHE_MAX_ANSWER_BYTES, CACHE_USER_BYTES). */
export interface CacheLimits {
  /** A larger answer (its JSON body, in UTF-8) is not cached at all. */
  maxAnswerBytes: number;
  /** Bytes of one user's unexpired answers, in Redis and in each process's memory; past it new answers are not cached. */
  userBytes: number;
}

/** Whether `answer` is small enough to cache at all. */
const cacheable = (answer: CachedAnswer, limits: CacheLimits) => Buffer.byteLength(answer.body) <= limits.maxAnswerBytes;

interface Remembered {
  userId: number;
  generation: number;
  answer: CachedAnswer;
  /** What the entry takes in memory: UTF-16 code units, plus room for the headers and the entry itself. */
  size: number;
}

interface AnswerMemory {
  get(userId: number, key: string): Remembered | undefined;
  /** Keeps the answer for `ttlMs` unless that would take the user past `userBytes`. */
  set(userId: number, key: string, generation: number, answer: CachedAnswer, ttlMs: number): void;
  /** Drops every answer of the user (one pass over the keys: an account deletion is rare). */
  forget(userId: number): void;
  stop(): void;
}

/**
 * Answers kept in this process, bounded by size in all and per user; the least recently used go
 * first, and expired ones are purged every minute.
 */
function answerMemory(limits: CacheLimits): AnswerMemory {
  const usage = new Map<number, number>();
  const answers = new LRUCache<string, Remembered>({
    maxSize: MEMORY_BYTES,
    sizeCalculation: (entry) => entry.size,
    ttlAutopurge: false,
    // Evicted, expired, replaced or deleted: no longer the user's.
    dispose: ({ userId, size }) => {
      const left = (usage.get(userId) ?? 0) - size;
      if (left > 0) usage.set(userId, left);
      else usage.delete(userId);
    },
  });
  const purge = setInterval(() => answers.purgeStale(), PURGE_INTERVAL_MS);
  purge.unref();
  return {
    get: (userId, key) => answers.get(`${userId} ${key}`),
    set(userId, key, generation, answer, ttlMs) {
      const size = answer.body.length * 2 + 512;
      const replaced = answers.peek(`${userId} ${key}`)?.size ?? 0;
      if ((usage.get(userId) ?? 0) - replaced + size > limits.userBytes) return;
      answers.set(`${userId} ${key}`, { userId, generation, answer, size }, { ttl: ttlMs });
      if (answers.has(`${userId} ${key}`)) usage.set(userId, (usage.get(userId) ?? 0) + size);
    },
    forget(userId) {
      const prefix = `${userId} `;
      for (const key of [...answers.keys()].filter((key) => key.startsWith(prefix))) answers.delete(key);
    },
    stop: () => clearInterval(purge),
  };
}

const cappedTtl = (ttlMs: number) => Math.min(MAX_TTL_MS, Math.max(1, Math.floor(ttlMs)));

/**
 * Cache in this process only: generations in a map that is never evicted, answers in an LRU bounded
 * by size in all and per user; an answer over `limits.maxAnswerBytes` is not kept.
 */
export function memoryCache(limits: CacheLimits): AnswerCache & { stop: () => void } {
  const answers = answerMemory(limits);
  const generations = new Map<number, number>();
  const generationOf = (userId: number) => generations.get(userId) ?? 0;
  return {
    async read(userId, key) {
      const generation = generationOf(userId);
      const remembered = answers.get(userId, key);
      return { answer: remembered?.generation === generation ? remembered.answer : undefined, generation };
    },
    async write(userId, key, generation, answer, ttlMs) {
      if (generation === generationOf(userId) && cacheable(answer, limits)) answers.set(userId, key, generation, answer, cappedTtl(ttlMs));
    },
    async invalidate(userId) {
      generations.set(userId, generationOf(userId) + 1);
    },
    async forget(userId) {
      generations.set(userId, generationOf(userId) + 1);
      answers.forget(userId);
    },
    stop: () => answers.stop(),
  };
}

/**
 * The node the script runs on (CLUSTER MYID; empty on a Redis without cluster support) and
 * whether it wrote the user's generation (KEYS[1]) itself: KEYS[2] holds the node that set it last.
 * Generations a master took over from another node (a replica promoted in a failover, a slot moved)
 * are not trusted: replication is asynchronous, so the last invalidations may not have arrived,
 * and the answers of an older generation would be served as current.
 */
const OWN_GENERATION = `
local node = redis.pcall('CLUSTER', 'MYID')
if type(node) ~= 'string' then node = '' end
local own = redis.call('GET', KEYS[2]) == node and redis.call('EXISTS', KEYS[1]) == 1
`;

/**
 * One round trip per read: the user's generation, and the answer stored under it unless this
 * process already holds that generation's answer (then only the generation travels). A user with
 * no generation in Redis (it restarted empty, or evicted the key), or one this node did not write,
 * starts at a new one above every earlier one (ARGV[4], from the clock), so no answer an instance
 * still holds, nor any answer stored under an older generation, can match it.
 */
const READ_SCRIPT = `${OWN_GENERATION}
local generation = ARGV[4]
if own then
  generation = redis.call('GET', KEYS[1])
else
  redis.call('SET', KEYS[1], generation)
  redis.call('SET', KEYS[2], node)
end
if generation == ARGV[2] then return {generation} end
return {generation, redis.call('GET', ARGV[1] .. generation .. ':' .. ARGV[3])}
`;

/**
 * Stores an answer (KEYS[1]) unless the user's unexpired answers would then take more than their
 * budget. The user's ledger (KEYS[2], a sorted set of "size key" by expiry) and byte count (KEYS[3])
 * say how much that is; entries past their expiry leave both first. ARGV: the stored answer, its TTL
 * in ms, now in ms, its size in bytes, the budget, and the longest TTL (the ledger's own lifetime).
 * An answer written again under the same key and size is counted once. Returns 1 when stored.
 */
const WRITE_SCRIPT = `
local now = tonumber(ARGV[3])
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
if #expired > 0 then
  local freed = 0
  for _, entry in ipairs(expired) do freed = freed + tonumber(string.match(entry, '^%d+')) end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('DECRBY', KEYS[3], freed) < 0 then redis.call('SET', KEYS[3], 0) end
end
local size = tonumber(ARGV[4])
local entry = ARGV[4] .. ' ' .. KEYS[1]
local counted = redis.call('ZSCORE', KEYS[2], entry)
if not counted and tonumber(redis.call('GET', KEYS[3]) or '0') + size > tonumber(ARGV[5]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), entry)
if not counted then redis.call('INCRBY', KEYS[3], size) end
redis.call('PEXPIRE', KEYS[2], ARGV[6])
redis.call('PEXPIRE', KEYS[3], ARGV[6])
return 1
`;

/** Moves the user to the next generation; a missing one, or one another node wrote, starts above every earlier one, as in READ_SCRIPT. */
const INVALIDATE_SCRIPT = `${OWN_GENERATION}
if not own then
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call('SET', KEYS[2], node)
end
return redis.call('INCR', KEYS[1])
`;

interface CacheCommands {
  cacheRead(
    generationKey: string,
    writerKey: string,
    answerPrefix: string,
    heldGeneration: string,
    key: string,
    firstGeneration: string,
  ): Promise<[string, string | null] | [string]>;
  cacheWrite(
    answerKey: string,
    ledgerKey: string,
    bytesKey: string,
    stored: string,
    ttlMs: number,
    nowMs: number,
    size: number,
    budget: number,
    maxTtlMs: number,
  ): Promise<number>;
  cacheInvalidate(generationKey: string, writerKey: string, firstGeneration: string): Promise<number>;
}

/** What an answer takes in Redis beyond its stored text: its key, twice (the ledger names it), and the entries' overhead. */
const PER_ANSWER_BYTES = 256;

/** A first generation above any this deployment handed out before: microseconds of the wall clock. */
const firstGeneration = (nowMs: number) => String(nowMs * 1000);

/**
 * Cache over Redis, shared by every instance, with this process's own copy of recent answers in
 * front (checked against the generation on every read, so it is never stale). Keys of one user
 * share a hash tag, so the read script stays in one Redis Cluster slot. When an invalidation fails,
 * answers of the old generation may still be in Redis, so this process bypasses that user until
 * every answer written before the failed invalidation has expired. `now` is the wall clock in ms.
 */
export function redisCache(
  client: RedisClient,
  prefix: string,
  log: FastifyBaseLogger,
  limits: CacheLimits,
  now: () => number = Date.now,
): AnswerCache & { stop: () => void } {
  if (!('cacheRead' in client)) {
    client.defineCommand('cacheRead', { numberOfKeys: 2, lua: READ_SCRIPT });
    client.defineCommand('cacheWrite', { numberOfKeys: 3, lua: WRITE_SCRIPT });
    client.defineCommand('cacheInvalidate', { numberOfKeys: 2, lua: INVALIDATE_SCRIPT });
  }
  const redis = client as RedisClient & CacheCommands;
  const nearby = answerMemory(limits);
  const userKey = (userId: number) => `${prefix}${userTag(userId)}:`;

  // Settled: right after a reconnection the odd command still fails, which is no new outage.
  const outage = outageLog(log, { down: 'redis cache unavailable; answering from the database', up: 'redis cache available again' }, 1_000);

  /** User → the instant their bypass ends. Re-inserting keeps the map in expiry order. */
  const bypassUntil = new Map<number, number>();
  const bypassed = (userId: number) => {
    for (const [user, until] of bypassUntil) {
      if (until > now()) break;
      bypassUntil.delete(user);
    }
    return bypassUntil.has(userId);
  };

  async function invalidate(userId: number): Promise<void> {
    try {
      await redis.cacheInvalidate(`${userKey(userId)}g`, `${userKey(userId)}g-node`, firstGeneration(now()));
      outage.answered();
    } catch (error) {
      outage.failed(error);
      bypassUntil.delete(userId);
      bypassUntil.set(userId, now() + MAX_TTL_MS);
      // The outage is already said once; each user it touches is detail.
      log.debug({ userId }, 'cache invalidation failed; bypassing the cache for this user for an hour');
    }
  }

  return {
    async read(userId, key) {
      if (bypassed(userId)) return { answer: undefined, generation: null };
      const held = nearby.get(userId, key);
      let reply;
      try {
        reply = await redis.cacheRead(
          `${userKey(userId)}g`,
          `${userKey(userId)}g-node`,
          `${userKey(userId)}a:`,
          String(held?.generation ?? ''),
          key,
          firstGeneration(now()),
        );
        outage.answered();
      } catch (error) {
        outage.failed(error);
        return { answer: undefined, generation: null };
      }
      const generation = Number(reply[0]);
      if (held?.generation === generation) return { answer: held.answer, generation };
      const stored = reply[1] ? parseStored(reply[1]) : undefined;
      if (!stored || stored.expiresAt <= now()) return { answer: undefined, generation };
      nearby.set(userId, key, generation, stored.answer, stored.expiresAt - now());
      return { answer: stored.answer, generation };
    },
    async write(userId, key, generation, answer, ttlMs) {
      if (!cacheable(answer, limits)) return;
      const ttl = cappedTtl(ttlMs);
      nearby.set(userId, key, generation, answer, ttl);
      const answerKey = `${userKey(userId)}a:${generation}:${key}`;
      const stored = formatStored(answer, now() + ttl);
      const size = Buffer.byteLength(stored) + 2 * answerKey.length + PER_ANSWER_BYTES;
      try {
        await redis.cacheWrite(
          answerKey,
          `${userKey(userId)}ledger`,
          `${userKey(userId)}bytes`,
          stored,
          ttl,
          now(),
          size,
          limits.userBytes,
          MAX_TTL_MS,
        );
        outage.answered();
      } catch (error) {
        outage.failed(error);
      }
    },
    invalidate,
    async forget(userId) {
      await invalidate(userId);
      nearby.forget(userId);
      // The ledger names every answer stored (each entry is "size key"); all share the user's slot.
      try {
        const ledger = `${userKey(userId)}ledger`;
        const answers = (await redis.zrange(ledger, 0, -1)).map((entry) => entry.slice(entry.indexOf(' ') + 1));
        await redis.del(...answers, ledger, `${userKey(userId)}bytes`);
      } catch (error) {
        outage.failed(error);
      }
    },
    stop: () => nearby.stop(),
  };
}

/** `expiresAt\nheaders JSON\nbody`: the body (JSON, never a raw newline) is stored as it is sent. */
function formatStored(answer: CachedAnswer, expiresAt: number): string {
  return `${expiresAt}\n${JSON.stringify(answer.headers)}\n${answer.body}`;
}

/** The stored form back; undefined for anything else found under the key. */
function parseStored(stored: string): { answer: CachedAnswer; expiresAt: number } | undefined {
  const first = stored.indexOf('\n');
  const second = stored.indexOf('\n', first + 1);
  if (first < 0 || second < 0) return undefined;
  try {
    const headers = JSON.parse(stored.slice(first + 1, second)) as CachedAnswer['headers'];
    return { expiresAt: Number(stored.slice(0, first)), answer: { headers, body: stored.slice(second + 1) } };
  } catch {
    return undefined;
  }
}

/** One per read that consults the cache: a hit when it holds the answer, else a miss (X-Cache says the same). */
const LOOKUPS = {
  name: 'contacts_cache_lookups_total',
  help: 'Cached reads (a contact, a list page, upcoming birthdays) by whether the cache held the answer.',
  labelNames: ['result'],
  series: [{ result: 'hit' }, { result: 'miss' }],
} as const;

/**
 * `app.cache`: Redis under `${redisKeyPrefix}cache:` when a Redis client exists, else in this process
 * only; answers over CACHE_MAX_ANSWER_BYTES are not cached, and each user's take CACHE_USER_BYTES at
 * most. Each read counts in `contacts_cache_lookups_total`.
 */
export default fp(
  async (app) => {
    const { cacheMaxAnswerBytes: maxAnswerBytes, cacheUserBytes: userBytes } = app.config;
    const limits = { maxAnswerBytes, userBytes };
    const cache = app.redisClient
      ? redisCache(app.redisClient, `${app.config.redisKeyPrefix}cache:`, app.log, limits)
      : memoryCache(limits);
    const lookups = app.metrics.counter(LOOKUPS);
    const [hits, misses] = [lookups.labels('hit'), lookups.labels('miss')];
    app.decorate('cache', {
      ...cache,
      async read(userId, key) {
        const found = await cache.read(userId, key);
        (found.answer ? hits : misses).inc();
        return found;
      },
    } satisfies AnswerCache);
    app.addHook('onClose', async () => cache.stop());
  },
  { name: 'cache', dependencies: ['config', 'redis', 'metrics'], fastify: '5.x' },
);
