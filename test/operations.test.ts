import t from 'tap';
import { backend, build } from './helper.js';

t.test('GET /healthz answers 200 {"status":"ok"} with no token', async (t) => {
  const app = await build(t);
  const res = await app.inject({ method: 'GET', url: '/healthz' });
  t.equal(res.statusCode, 200);
  t.match(res.headers['content-type'], /^application\/json; charset=utf-8$/);
  t.equal(res.body, '{"status":"ok"}');
  t.notOk(res.headers['x-ratelimit-limit'], 'not rate limited');
});

t.test('GET /readyz answers 200 when the database and the cache answer', async (t) => {
  const app = await build(t);
  const res = await app.inject({ method: 'GET', url: '/readyz' });
  t.equal(res.statusCode, 200);
  t.match(res.headers['content-type'], /^application\/json; charset=utf-8$/);
  t.equal(res.body, '{"status":"ok"}');
  t.notOk(res.headers['x-ratelimit-limit'], 'not rate limited');
});

t.test('health probes are never rate limited', async (t) => {
  const app = await build(t, { env: { RATE_LIMIT_ANON_PER_MIN: '1' } });
  for (let i = 0; i < 3; i++) {
    t.equal((await app.inject({ method: 'GET', url: '/healthz' })).statusCode, 200);
    t.equal((await app.inject({ method: 'GET', url: '/readyz' })).statusCode, 200);
  }
});

t.test('GET /readyz answers 503 "Database unavailable" once the database is gone', async (t) => {
  const app = await build(t);
  await app.db.destroy();
  const res = await app.inject({ method: 'GET', url: '/readyz' });
  t.equal(res.statusCode, 503);
  t.match(res.headers['content-type'], /^application\/json; charset=utf-8$/);
  t.same(res.json(), { detail: 'Database unavailable' });
  // Liveness does not depend on the database.
  t.equal((await app.inject({ method: 'GET', url: '/healthz' })).statusCode, 200);
});

t.test('GET /readyz answers 503 "Cache unavailable" when Redis does not answer', { skip: backend === 'embedded' && 'the embedded backend has no Redis' }, async (t) => {
  // Port 1 refuses connections: the app starts without Redis and keeps retrying it.
  const app = await build(t, { env: { REDIS_URL: 'redis://127.0.0.1:1' } });
  const res = await app.inject({ method: 'GET', url: '/readyz' });
  t.equal(res.statusCode, 503);
  t.same(res.json(), { detail: 'Cache unavailable' });
});
