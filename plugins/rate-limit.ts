import { isIP } from 'node:net';
import fastifyRateLimit, { normalizeIP } from '@fastify/rate-limit';
import type { FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { TooManyRequests } from './http/errors.js';
import { outageLog } from './outage-log.js';
import { userTag } from './redis.js';
import { lru } from './lru.js';

interface Bucket {
  /** The limit's short name, as `contacts_rate_limited_total{limit}` shows it. */
  name: string;
  key: string;
  max: number;
}

/** One per 429. */
const RATE_LIMITED = {
  name: 'contacts_rate_limited_total',
  help: 'Requests refused with 429, by the limit they exceeded.',
  labelNames: ['limit'],
  series: [
    { limit: 'anonymous' },
    { limit: 'password' },
    { limit: 'me' },
    { limit: 'import' },
    { limit: 'export' },
    { limit: 'sync' },
    { limit: 'avatar' },
    { limit: 'app-password' },
    { limit: 'account' },
    { limit: 'multiget' },
    { limit: 'card-put' },
  ],
} as const;

/** The per-user buckets an operation may name in `x-rate-limit`, each a label of RATE_LIMITED. */
type PerUserBucket = Exclude<(typeof RATE_LIMITED)['series'][number]['limit'], 'anonymous' | 'password'>;
/** The one per-address bucket an operation may name: the operations that cost a password hash. */
const PASSWORD_BUCKET = 'password';

const WINDOW_MS = 60_000;
/** Buckets the in-process fallback remembers; the least recently used go first. */
const FALLBACK_BUCKETS = 100_000;

/** What a count says, as @fastify/rate-limit's limiter answers it for a request it does not allow-list. */
interface Count {
  max: number;
  remaining: number;
  ttlInSeconds: number;
  isAllowed: false;
  isExceeded: boolean;
}

/**
 * Counting in this process, for while the shared store refuses (Redis down, or full and answering
 * OOM): a fixed one-minute window per bucket, as the store counts. Each instance then allows the
 * limit on its own, so N instances allow N times it, but nobody is unlimited.
 */
function fallbackCounter(now: () => number = Date.now): { count: (bucket: Bucket) => Count; forget: (key: string) => void } {
  const windows = lru<string, { count: number; endsAt: number }>(FALLBACK_BUCKETS);
  const count = ({ key, max }: Bucket): Count => {
    const at = now();
    let window = windows.get(key);
    if (!window || window.endsAt <= at) window = { count: 0, endsAt: at + WINDOW_MS };
    window.count++;
    windows.set(key, window);
    const remaining = Math.max(0, max - window.count);
    return { max, remaining, ttlInSeconds: Math.ceil((window.endsAt - at) / 1000), isAllowed: false, isExceeded: window.count > max };
  };
  return { count, forget: (key) => windows.delete(key) };
}

function setHeaders(reply: FastifyReply, state: Pick<Count, 'max' | 'remaining' | 'ttlInSeconds'>): void {
  reply.header('X-RateLimit-Limit', state.max);
  reply.header('X-RateLimit-Remaining', state.remaining);
  reply.header('X-RateLimit-Reset', Math.max(1, state.ttlInSeconds));
}

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

/**
 * The client's address: `request.ip`, unless a trusted proxy's X-Forwarded-For named something
 * that is no address (`evil`), which would make a fresh bucket for every such value; then the
 * socket's peer, the proxy itself.
 */
export function clientAddress(request: FastifyRequest): string {
  return isIP(request.ip) ? request.ip : (request.socket.remoteAddress ?? '');
}

/** IPv6 clients are grouped by /56: one household or site often holds a /56, and a /64 each costs an attacker nothing. */
const IPV6_PREFIX = 56;

/**
 * The client as every per-address limit counts it: its buckets here, its failed sign-ins
 * (plugins/sign-in-throttle.ts) and its turn in the password queue (plugins/passwords.ts).
 */
export function clientOf(request: FastifyRequest): string {
  return normalizeIP(clientAddress(request), IPV6_PREFIX);
}

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * Counts a request whose credentials failed outside `/api` (CardDAV's HTTP Basic) against the
     * anonymous bucket of its client address, the one `/api` uses; throws TooManyRequests once it is full.
     */
    countFailedSignIn(request: FastifyRequest, reply: FastifyReply): Promise<void>;
    /**
     * 429 (TooManyRequests) when countFailedSignIn answered 429 for this client address within its
     * window: checked before the credentials are, so a refused sign-in costs no database lookup.
     */
    refuseWhileSignInsFull(request: FastifyRequest, reply: FastifyReply): void;
    /** Counts a signed-in request outside `/api` (a CardDAV sync) against the user's bucket, as an operation naming it does. */
    countPerUser(request: FastifyRequest, reply: FastifyReply, bucket: PerUserBucket, userId: number): Promise<void>;
    /**
     * Drops the user's per-user counters (an account deleted): in Redis, for every instance, and in
     * this process's fallback. The library's own in-process store (no Redis) has no way to drop a key;
     * its windows end within a minute, and user ids are never given out again.
     */
    forgetUserCounts(userId: number): Promise<void>;
  }
}

/**
 * Request limits per minute: without a valid access token, one bucket per client address shared
 * by every /api route; with one on a secured operation, only operations marked
 * `x-rate-limit: {scope: per-user, bucket}` are limited, per user and bucket. Counters live in Redis
 * when there is one, so every instance shares them.
 */
export default fp(
  async (app) => {
    const { rateLimitAnonPerMin, rateLimitPasswordPerMin, redisKeyPrefix } = app.config;
    const perUserMax: Record<PerUserBucket, number> = {
      me: app.config.rateLimitMePerMin,
      import: app.config.rateLimitImportPerMin,
      export: app.config.rateLimitExportPerMin,
      sync: app.config.rateLimitSyncPerMin,
      avatar: app.config.rateLimitAvatarPerMin,
      'app-password': app.config.rateLimitAppPasswordPerMin,
      account: app.config.rateLimitAccountPerMin,
      multiget: app.config.rateLimitMultigetPerMin,
      'card-put': app.config.rateLimitCardPutPerMin,
    };
    const buckets = new WeakMap<FastifyRequest, Bucket>();
    const perUser = (bucket: PerUserBucket, userId: number | string): Bucket => ({
      name: bucket,
      // The user's tag: on a Redis Cluster every key of one user lives in one slot.
      key: `user:${userTag(userId)}:${bucket}`,
      max: perUserMax[bucket],
    });

    // The library supplies the counting (Redis script or in-process LRU); which bucket a request
    // falls in, and the answer when it is full, are decided here, before authentication runs.
    await app.register(fastifyRateLimit, {
      global: false,
      timeWindow: WINDOW_MS,
      keyGenerator: (request) => buckets.get(request)!.key,
      max: (request) => buckets.get(request)!.max,
      ...(app.redisClient ? { redis: app.redisClient, nameSpace: `${redisKeyPrefix}rate-limit:` } : {}),
    });
    // A bucket named in openapi.yaml without a limit here would count against `undefined`.
    app.addHook('onRoute', (route) => {
      const bucket = route.config?.rateLimitBucket;
      const known = route.config?.rateLimitScope === 'per-address' ? bucket === PASSWORD_BUCKET : bucket != null && bucket in perUserMax;
      if (bucket != null && !known) throw new Error(`${route.url}: unknown rate-limit bucket '${bucket}' for its scope`);
    });
    const count = app.createRateLimit();
    const rateLimited = app.metrics.counter(RATE_LIMITED);

    const anonymous = (request: FastifyRequest): Bucket => ({
      name: 'anonymous',
      key: `anon:${clientOf(request)}`,
      max: rateLimitAnonPerMin,
    });

    /** The buckets this request counts in, in order; none when it is not limited. */
    function bucketsOf(request: FastifyRequest): Bucket[] {
      if (!isLimited(request)) return [];
      const { secured, rateLimitBucket } = request.routeOptions.config;
      // A token exempts only where it is required: on login, say, any token would otherwise buy
      // unlimited password guesses. Signature, type and expiry decide here; the database check
      // (deleted user, reset) stays with authentication, which answers 401.
      const claims = secured ? request.accessClaims() : null;
      if (claims) return rateLimitBucket ? [perUser(rateLimitBucket as PerUserBucket, claims.sub)] : [];
      // The seed's limit counts every request without a token, logins included. Those that cost a
      // password hash count in a bucket of their own as well, which an operator may set tighter.
      if (rateLimitBucket !== PASSWORD_BUCKET) return [anonymous(request)];
      return [anonymous(request), { name: 'password', key: `password:${clientOf(request)}`, max: rateLimitPasswordPerMin }];
    }

    // Settled: right after a reconnection the odd command still fails, which is no new outage.
    const outage = outageLog(
      app.log,
      { down: 'rate-limit store unavailable; counting in this process', up: 'rate-limit store reachable again' },
      1_000,
    );
    const { count: countHere, forget: forgetHere } = fallbackCounter();

    /** Counts the request in `bucket`. */
    async function countIn(request: FastifyRequest, bucket: Bucket): Promise<Awaited<ReturnType<typeof count>> | Count> {
      buckets.set(request, bucket);
      try {
        const state = await count(request);
        outage.answered();
        return state;
      } catch (err) {
        // The library's skipOnError would let every request through; this counts here instead, and says so.
        outage.failed(err);
        return countHere(bucket);
      }
    }

    /**
     * Counts the request in each bucket in turn; 429 at the first that is full (the later ones are
     * not counted). The X-RateLimit-* headers tell of the full bucket, or else of the one with the
     * fewest requests left.
     */
    async function countInEach(request: FastifyRequest, reply: FastifyReply, list: Bucket[]): Promise<void> {
      let tightest: Count | undefined;
      for (const bucket of list) {
        const state = await countIn(request, bucket);
        if (state.isAllowed) continue;
        if (state.isExceeded) {
          setHeaders(reply, state);
          rateLimited.inc({ limit: bucket.name });
          throw new TooManyRequests(Math.max(1, state.ttlInSeconds));
        }
        if (!tightest || state.remaining < tightest.remaining) tightest = state;
      }
      if (tightest) setHeaders(reply, tightest);
    }

    app.addHook('onRequest', async (request: FastifyRequest, reply: FastifyReply) => {
      const list = bucketsOf(request);
      if (list.length > 0) await countInEach(request, reply, list);
    });

    // Where an address's anonymous bucket was full, until its window ends: known without asking
    // the store, so this instance looks up at most one sign-in per full window and address.
    const signInsFullUntil = lru<string, { max: number; endsAt: number }>(FALLBACK_BUCKETS);
    app.decorate('countFailedSignIn', async (request: FastifyRequest, reply: FastifyReply) => {
      const bucket = anonymous(request);
      try {
        await countInEach(request, reply, [bucket]);
      } catch (error) {
        if (error instanceof TooManyRequests)
          signInsFullUntil.set(bucket.key, { max: bucket.max, endsAt: Date.now() + Number(error.headers['Retry-After']) * 1000 });
        throw error;
      }
    });
    app.decorate('refuseWhileSignInsFull', (request: FastifyRequest, reply: FastifyReply) => {
      const bucket = anonymous(request);
      const full = signInsFullUntil.get(bucket.key);
      if (!full) return;
      const seconds = Math.ceil((full.endsAt - Date.now()) / 1000);
      if (seconds <= 0) return void signInsFullUntil.delete(bucket.key);
      setHeaders(reply, { max: full.max, remaining: 0, ttlInSeconds: seconds });
      rateLimited.inc({ limit: bucket.name });
      throw new TooManyRequests(seconds);
    });
    app.decorate('countPerUser', (request: FastifyRequest, reply: FastifyReply, bucket: PerUserBucket, userId: number) =>
      countInEach(request, reply, [perUser(bucket, userId)]),
    );
    app.decorate('forgetUserCounts', async (userId: number) => {
      const keys = (Object.keys(perUserMax) as PerUserBucket[]).map((bucket) => perUser(bucket, userId).key);
      keys.forEach(forgetHere);
      // One slot on a Redis Cluster: every key carries the user's tag.
      await app.redisClient?.del(...keys.map((key) => `${redisKeyPrefix}rate-limit:${key}`)).catch((err: unknown) => {
        app.log.warn({ err, userId }, 'rate-limit counters of a deleted account not dropped; they end within a minute');
      });
    });
  },
  { name: 'rate-limit', dependencies: ['config', 'redis', 'auth', 'metrics'], fastify: '5.x' },
);
