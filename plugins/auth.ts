import { randomBytes } from 'node:crypto';
import fastifyJwt from '@fastify/jwt';
import type { FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { Unauthorized } from './http/errors.js';

export type TokenType = 'access' | 'refresh' | 'verify' | 'reset';

export interface TokenClaims {
  sub: string;
  typ: TokenType;
  iat: number;
  exp: number;
  jti: string;
}

/** Time-ordered UUID (v7): its first 48 bits are the issue time in ms, finer than the whole-second `iat`. */
function uuidV7(now = Date.now()): string {
  const bytes = randomBytes(16);
  bytes.writeUIntBE(now, 0, 6);
  bytes[6] = (bytes[6]! & 0x0f) | 0x70;
  bytes[8] = (bytes[8]! & 0x3f) | 0x80;
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** Issue time of a token in milliseconds, read from its UUIDv7 `jti`. */
export function issuedAtMs(claims: TokenClaims): number {
  return parseInt(claims.jti.replace(/-/g, '').slice(0, 12), 16);
}

export interface TokenService {
  sign(userId: number, typ: TokenType, ttlSeconds: number): string;
  /** The claims when the token is well-signed, unexpired and of type `typ`; null otherwise. */
  verify(token: string, typ: TokenType): TokenClaims | null;
}

export interface AuthOptions {
  /** Whether the user still exists and `issuedAtMs` is after their latest password reset. */
  isTokenCurrent(userId: number, issuedAtMs: number): Promise<boolean>;
}

declare module 'fastify' {
  interface FastifyInstance {
    tokens: TokenService;
    /** onRequest hook of secured operations: sets `request.userId` or answers 401. */
    authenticate(request: FastifyRequest): Promise<void>;
  }
  interface FastifyRequest {
    userId: number | null;
  }
}

export function bearerToken(request: FastifyRequest): string | null {
  const match = /^Bearer +(\S+)\s*$/i.exec(request.headers.authorization ?? '');
  return match?.[1] ?? null;
}

/** JWTs (HS256 only, typed by the `typ` claim) and the bearer-token check of secured operations. */
export default fp<AuthOptions>(
  async (app, { isTokenCurrent }) => {
    await app.register(fastifyJwt, {
      secret: app.config.jwtSecret,
      sign: { algorithm: 'HS256' },
      verify: { algorithms: ['HS256'] },
    });

    const tokens: TokenService = {
      sign(userId, typ, ttlSeconds) {
        return app.jwt.sign({ sub: String(userId), typ, jti: uuidV7() }, { expiresIn: `${ttlSeconds}s` });
      },
      verify(token, typ) {
        try {
          const claims = app.jwt.verify<TokenClaims>(token);
          const validShape = claims.typ === typ && /^[1-9]\d*$/.test(claims.sub) && /^[0-9a-f]{8}-/.test(claims.jti ?? '');
          return validShape ? claims : null;
        } catch {
          return null;
        }
      },
    };
    app.decorate('tokens', tokens);
    app.decorateRequest('userId', null);

    app.decorate('authenticate', async (request: FastifyRequest) => {
      const token = bearerToken(request);
      const claims = token ? tokens.verify(token, 'access') : null;
      if (!claims) throw new Unauthorized();
      const userId = Number(claims.sub);
      if (!(await isTokenCurrent(userId, issuedAtMs(claims)))) throw new Unauthorized();
      request.userId = userId;
    });
  },
  { name: 'auth', dependencies: ['config'], fastify: '5.x' },
);
