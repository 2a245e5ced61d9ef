import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import fp from 'fastify-plugin';

/** Typed, validated settings; every field comes from one environment variable. */
export interface AppConfig {
  nodeEnv: string;
  host: string;
  port: number;
  /** Unset: embedded PostgreSQL (PGlite) in `dataDir`. */
  databaseUrl: string | null;
  /** Unset: an in-process cache and per-instance rate-limit counters. */
  redisUrl: string | null;
  /** Namespace of every Redis key, so several deployments (or test runs) can share one Redis. */
  redisKeyPrefix: string;
  dataDir: string;
  jwtSecret: string;
  /** Unset: mail is written as .eml files into `outboxDir`. */
  smtpUrl: string | null;
  outboxDir: string;
  mailFrom: string;
  publicBaseUrl: string;
  accessTokenTtl: number;
  refreshTokenTtl: number;
  verifyTokenTtl: number;
  resetTokenTtl: number;
  bcryptCost: number;
  trustProxy: boolean | string | ((address: string, hop: number) => boolean);
  logLevel: string;
  corsOrigins: string[];
  rateLimitAnonPerMin: number;
  rateLimitMePerMin: number;
  /** How long SIGTERM waits for requests in flight before the process exits anyway (non-zero). */
  shutdownTimeoutMs: number;
  /** The algorithm of new password hashes; stored hashes of the other one still verify and are rehashed at login. */
  passwordHash: PasswordHashAlgorithm;
  /** argon2id memory in KiB, passes and lanes (OWASP's first choice: 19456, 2, 1). */
  argon2MemoryKib: number;
  argon2TimeCost: number;
  argon2Parallelism: number;
  /** Password jobs that may wait for a worker thread; past it register, login and reset answer 503. */
  passwordQueueLimit: number;
}

export const PASSWORD_HASH_ALGORITHMS = ['bcrypt', 'argon2id'] as const;
export type PasswordHashAlgorithm = (typeof PASSWORD_HASH_ALGORITHMS)[number];

export class ConfigError extends Error {}

type Env = Record<string, string | undefined>;

function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!/^\d+$/.test(raw.trim()) || value < min || value > max) {
    throw new ConfigError(`${name} must be a whole number from ${min} to ${max}, got '${raw}'`);
  }
  return value;
}

function url(env: Env, name: string, protocols: string[]): string | null {
  const raw = env[name];
  if (raw === undefined || raw === '') return null;
  let parsed: URL;
  try {
    parsed = new URL(raw);
  } catch {
    throw new ConfigError(`${name} must be a URL, got '${raw}'`);
  }
  if (!protocols.includes(parsed.protocol)) {
    throw new ConfigError(`${name} must use ${protocols.join(' or ')}, got '${parsed.protocol}'`);
  }
  return raw;
}

function oneOf<T extends string>(env: Env, name: string, choices: readonly T[], fallback: T): T {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!(choices as readonly string[]).includes(raw)) throw new ConfigError(`${name} must be one of ${choices.join(', ')}, got '${raw}'`);
  return raw as T;
}

/** `true`, `false`, a hop count (trust that many proxies in front), or trusted proxy addresses/CIDRs. */
function trustProxy(raw: string | undefined): AppConfig['trustProxy'] {
  if (raw === undefined || raw === '' || raw === 'false') return false;
  if (raw === 'true') return true;
  if (/^\d+$/.test(raw)) {
    const hops = Number(raw);
    return (_address: string, hop: number) => hop < hops;
  }
  return raw;
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

/** A JWT secret for development, made once and kept in the data folder so restarts keep sessions. */
async function developmentSecret(dataDir: string): Promise<string> {
  const file = path.join(dataDir, 'jwt-secret');
  const existing = await readFile(file, 'utf8').catch(() => '');
  if (existing.trim().length >= 32) return existing.trim();
  const secret = randomBytes(48).toString('base64url');
  await mkdir(dataDir, { recursive: true });
  await writeFile(file, secret, { mode: 0o600 });
  return secret;
}

/** Reads and validates the environment; throws ConfigError naming the first bad variable. */
export async function loadConfig(env: Env = process.env): Promise<AppConfig> {
  const nodeEnv = env.NODE_ENV || 'development';
  const port = integer(env, 'PORT', 3000, 0, 65535);
  const host = env.HOST || '127.0.0.1';
  const dataDir = path.resolve(env.DATA_DIR || '.data');

  const logLevel = env.LOG_LEVEL || 'info';
  if (!LOG_LEVELS.includes(logLevel)) throw new ConfigError(`LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}, got '${logLevel}'`);

  let jwtSecret = env.JWT_SECRET ?? '';
  if (jwtSecret === '') {
    if (nodeEnv === 'production') throw new ConfigError('JWT_SECRET is required when NODE_ENV=production');
    jwtSecret = await developmentSecret(dataDir);
  } else if (jwtSecret.length < 32) {
    throw new ConfigError('JWT_SECRET must be at least 32 characters');
  }

  const publicBaseUrl = url(env, 'PUBLIC_BASE_URL', ['http:', 'https:']) ?? `http://${host}:${port}`;
  const mailFrom = env.MAIL_FROM || 'Contacts <no-reply@contacts.local>';
  if (!/^[^<>]*<?[^\s@<>]+@[^\s@<>]+>?$/.test(mailFrom)) throw new ConfigError(`MAIL_FROM must be an e-mail address, got '${mailFrom}'`);

  return {
    nodeEnv,
    host,
    port,
    databaseUrl: url(env, 'DATABASE_URL', ['postgres:', 'postgresql:']),
    redisUrl: url(env, 'REDIS_URL', ['redis:', 'rediss:']),
    redisKeyPrefix: env.REDIS_KEY_PREFIX || 'contacts:',
    dataDir,
    jwtSecret,
    smtpUrl: url(env, 'SMTP_URL', ['smtp:', 'smtps:']),
    outboxDir: path.resolve(env.MAIL_OUTBOX_DIR || path.join(dataDir, 'outbox')),
    mailFrom,
    publicBaseUrl: publicBaseUrl.replace(/\/+$/, ''),
    accessTokenTtl: integer(env, 'ACCESS_TOKEN_TTL', 900, 1, 86_400),
    refreshTokenTtl: integer(env, 'REFRESH_TOKEN_TTL', 604_800, 1, 31_536_000),
    verifyTokenTtl: integer(env, 'VERIFY_TOKEN_TTL', 604_800, 1, 31_536_000),
    resetTokenTtl: integer(env, 'RESET_TOKEN_TTL', 900, 1, 86_400),
    bcryptCost: integer(env, 'BCRYPT_COST', 12, 4, 15),
    trustProxy: trustProxy(env.TRUST_PROXY),
    logLevel,
    corsOrigins: (env.CORS_ORIGINS ?? '').split(',').map((o) => o.trim()).filter(Boolean),
    rateLimitAnonPerMin: integer(env, 'RATE_LIMIT_ANON_PER_MIN', 20, 1, 1_000_000),
    rateLimitMePerMin: integer(env, 'RATE_LIMIT_ME_PER_MIN', 5, 1, 1_000_000),
    shutdownTimeoutMs: integer(env, 'SHUTDOWN_TIMEOUT_MS', 10_000, 1, 600_000),
    passwordHash: oneOf(env, 'PASSWORD_HASH', PASSWORD_HASH_ALGORITHMS, 'bcrypt'),
    argon2MemoryKib: integer(env, 'ARGON2_MEMORY_KIB', 19_456, 1024, 1_048_576),
    argon2TimeCost: integer(env, 'ARGON2_TIME_COST', 2, 1, 20),
    argon2Parallelism: integer(env, 'ARGON2_PARALLELISM', 1, 1, 16),
    passwordQueueLimit: integer(env, 'PASSWORD_QUEUE_LIMIT', 64, 1, 100_000),
  };
}

declare module 'fastify' {
  interface FastifyInstance {
    config: AppConfig;
    /** The clock every date rule reads (birthdays, cache expiry at midnight); tests move it. */
    now(): Date;
  }
}

export interface ConfigOptions {
  config: AppConfig;
  now?: () => Date;
}

/** Exposes the validated settings as `app.config`, and the clock as `app.now`. */
export default fp<ConfigOptions>(
  async (app, { config, now = () => new Date() }) => {
    app.decorate('config', config);
    app.decorate('now', now);
  },
  { name: 'config', fastify: '5.x' },
);
