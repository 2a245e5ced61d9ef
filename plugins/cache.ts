import type { FastifyBaseLogger } from 'fastify';
import fp from 'fastify-plugin';
import type { Redis } from 'ioredis';
import { LRUCache } from 'lru-cache';
import { outageLog } from './outage-log.js';

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

interface Remembered {
  generation: number;
  answer: CachedAnswer;
}

/** Answers kept in this process, bounded by size; expired ones are purged every minute. */
function answerMemory(): { answers: LRUCache<string, Remembered>; stop: () => void } {
  const answers = new LRUCache<string, Remembered>({
    maxSize: MEMORY_BYTES,
    // UTF-16 code units, plus room for the headers and the entry itself.
    sizeCalculation: (entry) => entry.answer.body.length * 2 + 512,
    ttlAutopurge: false,
  });
  const purge = setInterval(() => answers.purgeStale(), PURGE_INTERVAL_MS);
  purge.unref();
  return { answers, stop: () => clearInterval(purge) };
}

const cappedTtl = (ttlMs: number) => Math.min(MAX_TTL_MS, Math.max(1, Math.floor(ttlMs)));

/** Cache in this process only: generations in a map that is never evicted, answers in a size-bounded LRU. */
export function memoryCache(): AnswerCache & { stop: () => void } {
  const { answers, stop } = answerMemory();
  const generations = new Map<number, number>();
  const generationOf = (userId: number) => generations.get(userId) ?? 0;
  return {
    async read(userId, key) {
      const generation = generationOf(userId);
      const remembered = answers.get(`${userId} ${key}`);
      return { answer: remembered?.generation === generation ? remembered.answer : undefined, generation };
    },
    async write(userId, key, generation, answer, ttlMs) {
      if (generation === generationOf(userId)) answers.set(`${userId} ${key}`, { generation, answer }, { ttl: cappedTtl(ttlMs) });
    },
    async invalidate(userId) {
      generations.set(userId, generationOf(userId) + 1);
    },
    stop,
  };
}

/**
 * One round trip per read: the user's generation, and the answer stored under it unless this
 * process already holds that generation's answer (then only the generation travels). A user with
 * no generation in Redis (it restarted empty, or evicted the key) starts at a new one above every
 * earlier one (ARGV[4], from the clock), so no answer an instance still holds can match it.
 */
const READ_SCRIPT = `
local generation = redis.call('GET', KEYS[1])
if not generation then
  generation = ARGV[4]
  redis.call('SET', KEYS[1], generation)
end
if generation == ARGV[2] then return {generation} end
return {generation, redis.call('GET', ARGV[1] .. generation .. ':' .. ARGV[3])}
`;

/** Moves the user to the next generation; a missing one starts above every earlier one, as in READ_SCRIPT. */
const INVALIDATE_SCRIPT = `
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('SET', KEYS[1], ARGV[1]) end
return redis.call('INCR', KEYS[1])
`;

interface CacheCommands {
  cacheRead(generationKey: string, answerPrefix: string, heldGeneration: string, key: string, firstGeneration: string): Promise<[string, string | null] | [string]>;
  cacheInvalidate(generationKey: string, firstGeneration: string): Promise<number>;
}

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
  client: Redis,
  prefix: string,
  log: FastifyBaseLogger,
  now: () => number = Date.now,
): AnswerCache & { stop: () => void } {
  if (!('cacheRead' in client)) {
    client.defineCommand('cacheRead', { numberOfKeys: 1, lua: READ_SCRIPT });
    client.defineCommand('cacheInvalidate', { numberOfKeys: 1, lua: INVALIDATE_SCRIPT });
  }
  const redis = client as Redis & CacheCommands;
  const { answers: nearby, stop } = answerMemory();
  const userKey = (userId: number) => `${prefix}{u${userId}}:`;

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

  return {
    async read(userId, key) {
      if (bypassed(userId)) return { answer: undefined, generation: null };
      const held = nearby.get(`${userId} ${key}`);
      let reply;
      try {
        reply = await redis.cacheRead(`${userKey(userId)}g`, `${userKey(userId)}a:`, String(held?.generation ?? ''), key, firstGeneration(now()));
        outage.answered();
      } catch (error) {
        outage.failed(error);
        return { answer: undefined, generation: null };
      }
      const generation = Number(reply[0]);
      if (held?.generation === generation) return { answer: held.answer, generation };
      const stored = reply[1] ? parseStored(reply[1]) : undefined;
      if (!stored || stored.expiresAt <= now()) return { answer: undefined, generation };
      nearby.set(`${userId} ${key}`, { generation, answer: stored.answer }, { ttl: stored.expiresAt - now() });
      return { answer: stored.answer, generation };
    },
    async write(userId, key, generation, answer, ttlMs) {
      const ttl = cappedTtl(ttlMs);
      nearby.set(`${userId} ${key}`, { generation, answer }, { ttl });
      try {
        await redis.set(`${userKey(userId)}a:${generation}:${key}`, formatStored(answer, now() + ttl), 'PX', ttl);
        outage.answered();
      } catch (error) {
        outage.failed(error);
      }
    },
    async invalidate(userId) {
      try {
        await redis.cacheInvalidate(`${userKey(userId)}g`, firstGeneration(now()));
        outage.answered();
      } catch (error) {
        outage.failed(error);
        bypassUntil.delete(userId);
        bypassUntil.set(userId, now() + MAX_TTL_MS);
        // The outage is already said once; each user it touches is detail.
        log.debug({ userId }, 'cache invalidation failed; bypassing the cache for this user for an hour');
      }
    },
    stop,
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
 * `app.cache`: Redis under `${redisKeyPrefix}cache:` when a Redis client exists, else in this
 * process only. Each read counts in `contacts_cache_lookups_total`.
 */
export default fp(
  async (app) => {
    const cache = app.redisClient ? redisCache(app.redisClient, `${app.config.redisKeyPrefix}cache:`, app.log) : memoryCache();
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
