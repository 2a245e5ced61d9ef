import { createHash, timingSafeEqual } from 'node:crypto';
import { sql } from 'kysely';
import { bearerToken } from '../../plugins/auth.js';
import { isDatabaseUnavailable } from '../../plugins/db.js';
import { NotFound, ServiceUnavailable, Unauthorized } from '../../plugins/http/errors.js';
import { EXPOSITION_CONTENT_TYPE } from '../../plugins/metrics.js';
import { redisAnswers } from '../../plugins/redis.js';
import type { OperationHandlers } from '../operation-types.js';

/** A dependency that does not answer within this long counts as down, so a probe never hangs. */
const PROBE_TIMEOUT_MS = 2000;

/** Why `probe` failed or did not settle within PROBE_TIMEOUT_MS; null when it answered. */
async function probeFailure(probe: () => Promise<unknown>): Promise<unknown> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${PROBE_TIMEOUT_MS} ms`)), PROBE_TIMEOUT_MS);
  });
  try {
    await Promise.race([probe(), timeout]);
    return null;
  } catch (error) {
    return error;
  } finally {
    clearTimeout(timer);
  }
}

/** Whether `authorization` carries `token` as its bearer token (read as /api reads it), compared in constant time. */
function bearerIs(authorization: string | undefined, token: string): boolean {
  const digest = (value: string) => createHash('sha256').update(value).digest();
  return timingSafeEqual(digest(bearerToken(authorization) ?? ''), digest(token));
}

/** Liveness and readiness probes, and the metrics a Prometheus scrapes. */
export const healthHandlers = {
  async getHealth() {
    return { status: 200, body: { status: 'ok' } };
  },

  async getReadiness(request) {
    const app = request.server;
    const dbFailure = await probeFailure(() => sql`select 1`.execute(app.db));
    if (dbFailure) {
      // An unreachable database is said once per outage, as for requests that need it; a slow
      // answer is no outage (nothing would ever say it ended), just this probe's warning.
      if (isDatabaseUnavailable(dbFailure)) app.databaseOutage.failed(dbFailure);
      else request.log.warn({ err: dbFailure }, 'readiness: the database did not answer in time');
      throw new ServiceUnavailable('Database unavailable');
    }
    // Every request has an in-process fallback for Redis, so its outage degrades the answer and
    // does not make the replica unready. Redis outages are logged by the connection and the cache themselves.
    const redis = app.redisClient;
    const cacheFailure = redis ? await probeFailure(() => redisAnswers(redis)) : null;
    return { status: 200, body: { status: 'ok', checks: { database: 'ok', cache: cacheFailure ? 'unavailable' : 'ok' } } };
  },

  async getMetrics(request) {
    const { metricsEnabled, metricsToken, nodeEnv } = request.server.config;
    if (!metricsEnabled || (metricsToken === null && nodeEnv === 'production')) throw new NotFound('Not Found');
    if (metricsToken !== null && !bearerIs(request.headers.authorization, metricsToken)) throw new Unauthorized();
    return {
      status: 200,
      body: await request.server.metrics.exposition(),
      headers: { 'Cache-Control': 'no-store', 'Content-Type': EXPOSITION_CONTENT_TYPE },
    };
  },
} satisfies Partial<OperationHandlers>;
