/**
 * GET /metrics after known traffic: exact deltas of the request histogram, the cache, rate-limit,
 * import and export counters; no label value that a client chose (an e-mail, a token, an id) but a
 * route template and a status; `promtool check metrics` on a real scrape; and who may read it.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import t from 'tap';
import { loggedInUser } from '../auth/accounts.js';
import { as, contactBody, createContacts, createUser } from '../contacts/fixtures.js';
import { build } from '../helper.js';
import { loadSpec, specOperations } from '../spec-validator.js';
import { parseExposition, type Sample, sampleValue } from './exposition.js';

const promtoolMissing = spawnSync('promtool', ['--version']).error !== undefined;
/** CI installs Prometheus (.ci/run), so there a missing promtool fails instead of skipping. */
const promtoolSkip = promtoolMissing && !process.env.CI && 'promtool is not installed (apt-get install prometheus)';

async function scrape(app: FastifyInstance, headers: Record<string, string> = {}): Promise<Sample[]> {
  const res = await app.inject({ method: 'GET', url: '/metrics', headers });
  if (res.statusCode !== 200) throw new Error(`/metrics: ${res.statusCode} ${res.body}`);
  return parseExposition(res.body);
}

/** The labels of one series of the request histogram. */
const series = (route: string, status: number, method = 'GET') => ({
  http_request_method: method,
  http_route: route,
  http_response_status_code: String(status),
});
const requests = (samples: Sample[], route: string, status: number, method = 'GET') =>
  sampleValue(samples, 'http_server_request_duration_seconds_count', series(route, status, method));

t.test('metrics count known traffic exactly', async (t) => {
  const app = await build(t, { env: { RATE_LIMIT_ANON_PER_MIN: '20' } });
  const user = await createUser(app);
  const call = as(app, user);
  const [contact] = await createContacts(call, [contactBody()]);
  const byId = '/api/contacts/{contact_id}';

  t.test('N reads of one contact: N answers of its route and status 200, N−1 cache hits and one miss', async (t) => {
    const before = await scrape(app);
    const reads = 5;
    for (let i = 0; i < reads; i++) t.equal((await call('GET', `/api/contacts/${contact!.id}`)).statusCode, 200);
    const after = await scrape(app);
    t.equal(requests(after, byId, 200) - requests(before, byId, 200), reads);
    const lookups = (samples: Sample[], result: string) => sampleValue(samples, 'contacts_cache_lookups_total', { result });
    t.equal(lookups(after, 'hit') - lookups(before, 'hit'), reads - 1, 'hits');
    t.equal(lookups(after, 'miss') - lookups(before, 'miss'), 1, 'one miss');
    const sum = (samples: Sample[]) => sampleValue(samples, 'http_server_request_duration_seconds_sum', series(byId, 200));
    t.ok(sum(after) > sum(before), 'their durations are summed');
  });

  t.test('a 404, a 422, an unknown route and a HEAD are counted under their own status and route', async (t) => {
    const before = await scrape(app);
    t.equal((await call('GET', '/api/contacts/2147483647')).statusCode, 404);
    t.equal((await call('GET', '/api/contacts/not-a-number')).statusCode, 422);
    t.equal((await call('GET', '/no/such/route')).statusCode, 404);
    t.equal((await app.inject({ method: 'HEAD', url: '/healthz' })).statusCode, 200);
    const after = await scrape(app);
    t.equal(requests(after, byId, 404) - requests(before, byId, 404), 1, '404 of the route');
    t.equal(requests(after, byId, 422) - requests(before, byId, 422), 1, '422 of the route');
    t.equal(requests(after, '', 404) - requests(before, '', 404), 1, 'no route matched: http_route ""');
    t.equal(requests(after, '/healthz', 200, 'HEAD') - requests(before, '/healthz', 200, 'HEAD'), 1, 'HEAD by its own method');
    t.equal(requests(after, '/metrics', 200) - requests(before, '/metrics', 200), 1, 'the scrape before counts itself');
  });

  t.test('21 anonymous requests from one address: exactly one more 429 of the anonymous limit', async (t) => {
    const before = await scrape(app);
    const remoteAddress = `203.0.113.${1 + (randomBytes(1)[0]! % 250)}`;
    const statuses = [];
    for (let i = 0; i < 21; i++) statuses.push((await app.inject({ method: 'GET', url: '/api/contacts/', remoteAddress })).statusCode);
    t.same(statuses, [...Array<number>(20).fill(401), 429]);
    const after = await scrape(app);
    const limited = (samples: Sample[], limit: string) => sampleValue(samples, 'contacts_rate_limited_total', { limit });
    t.equal(limited(after, 'anonymous') - limited(before, 'anonymous'), 1);
    t.equal(limited(after, 'me') - limited(before, 'me'), 0);
    t.equal(requests(after, '/api/contacts/', 429) - requests(before, '/api/contacts/', 429), 1);
  });

  t.test('six reads of /api/users/me by one user: one more 429 of the "me" limit', async (t) => {
    const before = await scrape(app);
    const me = as(app, await createUser(app));
    const statuses = [];
    for (let i = 0; i < 6; i++) statuses.push((await me('GET', '/api/users/me')).statusCode);
    t.same(statuses, [200, 200, 200, 200, 200, 429]);
    const after = await scrape(app);
    t.equal(
      sampleValue(after, 'contacts_rate_limited_total', { limit: 'me' }) -
        sampleValue(before, 'contacts_rate_limited_total', { limit: 'me' }),
      1,
    );
  });

  t.test('imports count their entries, exports their contacts', async (t) => {
    const importer = as(app, await createUser(app));
    const before = await scrape(app);
    const csv = [
      'first_name,last_name,email,phone,birthday',
      'Ada,Lovelace,ada@example.com,+14155550100,1990-01-01',
      'Bad,Mail,not-an-email,+14155550101,1990-01-01',
      'Alan,Turing,alan@example.com,+14155550102,1990-01-01',
    ].join('\r\n');
    const imported = await importer('POST', '/api/contacts/import', csv, { 'content-type': 'text/csv' });
    t.equal(imported.statusCode, 200);
    t.equal(imported.json<{ created: number }>().created, 2);
    t.equal((await importer('GET', '/api/contacts/export?format=csv')).statusCode, 200);
    t.equal((await importer('GET', '/api/contacts/export')).statusCode, 200);
    const after = await scrape(app);
    const delta = (name: string, labels: Record<string, string>) => sampleValue(after, name, labels) - sampleValue(before, name, labels);
    t.equal(delta('contacts_import_entries_total', { result: 'created' }), 2);
    t.equal(delta('contacts_import_entries_total', { result: 'rejected' }), 1);
    t.equal(delta('contacts_export_contacts_total', { format: 'csv' }), 2);
    t.equal(delta('contacts_export_contacts_total', { format: 'vcard' }), 2);
  });

  t.test('the pool, the password queue and the dependencies are read at the scrape', async (t) => {
    await loggedInUser(app);
    const samples = await scrape(app);
    t.equal(sampleValue(samples, 'contacts_dependency_up', { dependency: 'database' }), 1);
    const redis = samples.filter((s) => s.name === 'contacts_dependency_up' && s.labels.dependency === 'redis');
    t.same(
      redis.map((s) => s.value),
      app.redisClient ? [1] : [],
      'redis is reported when REDIS_URL is set',
    );
    t.equal(sampleValue(samples, 'contacts_db_pool_connections', { state: 'used' }), 0, 'no connection is lent between requests');
    t.ok(sampleValue(samples, 'contacts_db_pool_connections', { state: 'idle' }) >= 1, 'an idle connection is kept');
    t.equal(sampleValue(samples, 'contacts_db_pool_waiting', {}), 0);
    t.equal(sampleValue(samples, 'contacts_password_queue_depth', {}), 0);
    t.equal(sampleValue(samples, 'contacts_password_queue_limit', {}), app.config.passwordQueueLimit);
    t.ok(sampleValue(samples, 'contacts_password_hash_duration_seconds_count', {}) >= 2, 'the register hash and the login check are timed');
    t.ok(
      samples.some((s) => s.name === 'nodejs_eventloop_lag_seconds'),
      "Node's event-loop lag is there",
    );
    t.ok(
      samples.some((s) => s.name === 'process_resident_memory_bytes'),
      'and the process metrics',
    );
  });

  t.test('no label value holds a user id, an e-mail, a token or a path a client chose', async (t) => {
    const session = await loggedInUser(app);
    const secret = `s3cret${randomBytes(4).toString('hex')}`;
    const probes = [
      `/api/contacts/${session.email}`,
      `/api/contacts/${session.id}`,
      `/api/users/${session.accessToken}`,
      `/api/contacts/?query=email:eq:${session.email}`,
      `/${secret}`,
      `/api/auth/verify-email?token=${secret}`,
    ];
    for (const url of probes) await app.inject({ method: 'GET', url, headers: { authorization: `Bearer ${session.accessToken}` } });
    const payload = contactBody({ email: `${secret}@example.com` });
    await app.inject({ method: 'POST', url: '/api/contacts/', headers: { authorization: `Bearer ${session.accessToken}` }, payload });
    await app.inject({ method: 'PROPFIND' as 'GET', url: `/${secret}` });
    const res = await app.inject({ method: 'GET', url: '/metrics' });
    for (const value of [session.email, session.username, session.accessToken, secret])
      t.notMatch(res.body, value, 'nowhere in the scrape');

    const templates = new Set(specOperations(loadSpec()).map((op) => op.path));
    const routes = new Set(parseExposition(res.body).flatMap((s) => (s.labels.http_route === undefined ? [] : [s.labels.http_route])));
    const unknown = [...routes].filter((route) => route !== '' && !templates.has(route) && !/^\/(docs|redoc)(\/|$)/.test(route));
    t.same(unknown, [], `every http_route is a template of openapi.yaml, a docs path or "" (${[...routes].join(', ')})`);
    t.notOk(
      [...routes].some((route) => /\d/.test(route)),
      'no route label holds a number',
    );
    const methods = new Set(
      parseExposition(res.body).flatMap((s) => (s.labels.http_request_method === undefined ? [] : [s.labels.http_request_method])),
    );
    t.ok(methods.has('_OTHER') && !methods.has('PROPFIND'), 'a method outside RFC 9110 is counted as _OTHER');
  });

  t.test('promtool check metrics accepts a real scrape', { skip: promtoolSkip }, async (t) => {
    const res = await app.inject({ method: 'GET', url: '/metrics' });
    t.equal(res.headers['content-type'], 'text/plain; version=0.0.4; charset=utf-8');
    t.equal(res.headers['cache-control'], 'no-store');
    t.notOk(res.headers['x-ratelimit-limit'], 'never rate limited');
    const checked = spawnSync('promtool', ['check', 'metrics'], { input: res.body, encoding: 'utf8' });
    // Exit 1 is a format error; 3 is lint findings. prom-client's own process gauges are named
    // `nodejs_active_*_total`, which the linter flags; any other finding fails.
    const findings = `${checked.stdout}${checked.stderr}`.split('\n').filter(Boolean);
    const promClientGauge = /^nodejs_active_(handles|requests|resources)_total non-counter metrics should not have "_total" suffix$/;
    const foreign = findings.filter((line) => !promClientGauge.test(line));
    t.ok(checked.status === 0 || checked.status === 3, `promtool check metrics parses the scrape (exit ${checked.status})`);
    t.same(foreign, [], "no lint finding about the service's own metrics");
  });
});

t.test('METRICS_TOKEN: /metrics needs it as the bearer token', async (t) => {
  const token = randomBytes(24).toString('base64url');
  const app = await build(t, { env: { METRICS_TOKEN: token } });
  for (const authorization of [undefined, 'Bearer wrong-token-of-some-length', `Bearer ${token}x`, token]) {
    const res = await app.inject({ method: 'GET', url: '/metrics', headers: authorization ? { authorization } : {} });
    t.equal(res.statusCode, 401, `authorization ${authorization ?? 'absent'}`);
    t.same(res.json(), { detail: 'Not authenticated' });
    t.equal(res.headers['www-authenticate'], 'Bearer');
  }
  // The scheme is case-insensitive (RFC 9110 §11.1), as /api reads it.
  for (const authorization of [`Bearer ${token}`, `bearer ${token}`, `BEARER  ${token}`]) {
    const res = await app.inject({ method: 'GET', url: '/metrics', headers: { authorization } });
    t.equal(res.statusCode, 200, authorization);
    t.match(res.body, /^# HELP /m);
  }
});

t.test('without METRICS_TOKEN /metrics is 404 in production; METRICS_ENABLED=false makes it 404 and records nothing', async (t) => {
  const production = await build(t, { env: { NODE_ENV: 'production', JWT_SECRET: randomBytes(48).toString('base64url') } });
  const hidden = await production.inject({ method: 'GET', url: '/metrics' });
  t.equal(hidden.statusCode, 404);
  t.same(hidden.json(), { detail: 'Not Found' });

  const off = await build(t, { env: { METRICS_ENABLED: 'false' } });
  await off.inject({ method: 'GET', url: '/healthz' });
  t.equal((await off.inject({ method: 'GET', url: '/metrics' })).statusCode, 404);
  const recorded = await off.metrics.exposition();
  t.notMatch(recorded, /^http_server_request_duration_seconds_count/m, 'no request was recorded');
});
