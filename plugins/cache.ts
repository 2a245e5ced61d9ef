import type { FastifyBaseLogger } from 'fastify';
import fp from 'fastify-plugin';
import type { Redis } from 'ioredis';
import { LRUCache } from 'lru-cache';
import { outageLog } from './outage-log.js';

/**
 * A small read cache with per-scope generations: a reader puts `generation(scope)` into its key, and
 * `bump(scope)` makes every key built with an older generation unreachable at once (no key scans).
 * Never throws: a failing backend reads as a miss and a failed write is dropped, with one warning per outage.
 */
export interface Cache {
  get<T>(key: string): Promise<T | undefined>;
  /** Stores `value` for `ttlMs` (at most MAX_TTL_MS). */
  set(key: string, value: unknown, ttlMs: number): Promise<void>;
  /** The current generation of `scope` (0 until the first bump); null when unknown, so the caller must not use the cache. */
  generation(scope: string): Promise<number | null>;
  /** Moves `scope` to a new generation. */
  bump(scope: string): Promise<void>;
}

declare module 'fastify' {
  interface FastifyInstance {
    cache: Cache;
  }
}

/** Entries kept by the in-process cache; the oldest go first. */
const MAX_ENTRIES = 10_000;
/** The longest TTL any caller gives an entry (upcoming birthdays: one hour). */
export const MAX_TTL_MS = 3_600_000;

/**
 * Cache over Redis: values as JSON under `prefix`, generations as INCR counters. When a bump fails,
 * entries of the old generation may still be in Redis, so this process bypasses that scope (its
 * generation reads as unknown) until every entry written before the failed bump has expired.
 * `now` is the wall clock in ms (Redis expiry runs on real time).
 */
export function redisCache(client: Redis, prefix: string, log: FastifyBaseLogger, now: () => number = Date.now): Cache {
  // Every request reads or bumps: log the outage once, not once per call.
  const outage = outageLog(log, { down: 'redis cache unavailable; using the database', up: 'redis cache reachable again' });
  const failed = (operation: string) => (error: unknown) => {
    outage.failed(error, { operation });
    return undefined;
  };
  const answered = <T>(value: T) => {
    outage.answered();
    return value;
  };
  /** Scope → the instant its bypass ends. */
  const bypassUntil = new Map<string, number>();
  const bypassed = (scope: string) => {
    const until = bypassUntil.get(scope);
    if (until === undefined) return false;
    if (now() < until) return true;
    bypassUntil.delete(scope);
    return false;
  };
  return {
    async get<T>(key: string) {
      const raw = await client.get(`${prefix}v:${key}`).then(answered, failed('get'));
      return raw == null ? undefined : (JSON.parse(raw) as T);
    },
    async set(key, value, ttlMs) {
      // Capped so that a bypass of MAX_TTL_MS outlives every entry written before it.
      const ttl = Math.min(MAX_TTL_MS, Math.max(1, Math.floor(ttlMs)));
      await client.set(`${prefix}v:${key}`, JSON.stringify(value), 'PX', ttl).then(answered, failed('set'));
    },
    async generation(scope) {
      if (bypassed(scope)) return null;
      const raw = await client.get(`${prefix}g:${scope}`).then(answered, failed('generation'));
      return raw === undefined ? null : Number(raw ?? 0);
    },
    async bump(scope) {
      try {
        await client.incr(`${prefix}g:${scope}`);
        outage.answered();
      } catch (error) {
        // Re-inserting keeps the map in expiry order, so expired bypasses are swept from the front.
        bypassUntil.delete(scope);
        bypassUntil.set(scope, now() + MAX_TTL_MS);
        for (const [key, until] of bypassUntil) {
          if (until > now()) break;
          bypassUntil.delete(key);
        }
        outage.failed(error, { operation: 'bump', scope });
        log.debug({ scope }, 'redis cache bump failed; bypassing the cache for this scope for an hour');
      }
    },
  };
}

/** Cache in this process: an LRU of values with per-entry TTLs; generations in a map that is never evicted. */
export function memoryCache(): Cache {
  const values = new LRUCache<string, { value: unknown }>({ max: MAX_ENTRIES });
  const generations = new Map<string, number>();
  return {
    async get<T>(key: string) {
      return values.get(key)?.value as T | undefined;
    },
    async set(key, value, ttlMs) {
      values.set(key, { value }, { ttl: Math.max(1, Math.floor(ttlMs)) });
    },
    async generation(scope) {
      return generations.get(scope) ?? 0;
    },
    async bump(scope) {
      generations.set(scope, (generations.get(scope) ?? 0) + 1);
    },
  };
}

/** `app.cache`: Redis under `${redisKeyPrefix}cache:` when a Redis client exists, else an in-process LRU. */
export default fp(
  async (app) => {
    const cache = app.redisClient ? redisCache(app.redisClient, `${app.config.redisKeyPrefix}cache:`, app.log) : memoryCache();
    app.decorate('cache', cache);
  },
  { name: 'cache', dependencies: ['config', 'redis'], fastify: '5.x' },
);
