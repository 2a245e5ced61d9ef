/** The cache plugin's two stores: in this process only, and Redis (answering, and refusing connections). */
import { once } from 'node:events';
import type { FastifyBaseLogger } from 'fastify';
import { Redis } from 'ioredis';
import t, { type Test } from 'tap';
import { MAX_TTL_MS, memoryCache, redisCache } from '../../plugins/cache.js';
import { backend, REDIS_URL } from '../helper.js';

const onlyWithRedis = { skip: backend !== 'postgres' && 'needs the real Redis of the postgres backend' };
const answer = (body: string) => ({ body, headers: { 'X-Total-Count': 1 } });
/** Limits no test here reaches, but for those that are about them. */
const roomy = { maxAnswerBytes: 1 << 30, userBytes: 1 << 30 };

/** A logger that records warnings and infos. */
function recordingLogger(): { log: FastifyBaseLogger; lines: [string, ...unknown[]][] } {
  const lines: [string, ...unknown[]][] = [];
  const log = {
    warn: (...args: unknown[]) => lines.push(['warn', ...args]),
    info: (...args: unknown[]) => lines.push(['info', ...args]),
    debug: () => {},
  } as unknown as FastifyBaseLogger;
  return { log, lines };
}

/** A Redis key prefix of its own, deleted at teardown. */
function privatePrefix(t: Test, client: Redis, name: string): string {
  const prefix = `test:${name}:${Date.now()}:`;
  t.teardown(async () => {
    const keys = await client.keys(`${prefix}*`);
    if (keys.length > 0) await client.del(...keys);
  });
  return prefix;
}

t.test('memory cache: answers under the current generation only; users are independent', async (t) => {
  const cache = memoryCache(roomy);
  t.teardown(() => cache.stop());
  t.same(await cache.read(1, 'k'), { answer: undefined, generation: 0 });
  await cache.write(1, 'k', 0, answer('[1]'), 10_000);
  t.same(await cache.read(1, 'k'), { answer: answer('[1]'), generation: 0 });
  await cache.invalidate(1);
  t.same(await cache.read(1, 'k'), { answer: undefined, generation: 1 }, 'an invalidation hides every earlier answer');
  await cache.write(1, 'k', 0, answer('[stale]'), 10_000);
  t.same(await cache.read(1, 'k'), { answer: undefined, generation: 1 }, 'an answer computed before the invalidation is not kept');
  t.same(await cache.read(2, 'k'), { answer: undefined, generation: 0 }, "another user's generation is untouched");
});

t.test('memory cache: bounded by bytes, not entries', async (t) => {
  const cache = memoryCache(roomy);
  t.teardown(() => cache.stop());
  // 80 answers of 1 MiB (2 MiB in memory each) are more than the 64 MiB the process keeps.
  const big = 'x'.repeat(1024 * 1024);
  for (let i = 0; i < 80; i++) await cache.write(1, `page ${i}`, 0, answer(big), 10_000);
  t.equal((await cache.read(1, 'page 0')).answer, undefined, 'the oldest answers are gone');
  t.equal((await cache.read(1, 'page 79')).answer?.body.length, big.length, 'the newest stays');
  let kept = 0;
  for (let i = 0; i < 80; i++) if ((await cache.read(1, `page ${i}`)).answer) kept++;
  t.ok(kept <= 32, `at most 64 MiB kept (${kept} answers of 2 MiB)`);
});

t.test('memory cache: an answer over maxAnswerBytes is not kept; a user keeps userBytes at most, freed as answers expire', async (t) => {
  // In memory an answer takes 2 bytes a character plus 512: 1,000 characters take 2,512.
  const cache = memoryCache({ maxAnswerBytes: 1_000, userBytes: 6_000 });
  t.teardown(() => cache.stop());
  const page = 'x'.repeat(1_000);
  await cache.write(1, 'big', 0, answer(`${page}x`), 10_000);
  t.equal((await cache.read(1, 'big')).answer, undefined, '1,001 bytes: not kept');
  await cache.write(1, 'a', 0, answer(page), 200);
  await cache.write(1, 'b', 0, answer(page), 20_000);
  await cache.write(1, 'c', 0, answer(page), 20_000);
  t.ok((await cache.read(1, 'a')).answer && (await cache.read(1, 'b')).answer, 'two answers fit');
  t.equal((await cache.read(1, 'c')).answer, undefined, 'a third would take the user past 6,000 bytes');
  await cache.write(1, 'b', 0, answer(page), 20_000);
  t.ok((await cache.read(1, 'b')).answer, 'writing a kept answer again replaces it');
  await cache.write(2, 'c', 0, answer(page), 20_000);
  t.ok((await cache.read(2, 'c')).answer, "another user's budget is their own");
  await new Promise((resolve) => setTimeout(resolve, 250));
  t.equal((await cache.read(1, 'a')).answer, undefined, 'the first answer expired');
  await cache.write(1, 'c', 0, answer(page), 20_000);
  t.ok((await cache.read(1, 'c')).answer, 'and its bytes are free again');
});

t.test(
  'redis cache: an answer over maxAnswerBytes is not stored; a user stores userBytes at most, freed as answers expire',
  onlyWithRedis,
  async (t) => {
    const client = new Redis(REDIS_URL);
    t.teardown(() => client.quit());
    const prefix = privatePrefix(t, client, 'cache-budget');
    let clock = Date.now();
    // An answer takes its stored text (expiry, headers and body), its key twice and 256 bytes: about 1,400 here.
    const cache = redisCache(client, prefix, recordingLogger().log, { maxAnswerBytes: 1_000, userBytes: 3_000 }, () => clock);
    t.teardown(() => cache.stop());
    const answerKeys = async (user: number) => (await client.keys(`${prefix}{u${user}}:a:*`)).sort();
    const page = 'x'.repeat(1_000);
    await cache.write(1, 'big', 0, answer(`${page}x`), 10_000);
    t.same(await answerKeys(1), [], '1,001 bytes: not stored');
    await cache.write(1, 'a', 0, answer(page), 10_000);
    await cache.write(1, 'b', 0, answer(page), 20_000);
    await cache.write(1, 'c', 0, answer(page), 20_000);
    t.same(await answerKeys(1), [`${prefix}{u1}:a:0:a`, `${prefix}{u1}:a:0:b`], 'two answers fit, a third would not');
    const bytes = Number(await client.get(`${prefix}{u1}:bytes`));
    t.ok(bytes > 2_000 && bytes <= 3_000, `the user's byte count (${bytes}) is what is stored`);
    await cache.write(1, 'b', 0, answer(page), 20_000);
    t.equal(Number(await client.get(`${prefix}{u1}:bytes`)), bytes, 'writing a stored answer again counts it once');
    await cache.write(2, 'c', 0, answer(page), 20_000);
    t.same(await answerKeys(2), [`${prefix}{u2}:a:0:c`], "another user's budget is their own");
    clock += 10_001;
    await cache.write(1, 'c', 0, answer(page), 20_000);
    t.ok((await answerKeys(1)).includes(`${prefix}{u1}:a:0:c`), 'once the first answer has expired its bytes are free again');
    t.ok((await client.pttl(`${prefix}{u1}:ledger`)) > MAX_TTL_MS - 60_000, 'the ledger lives as long as the longest answer');
  },
);

t.test('redis cache with Redis refusing connections: no answers, no generation, one warning, no throws', async (t) => {
  const client = new Redis('redis://127.0.0.1:6390', {
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  t.teardown(() => client.disconnect());
  client.on('error', () => {});
  await client.connect().catch(() => undefined);
  const { log, lines } = recordingLogger();
  const cache = redisCache(client, 'test:', log, roomy);
  t.teardown(() => cache.stop());
  t.same(await cache.read(1, 'k'), { answer: undefined, generation: null }, 'an unknown generation tells the caller not to cache');
  await cache.write(1, 'k', 0, answer('[]'), 1000);
  t.same(await cache.read(1, 'k'), { answer: undefined, generation: null });
  t.same(
    lines.map(([level, , message]) => [level, message]),
    [['warn', 'redis cache unavailable; answering from the database']],
    'one warning for the outage',
  );
});

t.test('redis cache on a live Redis: one round trip per read, shared by every instance', onlyWithRedis, async (t) => {
  const client = new Redis(REDIS_URL);
  t.teardown(() => client.quit());
  const prefix = privatePrefix(t, client, 'cache-unit');
  const { log, lines } = recordingLogger();
  const a = redisCache(client, prefix, log, roomy);
  const b = redisCache(client, prefix, log, roomy);
  t.teardown(() => (a.stop(), b.stop()));

  const first = (await a.read(7, 'k')).generation!;
  t.ok(first >= Date.now() * 1000 - 60_000_000, `a new user's first generation comes from the clock (${first}), above any earlier one`);
  t.same(await a.read(7, 'k'), { answer: undefined, generation: first }, 'and stays');
  await a.write(7, 'k', first, answer('[{"id":1}]'), 5_000);
  const answers = await client.keys(`${prefix}{u7}:a:*`);
  t.same(answers, [`${prefix}{u7}:a:${first}:k`], 'keys of a user share the hash tag {u7}');
  const ttl = await client.pttl(answers[0]!);
  t.ok(ttl > 0 && ttl <= 5_000, `expires within the TTL (${ttl} ms)`);
  t.same(await b.read(7, 'k'), { answer: answer('[{"id":1}]'), generation: first }, 'another instance reads it');

  await b.invalidate(7);
  t.equal(await client.ttl(`${prefix}{u7}:g`), -1, 'generations never expire, so an old generation cannot come back');
  t.same(
    await a.read(7, 'k'),
    { answer: undefined, generation: first + 1 },
    "the instance holding the answer in memory sees the other's invalidation",
  );

  // Redis loses the generation (restarted empty): it starts again above the old one, so the answer A
  // still holds in memory for `first` can never match.
  await client.del(`${prefix}{u7}:g`);
  await b.invalidate(7);
  const restarted = (await a.read(7, 'k')).generation!;
  t.ok(restarted > first + 1, `a lost generation restarts above every earlier one (${restarted} > ${first + 1})`);

  const monitor = await client.monitor();
  t.teardown(() => monitor.disconnect());
  const commands: string[] = [];
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    // Commands the script runs inside Redis are listed too, from source "lua".
    if (source !== 'lua' && args.some((arg) => arg.startsWith(prefix))) commands.push(args[0]!.toLowerCase());
  });
  await a.write(7, 'k', restarted, answer('[]'), 5_000);
  await a.read(7, 'k');
  await b.read(7, 'k');
  await new Promise((resolve) => setTimeout(resolve, 100));
  t.same(commands, ['evalsha', 'evalsha', 'evalsha'], 'a write and each read are one script call');
  t.same(lines, []);
});

t.test(
  'redis cache: a generation another node wrote is not trusted, so a failover cannot bring old answers back',
  onlyWithRedis,
  async (t) => {
    const client = new Redis(REDIS_URL);
    t.teardown(() => client.quit());
    const prefix = privatePrefix(t, client, 'cache-writer');
    let clock = Date.now();
    const cache = redisCache(client, prefix, recordingLogger().log, roomy, () => clock);
    t.teardown(() => cache.stop());
    const before = (await cache.read(3, 'k')).generation!;
    t.equal(before, clock * 1000, "a new user's generation comes from the clock");
    t.equal(await client.get(`${prefix}{u3}:g-node`), '', 'and is marked as written by this node (no cluster: no id)');
    await cache.write(3, 'k', before, answer('"before the write"'), 60_000);
    t.same(await cache.read(3, 'k'), { answer: answer('"before the write"'), generation: before });

    // As a promoted replica finds it: the generation and its answers replicated, the last invalidation not.
    await client.set(`${prefix}{u3}:g-node`, '0efb1130f2dddc1ba49b8366419c85fe5cccd09e');
    clock += 1_000;
    t.same(
      await cache.read(3, 'k'),
      { answer: undefined, generation: clock * 1000 },
      'the answer of the old generation is not served: a new generation starts from the clock',
    );
    t.equal(await client.get(`${prefix}{u3}:g-node`), '', 'now marked as written here');
    await cache.invalidate(3);
    t.equal((await cache.read(3, 'k')).generation, clock * 1000 + 1, 'and invalidations go on from it');

    await client.set(`${prefix}{u3}:g-node`, 'another node');
    clock += 1_000;
    await cache.invalidate(3);
    t.equal(
      (await cache.read(3, 'k')).generation,
      clock * 1000 + 1,
      'an invalidation of a taken-over generation starts from the clock too',
    );
  },
);

t.test(
  'redis cache: a failed invalidation bypasses that user for the longest TTL, so an old generation is never served',
  onlyWithRedis,
  async (t) => {
    // Configured like plugins/redis.ts: no offline queue, so a command on a dropped connection fails at once.
    const client = new Redis(REDIS_URL, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0 });
    await client.connect();
    t.teardown(() => client.quit());
    const prefix = privatePrefix(t, client, 'cache-bump');
    let clock = Date.now();
    const { log, lines } = recordingLogger();
    const cache = redisCache(client, prefix, log, roomy, () => clock);
    t.teardown(() => cache.stop());
    const before = (await cache.read(1, 'k')).generation!;
    await cache.write(1, 'k', before, answer('"before the write"'), MAX_TTL_MS);

    // The connection drops exactly while the write invalidates, then comes back.
    client.disconnect();
    await once(client, 'end');
    await cache.invalidate(1);
    await client.connect();
    t.same(
      lines.map(([level, , message]) => [level, message]),
      [['warn', 'redis cache unavailable; answering from the database']],
    );
    t.equal(await client.get(`${prefix}{u1}:g`), String(before), 'the generation really did not move');

    t.same(await cache.read(1, 'k'), { answer: undefined, generation: null }, 'so the user bypasses the cache');
    t.not((await cache.read(2, 'k')).generation, null, 'other users are unaffected');
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    t.same(
      lines.at(-1)?.slice(0, 2),
      ['info', 'redis cache available again'],
      'and Redis answering again is said once, a settled second later',
    );
    clock += MAX_TTL_MS - 1;
    t.equal((await cache.read(1, 'k')).generation, null, 'until every answer from before the failed invalidation has expired');
    clock += 1;
    t.equal((await cache.read(1, 'k')).generation, before, 'then Redis decides again');
  },
);

t.test('redis cache: answers never outlive the bypass of a failed invalidation', onlyWithRedis, async (t) => {
  const client = new Redis(REDIS_URL);
  t.teardown(() => client.quit());
  const prefix = privatePrefix(t, client, 'cache-ttl');
  const cache = redisCache(client, prefix, recordingLogger().log, roomy);
  t.teardown(() => cache.stop());
  await cache.write(1, 'k', 0, answer('1'), 2 * MAX_TTL_MS);
  const [key] = await client.keys(`${prefix}{u1}:a:*`);
  const ttl = await client.pttl(key!);
  t.ok(ttl > MAX_TTL_MS - 60_000 && ttl <= MAX_TTL_MS, `capped at MAX_TTL_MS (${ttl} ms)`);
});
