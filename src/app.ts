import cors from '@fastify/cors';
import formbody from '@fastify/formbody';
import multipart from '@fastify/multipart';
import Fastify, { type FastifyInstance } from 'fastify';
import authPlugin from '../plugins/auth.js';
import cachePlugin from '../plugins/cache.js';
import configPlugin, { type AppConfig, loadConfig } from '../plugins/config.js';
import dbPlugin from '../plugins/db.js';
import docsPlugin from '../plugins/docs.js';
import mailPlugin, { type MailOptions } from '../plugins/mail.js';
import rateLimitPlugin from '../plugins/rate-limit.js';
import redisPlugin from '../plugins/redis.js';
import { authHandlers } from './auth/auth.routes.js';
import { contactsHandlers } from './contacts/contacts.routes.js';
import { errorHandler, frameworkErrors, notFoundHandler } from './http/error-handler.js';
import { parseJsonBody } from './http/json-body.js';
import type { OperationHandlers } from './http/operation-types.js';
import { registerOperations } from './http/register-operations.js';
import { compileValidator, formatSchemaError } from './http/validation.js';
import { operationsHandlers } from './operations/operations.routes.js';
import { pagesHandlers } from './pages/pages.routes.js';
import { usersHandlers } from './users/users.routes.js';
import { isTokenCurrent } from './users/users.repository.js';

export interface BuildOptions {
  /** Settings; read from the environment when absent. */
  config?: AppConfig;
  /** Mail transport and clock overrides, for tests. */
  mail?: MailOptions;
  /** The current time; tests move it to exercise dates. */
  now?: () => Date;
}

const MiB = 1024 * 1024;

/** Headers a browser client may read across origins. */
const EXPOSED_HEADERS = [
  'Location', 'Link', 'X-Total-Count', 'X-Per-Page', 'X-Current-Page', 'X-Page-Count', 'X-Cache',
  'Retry-After', 'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset',
];

/** Builds the app: plugins in dependency order, one error handler, then every operation of openapi.yaml. */
export async function buildApp(options: BuildOptions = {}): Promise<FastifyInstance> {
  const config = options.config ?? (await loadConfig());
  const app = Fastify({
    logger: {
      level: config.logLevel,
      redact: {
        paths: ['req.headers.authorization', 'req.headers.cookie', '*.password', '*.token', '*.refresh_token', '*.access_token'],
        censor: '[REDACTED]',
      },
      serializers: {
        // Verification and reset links carry their token in the query string.
        req: (req) => ({ method: req.method, url: req.url.replace(/([?&]token=)[^&]*/g, '$1[REDACTED]'), remoteAddress: req.ip }),
      },
    },
    trustProxy: config.trustProxy,
    bodyLimit: MiB,
    routerOptions: { ignoreTrailingSlash: true },
    requestIdHeader: 'x-request-id',
    genReqId: () => crypto.randomUUID(),
    schemaErrorFormatter: formatSchemaError,
    frameworkErrors,
    // A request that reaches a closing server on a kept-alive connection is served (server.ts
    // closes the connection after the answer): Fastify's own 503 would carry a body that is not
    // {detail}, and the close waits for the connection anyway.
    return503OnClosing: false,
    // A first start on the embedded default creates the database (initdb, then migrations), which can outlast the 10 s default.
    pluginTimeout: 120_000,
  });
  app.setValidatorCompiler(compileValidator);
  app.setErrorHandler(errorHandler);
  app.setNotFoundHandler(notFoundHandler);
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, parseJsonBody);

  await app.register(configPlugin, { config });
  await app.register(dbPlugin);
  await app.register(redisPlugin);
  await app.register(cachePlugin);
  await app.register(authPlugin, { isTokenCurrent: (userId, issuedAt) => isTokenCurrent(app.db, userId, issuedAt) });
  await app.register(rateLimitPlugin);
  await app.register(mailPlugin, options.mail ?? {});
  await app.register(cors, { origin: config.corsOrigins.length > 0 ? config.corsOrigins : false, exposedHeaders: EXPOSED_HEADERS });
  await app.register(formbody);
  await app.register(multipart, { attachFieldsToBody: 'keyValues', limits: { files: 0, fields: 10, fieldSize: 4096 } });
  await app.register(docsPlugin);
  app.decorate('now', options.now ?? (() => new Date()));

  const handlers: OperationHandlers = {
    ...authHandlers,
    ...usersHandlers,
    ...contactsHandlers,
    ...pagesHandlers,
    ...operationsHandlers,
  };
  registerOperations(app, handlers);
  return app;
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The clock every date rule reads (birthdays, cache expiry at midnight). */
    now(): Date;
  }
}
