import fastifyJwt from '@fastify/jwt';
import type { FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { v7 as uuidV7 } from 'uuid';
import { Unauthorized } from './http/errors.js';
import { lru } from './lru.js';

export type TokenType = 'access' | 'refresh' | 'verify' | 'reset';

export interface TokenClaims {
  sub: string;
  typ: TokenType;
  iat: number;
  exp: number;
  jti: string;
}

/** The largest user id: ids are PostgreSQL `integer`s. */
const MAX_USER_ID = 2_147_483_647;
const UUID_V7 = /^([0-9a-f]{8})-([0-9a-f]{4})-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/i;

/**
 * Issue time of a token in milliseconds. Tokens issued here carry a UUIDv7 `jti`, whose first 48
 * bits are the issue time in ms; any other `jti` gives only the whole-second `iat`, read as the
 * start of that second, so such a token of the same second as a reset counts as issued before it.
 */
export function issuedAtMs(claims: TokenClaims): number {
  return jtiTimeMs(claims.jti) ?? claims.iat * 1000;
}

/** The time in ms a UUIDv7 `jti` holds; null for any other. */
function jtiTimeMs(jti: string): number | null {
  const uuid = UUID_V7.exec(jti);
  return uuid ? parseInt(`${uuid[1]}${uuid[2]}`, 16) : null;
}

export interface TokenService {
  /**
   * A token of `typ` for the user. Its issue time is its `jti`'s (a UUIDv7, new unless given), so
   * signing again with the same jti and lifetime gives the same token (a reset link mailed again).
   */
  sign(userId: number, typ: TokenType, ttlSeconds: number, jti?: string): string;
  /** The claims when the token is well-signed, unexpired, of type `typ` and names a possible user; null otherwise. */
  verify(token: string, typ: TokenType): TokenClaims | null;
  /**
   * Tells every instance that the user's tokens up to a new cut-off are dead: their remembered
   * cut-off is dropped here and, through Redis, everywhere else. Call it after the change commits.
   */
  cutOffChanged(userId: number): Promise<void>;
}

/** The user's cut-off in ms (tokens issued at or before it are dead), null for none, undefined when the user is gone. */
export type CutOffLoader = (userId: number) => Promise<number | null | undefined>;

export interface AuthOptions {
  loadCutOff: CutOffLoader;
  /** No other process can change a cut-off (the embedded database is this process's alone). */
  soleInstance: boolean;
}

declare module 'fastify' {
  interface FastifyInstance {
    tokens: TokenService;
    /** onRequest hook of secured operations: sets `request.userId` or answers 401. */
    authenticate: (request: FastifyRequest) => Promise<void>;
  }
  interface FastifyRequest {
    /** The signed-in user: by access token on /api and /dav, by app password on /dav; null before sign-in. */
    userId: number | null;
    /** The request's bearer access token, verified once however often it is asked for; null when absent or invalid. */
    accessClaims(): TokenClaims | null;
  }
}

/** How long a remembered cut-off is trusted; it bounds staleness only if an invalidation message is lost. */
const CUT_OFF_TTL_MS = 30_000;
const REMEMBERED_USERS = 100_000;

/**
 * Users' cut-offs remembered in this process, so a request costs no database round trip. Only
 * while this process hears every other instance's changes (a live Redis subscription), or is the
 * only one, are they used; otherwise each check reads the database. A load that raced an
 * invalidation is not kept.
 */
function cutOffMemory(load: CutOffLoader) {
  const remembered = lru<number, { cutOff: number | null }>(REMEMBERED_USERS, CUT_OFF_TTL_MS);
  let trusted = false;
  let invalidations = 0;
  return {
    async cutOff(userId: number): Promise<number | null | undefined> {
      if (!trusted) return load(userId);
      const known = remembered.get(userId);
      if (known) return known.cutOff;
      const before = invalidations;
      const cutOff = await load(userId);
      if (cutOff !== undefined && trusted && before === invalidations) remembered.set(userId, { cutOff });
      return cutOff;
    },
    forget(userId: number) {
      invalidations++;
      remembered.delete(userId);
    },
    /** Trust remembered cut-offs only while every change is heard; start afresh either way. */
    setTrusted(value: boolean) {
      invalidations++;
      remembered.clear();
      trusted = value;
    },
  };
}

/** The token of an `Authorization: Bearer <token>` header, the scheme in any case (RFC 9110 §11.1); null for anything else. */
export function bearerToken(authorization: string | undefined): string | null {
  const match = /^Bearer +(\S+)\s*$/i.exec(authorization ?? '');
  return match?.[1] ?? null;
}

/**
 * JWTs (HS256 only, typed by the `typ` claim) and the bearer-token check of secured operations:
 * signature, type and expiry, then the user's cut-off (a password reset ends earlier tokens).
 */
export default fp<AuthOptions>(
  async (app, { loadCutOff, soleInstance }) => {
    await app.register(fastifyJwt, {
      secret: app.config.jwtSecret,
      sign: { algorithm: 'HS256' },
      verify: { algorithms: ['HS256'] },
    });

    const memory = cutOffMemory(loadCutOff);
    if (soleInstance) memory.setTrusted(true);
    const channel = `${app.config.redisKeyPrefix}token-cut-offs`;
    if (app.redisClient && app.redisSubscribe && !soleInstance) {
      const subscribed = app.redisSubscribe(channel, {
        message: (userId) => memory.forget(Number(userId)),
        // Remembered cut-offs are trusted only while every change is heard.
        listening: (yes) => memory.setTrusted(yes),
      });
      // With Redis up, remember from the first request on; without, do not wait: it reconnects.
      if (app.redisClient.status === 'ready') await subscribed;
    }

    const tokens: TokenService = {
      sign(userId, typ, ttlSeconds, jti = uuidV7()) {
        const iat = Math.floor((jtiTimeMs(jti) ?? Date.now()) / 1000);
        return app.jwt.sign({ sub: String(userId), typ, jti, iat }, { expiresIn: `${ttlSeconds}s` });
      },
      verify(token, typ) {
        let claims: TokenClaims;
        try {
          claims = app.jwt.verify<TokenClaims>(token);
        } catch {
          return null;
        }
        const userId = typeof claims.sub === 'string' && /^[1-9]\d{0,9}$/.test(claims.sub) ? Number(claims.sub) : 0;
        const validShape =
          claims.typ === typ && userId <= MAX_USER_ID && userId > 0 && typeof claims.jti === 'string' && Number.isInteger(claims.iat);
        return validShape ? claims : null;
      },
      async cutOffChanged(userId) {
        memory.forget(userId);
        await app.redisPublish?.(channel, String(userId)).catch((err: unknown) => {
          app.log.warn({ err, userId }, 'token cut-off not announced; other instances learn it within 30 s');
        });
      },
    };
    app.decorate('tokens', tokens);
    app.decorateRequest('userId', null);
    app.decorateRequest('accessClaimsMemo', undefined);
    app.decorateRequest('accessClaims', function accessClaims(this: FastifyRequest & { accessClaimsMemo?: TokenClaims | null }) {
      if (this.accessClaimsMemo === undefined) {
        const token = bearerToken(this.headers.authorization);
        this.accessClaimsMemo = token ? tokens.verify(token, 'access') : null;
      }
      return this.accessClaimsMemo;
    });

    app.decorate('authenticate', async function authenticate(request: FastifyRequest) {
      const claims = request.accessClaims();
      if (!claims) throw new Unauthorized();
      const userId = Number(claims.sub);
      const cutOff = await memory.cutOff(userId);
      if (cutOff === undefined || (cutOff !== null && issuedAtMs(claims) <= cutOff)) throw new Unauthorized();
      request.userId = userId;
    });
  },
  { name: 'auth', dependencies: ['config', 'redis'], fastify: '5.x' },
);
