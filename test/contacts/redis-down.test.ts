/**
 * Redis failing under the service: unreachable from the start, hung (SIGSTOP) and stopped mid-test.
 * Requests are served from the database throughout. Uses its own redis-server, never the shared one.
 */
import { once } from 'node:events';
import type { FastifyInstance } from 'fastify';
import t, { type Test } from 'tap';
import { backend } from '../helper.js';
import { privateRedis } from '../faults/processes.js';
import { as, buildContactsApp, type Caller, contactBody, createUser } from './fixtures.js';

const onlyOnPostgres = { skip: backend !== 'postgres' && 'the embedded backend has no Redis' };

/** Every contacts operation succeeds; reads answer MISS while Redis is unusable. */
async function exerciseAll(t: Test, call: Caller) {
  const created = await call('POST', '/api/contacts/', contactBody());
  t.equal(created.statusCode, 201);
  const { id } = created.json();
  for (const url of [
    `/api/contacts/${id}`,
    '/api/contacts/',
    '/api/contacts/?query=jane',
    '/api/contacts/get-upcoming-birthday?time_range=366',
  ]) {
    for (let i = 0; i < 2; i++) {
      const res = await call('GET', url);
      t.equal(res.statusCode, 200, url);
      t.equal(res.headers['x-cache'], 'MISS', url);
    }
  }
  t.equal((await call('PUT', `/api/contacts/${id}`, contactBody())).statusCode, 200);
  const patched = await call('PATCH', `/api/contacts/${id}`, { first_name: 'Offline' });
  t.equal(patched.statusCode, 200);
  t.equal((await call('GET', `/api/contacts/${id}`)).json().first_name, 'Offline');
  t.equal((await call('DELETE', `/api/contacts/${id}`)).statusCode, 200);
  t.equal((await call('GET', `/api/contacts/${id}`)).statusCode, 404);
}

t.test('Redis unreachable from the start: the app starts and every operation works', onlyOnPostgres, async (t) => {
  const app = await buildContactsApp(t, { env: { REDIS_URL: 'redis://127.0.0.1:6390' } });
  t.not(app.redisClient, null);
  t.not(app.redisClient!.status, 'ready');
  await exerciseAll(t, as(app, await createUser(app)));
});

t.test('Redis Cluster unreachable from the start: the app starts and every operation works', onlyOnPostgres, async (t) => {
  const started = Date.now();
  const app = await buildContactsApp(t, { env: { REDIS_URL: '', REDIS_CLUSTER_URLS: 'redis://127.0.0.1:6390, redis://127.0.0.1:6391' } });
  t.ok(Date.now() - started < 10_000, `start-up does not wait for the cluster (${Date.now() - started} ms)`);
  t.not(app.redisClient, null);
  t.not(app.redisClient!.status, 'ready');
  const ready = await app.inject({ method: 'GET', url: '/readyz' });
  t.same(ready.json(), { status: 'ok', checks: { database: 'ok', cache: 'unavailable' } });
  await exerciseAll(t, as(app, await createUser(app)));
});

t.test('connection lost only during a write: the writer still reads its write once Redis is back', onlyOnPostgres, async (t) => {
  const app = await buildContactsApp(t);
  const call = as(app, await createUser(app));
  const { id } = (await call('POST', '/api/contacts/', contactBody({ first_name: 'Before' }))).json();
  t.equal((await call('GET', `/api/contacts/${id}`)).headers['x-cache'], 'MISS');
  t.equal((await call('GET', `/api/contacts/${id}`)).headers['x-cache'], 'HIT');

  // The write commits, but the generation bump cannot reach Redis.
  app.redisClient!.disconnect();
  await once(app.redisClient!, 'end');
  t.equal((await call('PATCH', `/api/contacts/${id}`, { first_name: 'After' })).statusCode, 200);
  await app.redisClient!.connect();

  const read = await call('GET', `/api/contacts/${id}`);
  t.equal(read.statusCode, 200);
  t.equal(read.headers['x-cache'], 'MISS');
  t.equal(read.json().first_name, 'After', 'not the entry cached before the write');
});

t.test('Redis hung, then stopped, mid-test: requests keep succeeding and reads stay fresh', onlyOnPostgres, async (t) => {
  const redis = await privateRedis(t);
  const app: FastifyInstance = await buildContactsApp(t, { env: { REDIS_URL: redis.url, REDIS_COMMAND_TIMEOUT_MS: '250' } });
  const call = as(app, await createUser(app));
  const { id } = (await call('POST', '/api/contacts/', contactBody({ first_name: 'Before' }))).json();
  t.equal((await call('GET', `/api/contacts/${id}`)).headers['x-cache'], 'MISS');
  t.equal((await call('GET', `/api/contacts/${id}`)).headers['x-cache'], 'HIT', 'Redis works at first');

  // Hung: the connection stays open but nothing answers; commands time out.
  await redis.signal('SIGSTOP');
  const slow = await call('GET', `/api/contacts/${id}`);
  t.equal(slow.statusCode, 200);
  t.equal(slow.headers['x-cache'], 'MISS');
  t.equal((await call('PATCH', `/api/contacts/${id}`, { first_name: 'During' })).statusCode, 200);
  t.equal((await call('GET', `/api/contacts/${id}`)).json().first_name, 'During');
  await redis.signal('SIGCONT');
  t.equal((await call('GET', `/api/contacts/${id}`)).json().first_name, 'During', 'no stale entry once Redis answers again');

  // Stopped.
  await redis.signal('SIGTERM');
  await exerciseAll(t, call);
  const still = await call('GET', `/api/contacts/${id}`);
  t.equal(still.statusCode, 200);
  t.equal(still.json().first_name, 'During');
});
