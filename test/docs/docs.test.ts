import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { FastifyInstance } from 'fastify';
import t, { type Test } from 'tap';
import { parse } from 'yaml';
import { build } from '../helper.js';

const specText = readFileSync(new URL('../../openapi.yaml', import.meta.url), 'utf8');
const redocBundle = readFileSync(createRequire(import.meta.url).resolve('redoc/bundles/redoc.standalone.js'));

/** The URLs an HTML page loads: script src and link href. */
function assetUrls(html: string): string[] {
  return [...html.matchAll(/<(?:script|link)\b[^>]*\b(?:src|href)="([^"]+)"/g)].map((m) => m[1] ?? '');
}

/** Fetches every asset of a page, resolved against the page's URL, and checks each is served. */
async function checkAssets(t: Test, app: FastifyInstance, pageUrl: string, html: string) {
  const urls = assetUrls(html);
  t.ok(urls.length > 0, `${pageUrl} loads assets`);
  for (const url of urls) {
    const resolved = new URL(url, `http://service.test${pageUrl}`);
    t.equal(resolved.origin, 'http://service.test', `${url} is same-origin`);
    const res = await app.inject({ method: 'GET', url: resolved.pathname });
    t.equal(res.statusCode, 200, `${resolved.pathname} is served`);
    t.ok(res.rawPayload.length > 0, `${resolved.pathname} is not empty`);
  }
}

t.test('/docs serves Swagger UI and every asset it loads', async (t) => {
  const app = await build(t);
  for (const url of ['/docs', '/docs/']) {
    const res = await app.inject({ method: 'GET', url });
    t.equal(res.statusCode, 200);
    t.equal(res.headers['content-type'], 'text/html; charset=utf-8');
    t.match(res.body, '<div id="swagger-ui"></div>');
    t.notMatch(res.body, /https?:\/\//, 'no absolute URLs: nothing loads from another host');
    t.match(res.headers['content-security-policy'], /default-src 'self'/);
    await checkAssets(t, app, url, res.body);
  }
  const initializer = await app.inject({ method: 'GET', url: '/docs/static/swagger-initializer.js' });
  t.equal(initializer.statusCode, 200);
  t.match(initializer.body, 'validatorUrl: null', 'no online validator badge');
  t.match(initializer.body, '"persistAuthorization":true', 'outside production the token survives a reload');
});

t.test('in production Swagger UI keeps the bearer token in the page only, never in localStorage', async (t) => {
  const app = await build(t, { env: { NODE_ENV: 'production' } });
  const initializer = await app.inject({ method: 'GET', url: '/docs/static/swagger-initializer.js' });
  t.equal(initializer.statusCode, 200);
  t.match(initializer.body, '"persistAuthorization":false');
});

t.test('Swagger UI reads the contract with "Try it out" aimed at this server', async (t) => {
  const app = await build(t);
  const res = await app.inject({ method: 'GET', url: '/docs/json' });
  t.equal(res.statusCode, 200);
  const { servers, ...rest } = res.json();
  t.same(servers, [{ url: '/', description: 'This server' }]);
  const { servers: _, ...specRest } = parse(specText);
  t.same(rest, specRest);
});

t.test('/redoc serves ReDoc from the installed package, loading only same-origin assets', async (t) => {
  const app = await build(t);
  const res = await app.inject({ method: 'GET', url: '/redoc' });
  t.equal(res.statusCode, 200);
  t.equal(res.headers['content-type'], 'text/html; charset=utf-8');
  t.match(res.body, '<redoc spec-url="/openapi.json"></redoc>');
  t.notMatch(res.body, /https?:\/\//, 'no absolute URLs: nothing loads from another host');
  t.match(res.headers['content-security-policy'], /default-src 'self'/);
  t.same(assetUrls(res.body), ['/redoc/redoc.standalone.js']);
  await checkAssets(t, app, '/redoc', res.body);

  const bundle = await app.inject({ method: 'GET', url: '/redoc/redoc.standalone.js' });
  t.equal(bundle.headers['content-type'], 'application/javascript; charset=utf-8');
  t.ok(bundle.rawPayload.equals(redocBundle), 'the bundle of node_modules/redoc');
});

t.test('/openapi.json is openapi.yaml as JSON', async (t) => {
  const app = await build(t);
  const res = await app.inject({ method: 'GET', url: '/openapi.json' });
  t.equal(res.statusCode, 200);
  t.equal(res.headers['content-type'], 'application/json; charset=utf-8');
  t.same(res.json(), parse(specText));
  t.equal(res.json().openapi, '3.1.0');
});

t.test('/openapi.yaml is the file itself', async (t) => {
  const app = await build(t);
  const res = await app.inject({ method: 'GET', url: '/openapi.yaml' });
  t.equal(res.statusCode, 200);
  t.equal(res.headers['content-type'], 'application/yaml');
  t.equal(res.body, specText);
});

t.test('docs and the contract need no token and are never rate limited', async (t) => {
  const app = await build(t, { env: { RATE_LIMIT_ANON_PER_MIN: '1' } });
  const urls = [
    '/docs',
    '/docs/static/swagger-ui-bundle.js',
    '/docs/json',
    '/redoc',
    '/redoc/redoc.standalone.js',
    '/openapi.json',
    '/openapi.yaml',
  ];
  for (let round = 0; round < 3; round++) {
    for (const url of urls) {
      const res = await app.inject({ method: 'GET', url });
      t.equal(res.statusCode, 200, `${url} round ${round + 1}`);
      t.equal(res.headers['x-ratelimit-limit'], undefined, `${url} carries no rate-limit headers`);
    }
  }
  // The same client is limited on the API, so the limit was in force.
  const api = () => app.inject({ method: 'POST', url: '/api/auth/forgot-password', payload: { email: 'nobody@example.com' } });
  t.equal((await api()).statusCode, 202);
  t.equal((await api()).statusCode, 429);
});
