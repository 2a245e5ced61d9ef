import { existsSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import swagger, { type StaticDocumentSpec } from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import fp from 'fastify-plugin';
import { parse } from 'yaml';

/** openapi.yaml as written, and parsed. */
export interface OpenApiSpec {
  yaml: string;
  document: Record<string, unknown>;
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The contract this service serves at /openapi.json and /openapi.yaml and documents at /docs and /redoc. */
    openapi: OpenApiSpec;
  }
}

const specFile = fileURLToPath(new URL('../openapi.yaml', import.meta.url));

// `npm run build` copies ReDoc's one-file bundle into dist/vendor, so production installs no redoc
// package (83 MB for this one file); run from source, it comes from the redoc devDependency.
const builtBundle = fileURLToPath(new URL('../vendor/redoc.standalone.js', import.meta.url));
const redocBundle = readFileSync(
  existsSync(builtBundle) ? builtBundle : createRequire(import.meta.url).resolve('redoc/bundles/redoc.standalone.js'),
);

// Everything comes from this service; inline styles are how both UIs lay themselves out.
const DOCS_CSP =
  "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; " +
  "connect-src 'self'; worker-src 'self' blob:; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'self'";

const REDOC_PAGE = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Contacts service API reference</title>
<style>body { margin: 0; }</style>
</head>
<body>
<redoc spec-url="/openapi.json"></redoc>
<script src="/redoc/redoc.standalone.js"></script>
</body>
</html>
`;

let contract: Promise<OpenApiSpec> | undefined;

/** openapi.yaml, read and parsed once per process however many apps it builds (the tests build hundreds); nothing changes it. */
function loadContract(): Promise<OpenApiSpec> {
  return (contract ??= readFile(specFile, 'utf8').then((yaml) => ({ yaml, document: parse(yaml) as Record<string, unknown> })));
}

/** Swagger UI at /docs and ReDoc at /redoc, both over openapi.yaml and served entirely by this service. */
export default fp(
  async (app) => {
    const spec = await loadContract();
    app.decorate('openapi', spec);

    // The parsed YAML is an OpenAPI document: npm run lint:openapi checks it.
    const document = spec.document as unknown as StaticDocumentSpec['document'];
    await app.register(swagger, { mode: 'static', specification: { document } });
    await app.register(swaggerUi, {
      routePrefix: '/docs',
      staticCSP: DOCS_CSP,
      validatorUrl: false,
      // In production a bearer token must not outlive the tab in localStorage, where any script of the origin reads it.
      uiConfig: { persistAuthorization: app.config.nodeEnv !== 'production', displayRequestDuration: true },
      // "Try it out" calls the server that served the page, whatever address it is reached at.
      transformSpecification: (document) => ({ ...document, servers: [{ url: '/', description: 'This server' }] }),
      transformSpecificationClone: false,
    });

    app.get('/redoc', (_request, reply) =>
      reply.type('text/html; charset=utf-8').header('content-security-policy', DOCS_CSP).send(REDOC_PAGE),
    );
    app.get('/redoc/redoc.standalone.js', (_request, reply) =>
      reply.type('application/javascript; charset=utf-8').header('cache-control', 'public, max-age=3600').send(redocBundle),
    );
  },
  { name: 'docs', dependencies: ['config'], fastify: '5.x' },
);
