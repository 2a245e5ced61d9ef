import type { FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import { type OutageLog, outageLog } from '../../plugins/outage-log.js';
import { ServiceUnavailable } from '../errors.js';
import type { OperationHandlers } from '../http/operation-types.js';

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

/** Per app: probes come every few seconds, so log when a dependency goes or comes back, not each failed probe. */
const probeLogs = new WeakMap<FastifyInstance, { db: OutageLog; cache: OutageLog }>();

function probeLogsOf(app: FastifyInstance): { db: OutageLog; cache: OutageLog } {
  let logs = probeLogs.get(app);
  if (!logs) {
    logs = {
      db: outageLog(app.log, { down: 'readiness: database unavailable', up: 'readiness: database answers again' }),
      cache: outageLog(app.log, { down: 'readiness: cache unavailable', up: 'readiness: cache answers again' }),
    };
    probeLogs.set(app, logs);
  }
  return logs;
}

/** Health probes and the contract itself. */
export const operationsHandlers = {
  getHealth: async () => ({ status: 200, body: { status: 'ok' } }),

  getReadiness: async (request) => {
    const app = request.server;
    const logs = probeLogsOf(app);
    const dbFailure = await probeFailure(() => sql`select 1`.execute(app.db));
    if (dbFailure) {
      logs.db.failed(dbFailure);
      throw new ServiceUnavailable('Database unavailable');
    }
    logs.db.answered();
    // Without Redis the cache is in-process and always answers.
    const redis = app.redisClient;
    const cacheFailure = redis ? await probeFailure(() => redis.ping()) : null;
    if (cacheFailure) {
      logs.cache.failed(cacheFailure);
      throw new ServiceUnavailable('Cache unavailable');
    }
    logs.cache.answered();
    return { status: 200, body: { status: 'ok' } };
  },

  getOpenApiJson: async (request) => ({ status: 200, body: request.server.openapi.document }),

  getOpenApiYaml: async (request) => ({ status: 200, body: request.server.openapi.yaml }),
} satisfies Partial<OperationHandlers>;
