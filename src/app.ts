import Fastify, { type FastifyInstance } from 'fastify';
import authPlugin from '../plugins/auth.js';
import cachePlugin from '../plugins/cache.js';
import configPlugin, { type AppConfig, loadConfig } from '../plugins/config.js';
import dbPlugin from '../plugins/db.js';
import readReplicasPlugin from '../plugins/read-replicas.js';
import docsPlugin from '../plugins/docs.js';
import httpPlugin, { httpServerOptions } from '../plugins/http.js';
import { registerOperations } from '../plugins/http/operations.js';
import mailPlugin, { type MailOptions } from '../plugins/mail.js';
import mailLimitPlugin from '../plugins/mail-limit.js';
import metricsPlugin from '../plugins/metrics.js';
import passwordsPlugin from '../plugins/passwords.js';
import rateLimitPlugin, { clientAddress } from '../plugins/rate-limit.js';
import signInThrottlePlugin from '../plugins/sign-in-throttle.js';
import redisPlugin from '../plugins/redis.js';
import type { Tracing } from '../plugins/tracing.js';
import workerPoolPlugin from '../plugins/worker-pool.js';
import { findTokenCutOff } from './auth/auth.repository.js';
import { authHandlers } from './auth/auth.routes.js';
import { carddavRoutes } from './carddav/carddav.routes.js';
import { withDavFrameworkErrors } from './carddav/errors.js';
import { avatarsHandlers } from './avatars/avatars.routes.js';
import { contactsHandlers } from './contacts/contacts.routes.js';
import { StreamSlots } from './carddav/stream-slots.js';
import { ExportSlots } from './contacts/export-slots.js';
import largeOwnersPlugin from './contacts/large-owners.js';
import { declareTransferMetrics } from './contacts/transfer.service.js';
import { migrations } from './db/migrations/index.js';
import { docsHandlers } from './docs/docs.routes.js';
import { operationTable } from './generated/operations.js';
import { healthHandlers } from './health/health.routes.js';
import type { OperationHandlers } from './operation-types.js';
import { pagesHandlers } from './pages/pages.routes.js';
import { usersHandlers } from './users/users.routes.js';

export interface BuildOptions {
  /** Settings; read from the environment when absent. */
  config?: AppConfig;
  /** Mail transport and clock overrides, for tests. */
  mail?: MailOptions;
  /** The current time; tests move it to exercise dates. */
  now?: () => Date;
  /** Hears of every database statement; tests count them. */
  onQuery?: (sql: string) => void;
  /** OpenTelemetry, when src/server.ts started it (OTEL_EXPORTER_OTLP_ENDPOINT); the app imports none of it. */
  tracing?: Tracing;
}

/** Time for a request's head to arrive (Node's default). */
const HEADERS_TIMEOUT_MS = 60_000;
/** How often Node checks the connections against those timeouts (its default, 30 s, would let a timed-out one live on for up to that). */
const CONNECTIONS_CHECKING_INTERVAL_MS = 1000;

/** Headers a browser client may read across origins. */
const EXPOSED_HEADERS = [
  'Location',
  'Link',
  'ETag',
  'X-Total-Count',
  'X-Per-Page',
  'X-Current-Page',
  'X-Page-Count',
  'X-Cache',
  'Retry-After',
  'X-RateLimit-Limit',
  'X-RateLimit-Remaining',
  'X-RateLimit-Reset',
  'Content-Disposition',
  'X-Request-Id',
  'Idempotent-Replayed',
];

/**
 * The URL as logged: verification and reset links carry their token in the query string, so a
 * parameter whose name, decoded as the query parser decodes it (`%74oken` is `token`), contains
 * "token" is logged as [REDACTED]; so is one whose name does not decode.
 */
function loggedUrl(url: string): string {
  const start = url.indexOf('?');
  if (start < 0) return url;
  const pairs = url
    .slice(start + 1)
    .split('&')
    .map((pair) => {
      const name = pair.split('=', 1)[0]!;
      let decoded: string | null;
      try {
        decoded = decodeURIComponent(name.replaceAll('+', ' ')).toLowerCase();
      } catch {
        decoded = null;
      }
      return decoded === null || decoded.includes('token') ? `${name}=[REDACTED]` : pair;
    });
  return `${url.slice(0, start)}?${pairs.join('&')}`;
}

/** Builds the app: plugins in dependency order, one error handler, then every operation of openapi.yaml. */
export async function buildApp(options: BuildOptions = {}): Promise<FastifyInstance> {
  const config = options.config ?? (await loadConfig());
  const { tracing } = options;
  const app = Fastify({
    logger: {
      level: config.logLevel,
      ...(tracing && { mixin: tracing.logFields }),
      redact: {
        paths: ['req.headers.authorization', 'req.headers.cookie', '*.password', '*.token', '*.refresh_token', '*.access_token'],
        censor: '[REDACTED]',
      },
      serializers: {
        req: (req) => ({ method: req.method, url: loggedUrl(req.url), remoteAddress: clientAddress(req) }),
      },
    },
    ...httpServerOptions,
    frameworkErrors: withDavFrameworkErrors(httpServerOptions.frameworkErrors),
    trustProxy: config.trustProxy,
    // A body that never comes holds its connection only this long (docs/limits.md, "Slow requests").
    requestTimeout: config.httpRequestTimeoutMs,
    http: {
      headersTimeout: Math.min(HEADERS_TIMEOUT_MS, config.httpRequestTimeoutMs),
      connectionsCheckingInterval: CONNECTIONS_CHECKING_INTERVAL_MS,
    },
    // A first start on the embedded default creates the database (initdb, then migrations), which can outlast the 10 s default.
    pluginTimeout: 120_000,
  });
  await app.register(configPlugin, { config, now: options.now });
  if (tracing) await app.register(tracing.requestSpans);
  await app.register(httpPlugin, { exposedHeaders: EXPOSED_HEADERS });
  await app.register(metricsPlugin);
  await app.register(dbPlugin, { migrations, onQuery: options.onQuery, wrapPool: tracing?.tracedPool });
  await app.register(redisPlugin);
  await app.register(cachePlugin);
  await app.register(readReplicasPlugin);
  await app.register(authPlugin, { loadCutOff: (userId) => findTokenCutOff(app.db, userId), soleInstance: !config.databaseUrl });
  await app.register(passwordsPlugin);
  await app.register(workerPoolPlugin);
  await app.register(rateLimitPlugin);
  await app.register(signInThrottlePlugin);
  await app.register(mailPlugin, options.mail ?? {});
  await app.register(mailLimitPlugin);
  await app.register(docsPlugin);
  await app.register(largeOwnersPlugin);

  const handlers: OperationHandlers = {
    ...authHandlers,
    ...usersHandlers,
    ...avatarsHandlers,
    ...contactsHandlers,
    ...pagesHandlers,
    ...healthHandlers,
    ...docsHandlers,
  };
  declareTransferMetrics(app.metrics);
  app.decorate('exportSlots', new ExportSlots(config));
  app.decorate('davStreamSlots', new StreamSlots(config));
  registerOperations(app, operationTable, handlers);
  // WebDAV methods cannot be OpenAPI operations: the CardDAV face is routed on its own (docs/carddav.md).
  await app.register(carddavRoutes);
  return app;
}
