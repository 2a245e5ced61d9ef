import { LRUCache } from 'lru-cache';

/**
 * An LRU cache of at most `entries` entries, optionally forgotten `ttlMs` after they are set. The
 * bound is `maxSize` with a size of 1 per entry rather than `max`: lru-cache preallocates its arrays
 * for `max` entries (about 35 ms for 100,000, paid again by every app a test builds), and grows them
 * as it fills when only `maxSize` is set.
 */
export function lru<K extends NonNullable<unknown>, V extends NonNullable<unknown>>(entries: number, ttlMs?: number): LRUCache<K, V> {
  return new LRUCache<K, V>({ maxSize: entries, sizeCalculation: () => 1, ...(ttlMs === undefined ? {} : { ttl: ttlMs }) });
}
