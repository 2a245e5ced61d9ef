import { type AddressInfo, connect } from 'node:net';
import t from 'tap';
import { backend, build } from '../helper.js';

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
  t.equal(res.body, '{"status":"ok","checks":{"database":"ok","cache":"ok"}}');
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

const noRedis = backend === 'embedded' && 'the embedded backend has no Redis';

t.test('GET /readyz stays 200 and says "cache": "unavailable" when Redis does not answer', { skip: noRedis }, async (t) => {
  // Port 1 refuses connections: the app starts without Redis and keeps retrying it.
  const app = await build(t, { env: { REDIS_URL: 'redis://127.0.0.1:1' } });
  const res = await app.inject({ method: 'GET', url: '/readyz' });
  t.equal(res.statusCode, 200);
  t.same(res.json(), { status: 'ok', checks: { database: 'ok', cache: 'unavailable' } });
});

t.test("every answer carries X-Request-Id: the client's when it is well formed, else a new one", async (t) => {
  const app = await build(t);
  const generated = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
  const kept = ['a', 'req-1.2:3_x', 'A'.repeat(128)];
  for (const id of kept) {
    const res = await app.inject({ method: 'GET', url: '/healthz', headers: { 'x-request-id': id } });
    t.equal(res.headers['x-request-id'], id, `kept: ${id.slice(0, 20)}`);
  }
  for (const id of ['', 'has space', 'A'.repeat(129), 'semi;colon', 'ünï', 'a/b']) {
    const res = await app.inject({ method: 'GET', url: '/healthz', headers: { 'x-request-id': id } });
    t.match(res.headers['x-request-id'], generated, `replaced: ${JSON.stringify(id.slice(0, 20))}`);
  }
  const answers = {
    'no header': await app.inject({ method: 'GET', url: '/healthz' }),
    'unknown route': await app.inject({ method: 'GET', url: '/nowhere' }),
    '401': await app.inject({ method: 'GET', url: '/api/contacts/' }),
    'malformed URL (before routing)': await app.inject({ method: 'GET', url: '/api/%zz' }),
    'malformed JSON': await app.inject({
      method: 'POST',
      url: '/api/auth/register',
      headers: { 'content-type': 'application/json' },
      payload: '{',
    }),
    docs: await app.inject({ method: 'GET', url: '/docs' }),
  };
  for (const [name, res] of Object.entries(answers)) t.match(res.headers['x-request-id'], generated, `${name} (${res.statusCode})`);
  const ids = new Set(Object.values(answers).map((res) => res.headers['x-request-id']));
  t.equal(ids.size, Object.keys(answers).length, 'each request has its own');
});

t.test('a request the HTTP parser refuses is answered with an X-Request-Id too', async (t) => {
  const app = await build(t);
  await app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = app.server.address() as AddressInfo;
  const socket = connect(port, '127.0.0.1');
  socket.end('GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n');
  let answer = '';
  for await (const chunk of socket) answer += String(chunk);
  t.match(answer, /^HTTP\/1\.1 400 Bad Request\r\n/);
  t.match(answer, /\r\nX-Request-Id: [0-9a-f-]{36}\r\n/);
});
