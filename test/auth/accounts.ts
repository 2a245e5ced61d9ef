/** Account helpers shared by the auth, users and rate-limit tests. */
import { createHmac, randomBytes } from 'node:crypto';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { v7 as uuidV7 } from 'uuid';
import { build, type BuildTestOptions, TEST_JWT_SECRET, type Teardown } from '../helper.js';

/**
 * The app with the anonymous and per-account failure limits out of the way: these tests make many
 * anonymous calls and wrong guesses from one address. The limits' own tests set them.
 */
export function buildAccountsApp(t: Teardown, options: BuildTestOptions = {}): Promise<FastifyInstance> {
  return build(t, {
    ...options,
    env: { RATE_LIMIT_ANON_PER_MIN: '100000', SIGN_IN_ACCOUNT_FAILURES: '100000', ...options.env },
  });
}

let counter = 0;

export interface Credentials {
  username: string;
  email: string;
  password: string;
}

/** Fresh, unique credentials. */
export function credentials(overrides: Partial<Credentials> = {}): Credentials {
  const id = `${++counter}${randomBytes(3).toString('hex')}`;
  return { username: `user_${id}`, email: `user_${id}@example.com`, password: 'correct-horse-battery', ...overrides };
}

export function register(app: FastifyInstance, body: Partial<Credentials>): Promise<LightMyRequestResponse> {
  return app.inject({ method: 'POST', url: '/api/auth/register', payload: body });
}

export type FormKind = 'urlencoded' | 'multipart';

/** Encodes fields as a form body of the given kind. */
export function formBody(
  fields: Record<string, string>,
  kind: FormKind = 'urlencoded',
): { payload: string; headers: Record<string, string> } {
  if (kind === 'urlencoded') {
    return { payload: new URLSearchParams(fields).toString(), headers: { 'content-type': 'application/x-www-form-urlencoded' } };
  }
  const boundary = `----test${randomBytes(8).toString('hex')}`;
  const parts = Object.entries(fields).map(
    ([name, value]) => `--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`,
  );
  return { payload: `${parts.join('')}--${boundary}--\r\n`, headers: { 'content-type': `multipart/form-data; boundary=${boundary}` } };
}

export function login(
  app: FastifyInstance,
  username: string,
  password: string,
  kind: FormKind = 'urlencoded',
  headers: Record<string, string> = {},
): Promise<LightMyRequestResponse> {
  const form = formBody({ username, password }, kind);
  return app.inject({ method: 'POST', url: '/api/auth/login', payload: form.payload, headers: { ...form.headers, ...headers } });
}

/** Registers a user and verifies the address through the public verify endpoint. */
export async function verifiedUser(app: FastifyInstance, overrides: Partial<Credentials> = {}): Promise<Credentials & { id: number }> {
  const creds = credentials(overrides);
  const res = await register(app, creds);
  if (res.statusCode !== 201) throw new Error(`register failed: ${res.statusCode} ${res.body}`);
  const { id } = res.json<{ id: number }>();
  const token = app.tokens.sign(id, 'verify', 60);
  const verified = await app.inject({ method: 'GET', url: `/api/auth/verify-email?token=${token}` });
  if (verified.statusCode !== 200) throw new Error(`verify failed: ${verified.statusCode} ${verified.body}`);
  return { ...creds, id };
}

export interface Session extends Credentials {
  id: number;
  accessToken: string;
  refreshToken: string;
}

/** A verified, logged-in user. */
export async function loggedInUser(app: FastifyInstance, overrides: Partial<Credentials> = {}): Promise<Session> {
  const user = await verifiedUser(app, overrides);
  const res = await login(app, user.username, user.password);
  if (res.statusCode !== 200) throw new Error(`login failed: ${res.statusCode} ${res.body}`);
  const body = res.json<{ access_token: string; refresh_token: string }>();
  return { ...user, accessToken: body.access_token, refreshToken: body.refresh_token };
}

export function bearer(token: string): Record<string, string> {
  return { authorization: `Bearer ${token}` };
}

const b64url = (value: unknown) => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url');

/** A UUIDv7 jti issued at `ms`, for crafted tokens. */
export function jti(ms = Date.now()): string {
  return uuidV7({ msecs: ms });
}

/** A JWT built by hand, to test what the service refuses. `alg: 'none'` gets an empty signature. */
export function craftToken(
  claims: Record<string, unknown>,
  { alg = 'HS256', secret = TEST_JWT_SECRET }: { alg?: string; secret?: string } = {},
): string {
  const now = Math.floor(Date.now() / 1000);
  const payload = { iat: now, exp: now + 900, jti: jti(), ...claims };
  const signingInput = `${b64url({ alg, typ: 'JWT' })}.${b64url(payload)}`;
  if (alg === 'none') return `${signingInput}.`;
  const hash = { HS256: 'sha256', HS384: 'sha384', HS512: 'sha512' }[alg] ?? 'sha256';
  return `${signingInput}.${createHmac(hash, secret).update(signingInput).digest('base64url')}`;
}

/** The claims of a JWT, unverified. */
export function decodeClaims(token: string): Record<string, unknown> {
  return JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8')) as Record<string, unknown>;
}
