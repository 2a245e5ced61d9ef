import fastifyRateLimit, { normalizeIP } from '@fastify/rate-limit';
import type { FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { TooManyRequests } from './http/errors.js';
import { outageLog } from './outage-log.js';

interface Bucket {
  key: string;
  max: number;
}

const WINDOW_MS = 60_000;

/**
 * Only the API is limited; docs, openapi.*, health probes and pages are not. The matched route
 * decides (the raw URL could hide `/api` behind percent-encoding); unmatched URLs count by path.
 * CORS preflights are not limited either: they never carry the token, so they would spend the
 * anonymous bucket of signed-in browser clients.
 */
function isLimited(request: FastifyRequest): boolean {
  if (request.method === 'OPTIONS') return false;
  const path = request.routeOptions.config.operationId ? (request.routeOptions.url ?? '') : decodedPath(request.url);
  return path === '/api' || path.startsWith('/api/');
}

function decodedPath(url: string): string {
  const path = url.split('?', 1)[0] ?? '';
  try {
    return decodeURIComponent(path);
  } catch {
    return path;
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * Counts a request whose credentials failed outside `/api` (CardDAV's HTTP Basic) against the
     * anonymous bucket of its client address, the one `/api` uses; throws TooManyRequests once it is full.
     */
    countFailedSignIn(request: FastifyRequest, reply: FastifyReply): Promise<void>;
  }
}

/**
 * Request limits per minute: without a valid access token, one bucket per client address shared
 * by every /api route; with one on a secured operation, only operations marked
 * `x-rate-limit: per-user` are limited, per user. Counters live in Redis when there is one, so every instance shares them.
 */
export default fp(
  async (app) => {
    const { rateLimitAnonPerMin, rateLimitMePerMin, redisKeyPrefix } = app.config;
    const buckets = new WeakMap<FastifyRequest, Bucket>();

    // The library supplies the counting (Redis script or in-process LRU); which bucket a request
    // falls in, and the answer when it is full, are decided here, before authentication runs.
    await app.register(fastifyRateLimit, {
      global: false,
      timeWindow: WINDOW_MS,
      keyGenerator: (request) => buckets.get(request)!.key,
      max: (request) => buckets.get(request)!.max,
      ...(app.redisClient ? { redis: app.redisClient, nameSpace: `${redisKeyPrefix}rate-limit:` } : {}),
    });
    const count = app.createRateLimit();

    /** The bucket this request counts against, or null when it is not limited. */
    function bucketOf(request: FastifyRequest): Bucket | null {
      if (!isLimited(request)) return null;
      const { operationId, secured, rateLimitScope } = request.routeOptions.config;
      // A token exempts only where it is required: on login, say, any token would otherwise buy
      // unlimited password guesses. Signature, type and expiry decide here; the database check
      // (deleted user, reset) stays with authentication, which answers 401.
      const claims = secured ? request.accessClaims() : null;
      // IPv6 clients are grouped by /64, the block one subscriber usually holds.
      if (!claims) return { key: `anon:${normalizeIP(request.ip)}`, max: rateLimitAnonPerMin };
      if (rateLimitScope === 'per-user') return { key: `user:${claims.sub}:${operationId}`, max: rateLimitMePerMin };
      return null;
    }

    // Settled: right after a reconnection the odd command still fails, which is no new outage.
    const outage = outageLog(app.log, { down: 'rate-limit store unavailable; requests are not counted', up: 'rate-limit store reachable again' }, 1_000);

    /** Counts the request in `bucket`; 429 once the bucket is full. */
    async function countIn(request: FastifyRequest, reply: FastifyReply, bucket: Bucket): Promise<void> {
      buckets.set(request, bucket);
      let state;
      try {
        state = await count(request);
      } catch (err) {
        // The library's skipOnError would hide the outage; this lets requests through as well, and says so.
        outage.failed(err);
        return;
      }
      outage.answered();
      if (state.isAllowed) return;
      const resetSeconds = Math.max(1, state.ttlInSeconds);
      reply.header('X-RateLimit-Limit', state.max);
      reply.header('X-RateLimit-Remaining', state.remaining);
      reply.header('X-RateLimit-Reset', resetSeconds);
      if (state.isExceeded) throw new TooManyRequests(resetSeconds);
    }

    app.addHook('onRequest', async (request: FastifyRequest, reply: FastifyReply) => {
      const bucket = bucketOf(request);
      if (bucket) await countIn(request, reply, bucket);
    });

    app.decorate('countFailedSignIn', (request: FastifyRequest, reply: FastifyReply) =>
      countIn(request, reply, { key: `anon:${normalizeIP(request.ip)}`, max: rateLimitAnonPerMin }),
    );
  },
  { name: 'rate-limit', dependencies: ['config', 'redis', 'auth'], fastify: '5.x' },
);
