/**
 * The app and openapi.yaml describe the same interface: every route the app registers is an
 * operation of the spec (apart from the documentation pages), every operation is registered, and
 * every operation is documented the way the contract requires. That every response matches the
 * spec is checked for all tests by test/helper.ts.
 */
import diagnostics from 'node:diagnostics_channel';
import type { FastifyInstance, RouteOptions } from 'fastify';
import t from 'tap';
import { build } from './helper.js';
import { loadSpec, specOperations } from './spec-validator.js';

const spec = loadSpec();
const operations = specOperations(spec);

/** Documentation pages and their assets: served by the docs plugin, not operations of the contract. */
const isDocsRoute = (url: string) => /^\/(docs|redoc)(\/|$)/.test(url);
/** The WebDAV face, which openapi.yaml describes in prose (docs/carddav.md): WebDAV methods cannot be operations. */
const isWebDavRoute = (url: string) => url === '/dav' || url.startsWith('/dav/') || url === '/.well-known/carddav';

interface RegisteredRoute {
  method: string;
  url: string;
  operationId: string | undefined;
}

/** Builds the app while recording every route it registers, through Fastify's initialization channel. */
async function buildRecordingRoutes(t: Parameters<typeof build>[0]): Promise<{ app: FastifyInstance; routes: RegisteredRoute[] }> {
  const routes: RegisteredRoute[] = [];
  const onInit = (message: unknown) => {
    const { fastify } = message as { fastify: FastifyInstance };
    fastify.addHook('onRoute', (route: RouteOptions) => {
      for (const method of ([] as string[]).concat(route.method)) {
        routes.push({ method, url: route.url, operationId: route.config?.operationId });
      }
    });
  };
  diagnostics.subscribe('fastify.initialization', onInit);
  try {
    return { app: await build(t), routes };
  } finally {
    diagnostics.unsubscribe('fastify.initialization', onInit);
  }
}

/** `/api/contacts/:contact_id` → `/api/contacts/{contact_id}`. */
const toTemplate = (url: string) => url.replace(/:([A-Za-z0-9_]+)/g, '{$1}');

t.test('every route the app registers is an operation of openapi.yaml', async (t) => {
  const { routes } = await buildRecordingRoutes(t);
  // HEAD (Fastify's automatic twin of each GET) and OPTIONS (CORS preflight) are not operations.
  const own = routes.filter((r) => r.method !== 'HEAD' && r.method !== 'OPTIONS');
  const docs = own.filter((r) => isDocsRoute(r.url));
  t.ok(
    docs.some((r) => r.url === '/docs'),
    'Swagger UI is registered',
  );
  t.ok(
    docs.some((r) => r.url === '/redoc'),
    'ReDoc is registered',
  );
  t.same(
    docs.filter((r) => r.method !== 'GET'),
    [],
    'documentation routes are read-only',
  );

  const webDav = own.filter((r) => isWebDavRoute(r.url));
  t.ok(
    webDav.some((r) => r.method === 'PROPFIND' && r.url === '/dav/*'),
    'the WebDAV face is registered',
  );
  t.same(
    webDav.filter((r) => r.operationId !== undefined),
    [],
    'WebDAV routes are no operations',
  );
  const apiRoutes = own.filter((r) => !isDocsRoute(r.url) && !isWebDavRoute(r.url));
  for (const route of apiRoutes) {
    const op = operations.find((o) => o.method === route.method && o.path === toTemplate(route.url));
    t.ok(op, `${route.method} ${route.url} is an operation of openapi.yaml`);
    t.equal(route.operationId, op?.operationId, `${route.method} ${route.url} is registered as its operationId`);
  }
  t.equal(apiRoutes.length, operations.length, 'one route per operation, no more');
});

t.test('every operation of openapi.yaml is registered with its method and URL', async (t) => {
  const { routes } = await buildRecordingRoutes(t);
  for (const op of operations) {
    const registered = routes.filter((r) => r.method === op.method && toTemplate(r.url) === op.path);
    t.same(
      registered.map((r) => r.operationId),
      [op.operationId],
      `${op.method} ${op.path} is registered once, as ${op.operationId}`,
    );
  }
});

t.test('every operation has a unique operationId, a known tag and a summary', async (t) => {
  const tags = new Set((spec.tags as { name: string }[]).map((tag) => tag.name));
  t.equal(new Set(operations.map((o) => o.operationId)).size, operations.length, 'operationIds are unique');
  for (const { operationId, method, path, operation } of operations) {
    const where = `${method} ${path}`;
    t.match(operationId, /^[a-z][A-Za-z]+$/, `${where} has an operationId`);
    const opTags = operation.tags as string[] | undefined;
    t.ok(opTags && opTags.length > 0 && opTags.every((tag) => tags.has(tag)), `${where} has a declared tag`);
    t.ok(typeof operation.summary === 'string' && operation.summary.length > 0, `${where} has a summary`);
  }
});

t.test('every documented error answer uses the shared Error schema', async (t) => {
  const resolve = (node: unknown): Record<string, unknown> => {
    const ref = (node as { $ref?: string }).$ref;
    if (!ref) return node as Record<string, unknown>;
    return resolve(
      ref
        .slice(2)
        .split('/')
        .reduce<unknown>((at, part) => (at as Record<string, unknown>)[part], spec),
    );
  };
  let errorAnswers = 0;
  for (const { method, path, operation } of operations) {
    for (const [status, response] of Object.entries(operation.responses as Record<string, unknown>)) {
      if (!/^[45]/.test(status)) continue;
      errorAnswers++;
      const content = resolve(response).content as Record<string, { schema?: { $ref?: string } }> | undefined;
      t.same(
        { types: Object.keys(content ?? {}), schema: content?.['application/json']?.schema },
        { types: ['application/json'], schema: { $ref: '#/components/schemas/Error' } },
        `${method} ${path} ${status} is an Error body`,
      );
    }
  }
  t.ok(errorAnswers > operations.length, 'error answers are documented');
  t.same(
    resolve({ $ref: '#/components/schemas/Error' }),
    {
      type: 'object',
      description: 'The body of every error response.',
      required: ['detail'],
      additionalProperties: false,
      properties: { detail: { type: 'string', description: 'What went wrong, for people.' } },
    },
    'Error is exactly {detail: string}',
  );
});

t.test("the filter table in the list's documentation states each field's x-filter operators", async (t) => {
  const { parameters } = (spec.paths as Record<string, Record<string, { parameters: { $ref?: string }[] }>>)['/api/contacts/']!.get!;
  t.ok(
    parameters.some((parameter) => parameter.$ref === '#/components/parameters/query'),
    'the list takes the shared query parameter',
  );
  const description = (spec.components as { parameters: Record<string, { description: string }> }).parameters.query!.description;
  const documented: Record<string, string[]> = {};
  for (const [, fields, operators] of description.matchAll(/^\| (`[^|]+`) \| (`[^|]+`) \|$/gm)) {
    for (const field of fields!.match(/[a-z_]+/g)!) documented[field] = operators!.match(/[a-z_]+/g)!;
  }
  const properties = (spec.components as { schemas: Record<string, { properties: Record<string, { 'x-filter'?: string[] }> }> }).schemas
    .Contact!.properties;
  const declared = Object.fromEntries(
    Object.entries(properties).flatMap(([field, property]) => (property['x-filter'] ? [[field, property['x-filter']]] : [])),
  );
  t.same(documented, declared);
});
