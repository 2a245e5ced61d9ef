import type { FastifyBaseLogger } from 'fastify';
import { Redis } from 'ioredis';
import t from 'tap';
import { memoryPositions, POSITION_TTL_MS, redisPositions, sortableLsn } from '../../plugins/read-replicas.js';
import { backend, REDIS_URL } from '../helper.js';

const onlyWithRedis = { skip: backend !== 'postgres' && 'needs the real Redis of the postgres backend' };
const quiet = { warn: () => {}, info: () => {}, debug: () => {} } as unknown as FastifyBaseLogger;

t.test('WAL positions compare as strings in the order PostgreSQL gives them', async (t) => {
  const ordered = ['0/0', '0/9', '0/A', '0/16B3748', '0/FFFFFFFF', '1/0', 'F/1', '10/0', 'FFFFFFFF/FFFFFFFF'];
  const sortable = ordered.map(sortableLsn);
  t.strictSame([...sortable].sort(), sortable);
  t.equal(sortableLsn('16/b374d848'), '00000016B374D848');
});

t.test('memory positions: the later of two is kept, until POSITION_TTL_MS after the last write', async (t) => {
  let clock = 1_000_000;
  const positions = memoryPositions(() => clock);
  t.equal(await positions.get(1), undefined, 'no write: no position');
  await positions.raise(1, sortableLsn('0/20'));
  await positions.raise(1, sortableLsn('0/10'));
  t.equal(await positions.get(1), sortableLsn('0/20'), 'an earlier position, stored later, lowers nothing');
  t.equal(await positions.get(2), undefined, 'users are independent');
  clock += POSITION_TTL_MS - 1;
  t.equal(await positions.get(1), sortableLsn('0/20'));
  clock += 1;
  t.equal(await positions.get(1), undefined, 'forgotten');
});

t.test(
  'redis positions: the later of two is kept under the user hash tag; a failure reads every user on the primary',
  onlyWithRedis,
  async (t) => {
    const client = new Redis(REDIS_URL);
    t.teardown(() => client.quit());
    const prefix = `test:replicas:${Date.now()}:`;
    t.teardown(async () => {
      const keys = await client.keys(`${prefix}*`);
      if (keys.length > 0) await client.del(...keys);
    });
    const clock = Date.now();
    const positions = redisPositions(client, prefix, quiet, () => clock);
    await positions.raise(7, sortableLsn('0/20'));
    await positions.raise(7, sortableLsn('0/10'));
    t.equal(await client.get(`${prefix}{u7}:wal`), sortableLsn('0/20'), 'an earlier position, stored later, lowers nothing');
    t.ok((await client.pttl(`${prefix}{u7}:wal`)) > POSITION_TTL_MS - 5_000, 'kept POSITION_TTL_MS');
    t.equal(await positions.get(7), sortableLsn('0/20'));
    t.equal(await positions.get(8), undefined);

    const down = new Redis('redis://127.0.0.1:1', { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0 });
    down.on('error', () => {});
    t.teardown(() => down.disconnect());
    const failing = redisPositions(down, prefix, quiet, () => clock);
    await failing.raise(7, sortableLsn('0/30'));
    t.equal(await failing.get(7), null, 'after a failure: unknown, so the primary answers');
    t.equal(await failing.get(9), null, 'for every user');
  },
);
