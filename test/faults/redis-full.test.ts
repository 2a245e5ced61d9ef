/**
 * Redis full (issue 21): a private redis-server with a tiny maxmemory and no eviction, filled until
 * it refuses writes with OOM errors. The rate limits still hold, counted in each process while
 * Redis refuses; cached reads are answered from the database; nothing is a 5xx.
 */
import { Redis } from 'ioredis';
import t from 'tap';
import { as, createUser } from '../contacts/fixtures.js';
import { backend, build } from '../helper.js';
import { privateRedis } from './processes.js';

const LIMIT = 3;

t.test(
  'with Redis answering OOM the limits count in the process',
  { skip: backend !== 'postgres' && 'runs on the postgres backend, beside the other fault tests' },
  async (t) => {
    const redis = await privateRedis(t);
    const admin = new Redis(redis.url);
    t.teardown(() => admin.quit());
    await admin.config('SET', 'maxmemory-policy', 'noeviction');
    await admin.config('SET', 'maxmemory', '2mb');
    const filler = 'x'.repeat(64 * 1024);
    let refusal: unknown = null;
    for (let i = 0; i < 1000 && !refusal; i++)
      refusal = await admin.set(`filler:${i}`, filler).then(
        () => null,
        (error: unknown) => error,
      );
    t.match(String(refusal), /OOM/, 'Redis is full: it refuses writes with OOM');
    // Well past full, so that no write the service makes slips in under the limit.
    await admin.config('SET', 'maxmemory', '1mb');

    const app = await build(t, {
      env: { REDIS_URL: redis.url, RATE_LIMIT_ANON_PER_MIN: String(LIMIT), RATE_LIMIT_ME_PER_MIN: String(LIMIT) },
    });
    const anonymous = [];
    for (let i = 0; i <= LIMIT; i++) anonymous.push(await app.inject({ method: 'GET', url: '/api/users/me' }));
    t.same(
      anonymous.map((res) => res.statusCode),
      [...Array(LIMIT).fill(401), 429],
      `anonymous: ${LIMIT} answered, then 429`,
    );
    t.same(
      anonymous.map((res) => res.headers['x-ratelimit-remaining']),
      ['2', '1', '0', '0'],
      'with the counting headers',
    );
    t.same(anonymous[LIMIT]!.json(), { detail: 'Rate limit exceeded, retry in 60 seconds' });
    t.equal(anonymous[LIMIT]!.headers['retry-after'], '60');

    const user = await createUser(app);
    const call = as(app, user);
    const mine = [];
    for (let i = 0; i <= LIMIT; i++) mine.push((await call('GET', '/api/users/me')).statusCode);
    t.same(mine, [...Array(LIMIT).fill(200), 429], `GET /api/users/me: ${LIMIT} a minute per user, then 429`);

    const reads = [];
    for (let i = 0; i < 2; i++) reads.push(await call('GET', '/api/contacts/'));
    t.same(
      reads.map((res) => [res.statusCode, res.headers['x-cache']]),
      [
        [200, 'MISS'],
        [200, 'MISS'],
      ],
      'reads come from the database',
    );
    const created = await call('POST', '/api/contacts/', {
      first_name: 'A',
      last_name: 'B',
      email: 'a@example.com',
      phone: '+14155550100',
      birthday: '1990-01-01',
    });
    t.equal(created.statusCode, 201, 'writes work');
    t.equal((await call('GET', '/api/contacts/')).json().length, 1, 'and are read at once');
    t.match(await admin.info('memory'), /used_memory:\d+/, 'Redis still answers');
  },
);
