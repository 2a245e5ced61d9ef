/** The cache plugin's two stores: the in-process LRU, and Redis (answering, and refusing connections). */
import { once } from 'node:events';
import type { FastifyBaseLogger } from 'fastify';
import { Redis } from 'ioredis';
import t from 'tap';
import { MAX_TTL_MS, memoryCache, redisCache } from '../../plugins/cache.js';
import { backend, REDIS_URL } from '../helper.js';

/** A logger that records warnings and info lines. */
function recordingLogger(): { log: FastifyBaseLogger; warnings: unknown[][]; infos: unknown[][] } {
  const warnings: unknown[][] = [];
  const infos: unknown[][] = [];
  const log = {
    warn: (...args: unknown[]) => warnings.push(args),
    info: (...args: unknown[]) => infos.push(args),
    debug: () => undefined,
  } as unknown as FastifyBaseLogger;
  return { log, warnings, infos };
}

t.test('memory cache: values, and generations that only move forward', async (t) => {
  const cache = memoryCache();
  t.equal(await cache.get('k'), undefined);
  await cache.set('k', { a: [1, 'x'] }, 10_000);
  t.same(await cache.get('k'), { a: [1, 'x'] });
  t.equal(await cache.generation('s'), 0);
  await cache.bump('s');
  await cache.bump('s');
  t.equal(await cache.generation('s'), 2);
  t.equal(await cache.generation('other'), 0, 'scopes are independent');
});

t.test('redis cache with Redis refusing connections: misses, unknown generations, one warning, no throws', async (t) => {
  const client = new Redis('redis://127.0.0.1:6390', { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null });
  t.teardown(() => client.disconnect());
  await client.connect().catch(() => undefined);
  const { log, warnings } = recordingLogger();
  const cache = redisCache(client, 'test:', log);
  t.equal(await cache.get('k'), undefined);
  await cache.set('k', 1, 1000);
  t.equal(await cache.generation('s'), null, 'an unknown generation tells the caller to skip the cache');
  await cache.bump('s');
  t.equal(warnings.length, 1, 'one warning for the outage, not one per call');
  t.match(warnings[0]!, [{ operation: 'get' }, 'redis cache unavailable']);
});

t.test('redis cache on a live Redis', { skip: backend !== 'postgres' && 'needs the real Redis of the postgres backend' }, async (t) => {
  const client = new Redis(REDIS_URL);
  t.teardown(() => client.quit());
  const prefix = `test:cache-unit:${Date.now()}:`;
  t.teardown(async () => {
    const keys = await client.keys(`${prefix}*`);
    if (keys.length > 0) await client.del(...keys);
  });
  const { log, warnings } = recordingLogger();
  const cache = redisCache(client, prefix, log);
  await cache.set('k', { n: 1 }, 5_000);
  t.same(await cache.get('k'), { n: 1 });
  const ttl = await client.pttl(`${prefix}v:k`);
  t.ok(ttl > 0 && ttl <= 5_000, `expires within the TTL (${ttl} ms)`);
  t.equal(await cache.generation('s'), 0);
  await cache.bump('s');
  t.equal(await cache.generation('s'), 1);
  t.equal(await client.ttl(`${prefix}g:s`), -1, 'generations never expire, so an old generation cannot come back');
  t.same(warnings, []);
});

t.test(
  'redis cache: a failed bump bypasses that scope for the longest TTL, so an old generation is never served',
  { skip: backend !== 'postgres' && 'needs the real Redis of the postgres backend' },
  async (t) => {
    // Configured like plugins/redis.ts: no offline queue, so a command on a dropped connection fails at once.
    const client = new Redis(REDIS_URL, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0 });
    await client.connect();
    t.teardown(() => client.quit());
    const prefix = `test:cache-bump:${Date.now()}:`;
    t.teardown(async () => {
      const keys = await client.keys(`${prefix}*`);
      if (keys.length > 0) await client.del(...keys);
    });
    let clock = 1_000_000;
    const { log, warnings, infos } = recordingLogger();
    const cache = redisCache(client, prefix, log, () => clock);
    t.equal(await cache.generation('s'), 0);
    await cache.set('s:0:k', 'before the write', MAX_TTL_MS);

    // The connection drops exactly while the write bumps the generation, then comes back.
    client.disconnect();
    await once(client, 'end');
    await cache.bump('s');
    await client.connect();
    t.equal(warnings.length, 1);
    t.match(warnings[0]!, [{ operation: 'bump', scope: 's' }, 'redis cache unavailable']);
    t.equal(await client.get(`${prefix}g:s`), null, 'the generation really did not move');
    t.same(await cache.get('s:0:k'), 'before the write', 'the old entry is still in Redis');
    t.same(infos, [['redis cache reachable again']], 'the first call that succeeds ends the outage');

    t.equal(await cache.generation('s'), null, 'so the scope bypasses the cache');
    t.equal(await cache.generation('other'), 0, 'other scopes are unaffected');
    clock += MAX_TTL_MS - 1;
    t.equal(await cache.generation('s'), null, 'until every entry from before the failed bump has expired');
    clock += 1;
    t.equal(await cache.generation('s'), 0, 'then Redis decides again');
    await cache.bump('s');
    t.equal(await cache.generation('s'), 1);
    t.equal(warnings.length, 1);
  },
);

t.test('redis cache: entries never outlive the bypass of a failed bump', { skip: backend !== 'postgres' && 'needs the real Redis of the postgres backend' }, async (t) => {
  const client = new Redis(REDIS_URL);
  t.teardown(() => client.quit());
  const prefix = `test:cache-ttl:${Date.now()}:`;
  t.teardown(() => client.del(`${prefix}v:k`));
  const cache = redisCache(client, prefix, recordingLogger().log);
  await cache.set('k', 1, 2 * MAX_TTL_MS);
  const ttl = await client.pttl(`${prefix}v:k`);
  t.ok(ttl > MAX_TTL_MS - 60_000 && ttl <= MAX_TTL_MS, `capped at MAX_TTL_MS (${ttl} ms)`);
});
