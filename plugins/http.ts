import { randomUUID } from 'node:crypto';
import cors from '@fastify/cors';
import formbody from '@fastify/formbody';
import multipart from '@fastify/multipart';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyServerOptions } from 'fastify';
import fp from 'fastify-plugin';
import helmet from 'helmet';
import { clientErrorHandler, errorHandler, frameworkErrors, notFoundHandler } from './http/error-handler.js';
import { parseJsonBody } from './http/json-body.js';
import { MULTIPART_FIELD_BYTES } from './http/multipart.js';
import { compileValidator, formatSchemaError } from './http/validation.js';

const MiB = 1024 * 1024;

/**
 * Helmet's security headers, worked out once: with this configuration they never depend on the
 * request, and running helmet's middleware on every answer cost about 5 % of a cached read. The
 * docs and pages send their own Content-Security-Policy; the API is read from other origins.
 */
function securityHeaders(): Record<string, string> {
  const headers: Record<string, string> = {};
  const collector = {
    setHeader: (name: string, value: string | number) => void (headers[name] = String(value)),
    removeHeader: (name: string) => void delete headers[name],
  };
  helmet({ contentSecurityPolicy: false, crossOriginResourcePolicy: { policy: 'cross-origin' } })(
    {} as IncomingMessage,
    collector as unknown as ServerResponse,
    () => undefined,
  );
  return headers;
}

/** The server options the HTTP conventions need; they can only be given when Fastify is created. */
export const httpServerOptions = {
  bodyLimit: MiB,
  routerOptions: { ignoreTrailingSlash: true },
  schemaErrorFormatter: formatSchemaError,
  frameworkErrors,
  clientErrorHandler,
  // A request that reaches a closing server on a kept-alive connection is served (server.ts closes
  // the connection after the answer): Fastify's own 503 would carry a body that is not {detail},
  // and the close waits for the connection anyway.
  return503OnClosing: false,
  requestIdHeader: false,
  genReqId: requestIdOf,
} satisfies FastifyServerOptions;

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The route's path template as openapi.yaml writes it (`/api/contacts/{contact_id}`), for metrics and traces. */
    httpRoute?: string;
    /** `false`: @fastify/cors leaves the route alone (it reads this route config). */
    cors?: false;
  }
}

/** A client's `X-Request-Id` is kept when it is 1–128 of these characters (openapi.yaml, "Conventions"). */
const CLIENT_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** The id of a request: the client's `X-Request-Id` when it is well formed, else a new UUID. */
export function requestIdOf(request: IncomingMessage): string {
  const sent = request.headers['x-request-id'];
  return typeof sent === 'string' && CLIENT_REQUEST_ID.test(sent) ? sent : randomUUID();
}

export interface HttpOptions {
  /** Response headers a browser client may read across origins (CORS_ORIGINS turns CORS on). */
  exposedHeaders: string[];
}

/**
 * The HTTP conventions of the contract: strict schema validation (422), body parsers (400 for a
 * body that does not parse), baseline security headers and `X-Request-Id` on every answer, CORS,
 * each route's path template in its config, and one error handler that turns every error into `{detail}`.
 */
export default fp<HttpOptions>(
  async (app, { exposedHeaders }) => {
    app.setValidatorCompiler(compileValidator);
    app.setErrorHandler(errorHandler);
    app.setNotFoundHandler(notFoundHandler);
    app.removeContentTypeParser('application/json');
    app.addContentTypeParser('application/json', { parseAs: 'string' }, parseJsonBody);
    await app.register(formbody);
    // Operations read multipart fields themselves (http/multipart.ts), so parse errors stay 400s.
    await app.register(multipart, { limits: { files: 0, fields: 10, fieldSize: MULTIPART_FIELD_BYTES } });

    app.addHook('onRoute', (route) => {
      route.config = { ...route.config, httpRoute: route.url.replace(/:([A-Za-z0-9_]+)/g, '{$1}') };
    });

    // Fastify closes the connection when it answers before the body has all come (413 mid-body), and
    // the client, still sending, may then get a reset instead of the answer. Kept open, Node reads
    // the rest of the body and discards it, as a lingering close would (RFC 9112 §9.6), for at
    // most HTTP_REQUEST_TIMEOUT_MS from the request's start; the framing stays intact, so the
    // connection can serve the next request.
    app.addHook('onSend', (request, reply, payload, done) => {
      if (!request.raw.complete && reply.getHeader('connection') === 'close') reply.removeHeader('connection');
      done(null, payload);
    });

    const headers = securityHeaders();
    app.addHook('onRequest', (request, reply, done) => {
      reply.headers(headers);
      reply.header('x-request-id', request.id);
      done();
    });

    const { corsOrigins } = app.config;
    if (corsOrigins.length > 0) {
      // An OPTIONS request that is no CORS preflight is answered like any unrouted request, unless
      // a route of its own takes OPTIONS (WebDAV's capability discovery), not the CORS plugin's `*`.
      app.addHook('onRequest', async (request, reply) => {
        const preflight = request.headers.origin && request.headers['access-control-request-method'];
        const ownOptionsRoute = request.routeOptions.url !== '*' && [request.routeOptions.method].flat().includes('OPTIONS');
        if (request.method === 'OPTIONS' && !preflight && !ownOptionsRoute) return reply.callNotFound();
      });
      await app.register(cors, { origin: corsOrigins, exposedHeaders });
    }
  },
  { name: 'http', dependencies: ['config'], fastify: '5.x' },
);
