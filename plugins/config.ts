import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { isIP } from 'node:net';
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
  /** A Redis command that takes longer fails, and the request goes on without Redis. */
  redisCommandTimeoutMs: number;
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
  /** Per-user requests a minute of the `import`, `export`, `sync` (REST and CardDAV) and `avatar` buckets. */
  rateLimitImportPerMin: number;
  rateLimitExportPerMin: number;
  rateLimitSyncPerMin: number;
  rateLimitAvatarPerMin: number;
  /** Exports one user may have in flight (spooling or sending) in one instance; past it 429. */
  exportConcurrentPerUser: number;
  /** Exports in flight in one instance; past it 503. */
  exportConcurrentPerInstance: number;
  /** Bytes of export spool files one instance holds at once; past it the export is 503. */
  exportSpoolMaxBytes: number;
  /** An export whose reader takes nothing for this long is cut, and its spool freed. */
  exportSendTimeoutMs: number;
  /** Contacts one user may have; a create past it is refused (409, or 507 over CardDAV). */
  contactsMaxPerUser: number;
  /** How long SIGTERM waits for requests in flight before the process exits anyway (non-zero). */
  shutdownTimeoutMs: number;
  /** Days deletions are remembered for incremental sync; older sync tokens are refused (410). */
  syncTombstoneDays: number;
  /** The algorithm of new password hashes; stored hashes of the other one still verify and are rehashed at login. */
  passwordHash: PasswordHashAlgorithm;
  /** argon2id memory in KiB, passes and lanes (OWASP's first choice: 19456, 2, 1). */
  argon2MemoryKib: number;
  argon2TimeCost: number;
  argon2Parallelism: number;
  /** Password jobs that may wait for a worker thread; past it register, login and reset answer 503. */
  passwordQueueLimit: number;
  /** Whether the service records metrics and serves /metrics (METRICS_ENABLED). */
  metricsEnabled: boolean;
  /** Bearer token /metrics requires; null leaves it open outside production and 404 in production. */
  metricsToken: string | null;
  /** OpenTelemetry tracing; null (OTEL_EXPORTER_OTLP_ENDPOINT unset) loads none of it. */
  tracing: TracingConfig | null;
  /** How long an import body read in the worker pool may take, waiting included; past it 503. */
  importParseTimeoutMs: number;
  /** A larger answer (its JSON body) is not cached. */
  cacheMaxAnswerBytes: number;
  /** Bytes of one user's cached answers at most (in Redis, and in each process's memory). */
  cacheUserBytes: number;
  /** Avatar renders that may wait for this process's one render at a time; past it 503. */
  avatarRenderQueueLimit: number;
}

export const OTLP_PROTOCOLS = ['http/protobuf', 'http/json'] as const;
export const TRACES_SAMPLERS = [
  'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio', 'always_on', 'always_off', 'traceidratio',
] as const;

/** The standard OTEL_* variables the service reads itself; the exporter reads OTEL_EXPORTER_OTLP_HEADERS and the like. */
export interface TracingConfig {
  /** OTEL_EXPORTER_OTLP_ENDPOINT: the collector's base URL (spans go to `/v1/traces` under it). */
  endpoint: string;
  protocol: (typeof OTLP_PROTOCOLS)[number];
  sampler: (typeof TRACES_SAMPLERS)[number];
  /** OTEL_TRACES_SAMPLER_ARG: the ratio of the `traceidratio` samplers. */
  samplerRatio: number;
  /** OTEL_BSP_SCHEDULE_DELAY: milliseconds between two exports of finished spans. */
  exportDelayMs: number;
}

export const PASSWORD_HASH_ALGORITHMS = ['bcrypt', 'argon2id'] as const;
export type PasswordHashAlgorithm = (typeof PASSWORD_HASH_ALGORITHMS)[number];

/** Every bad setting at once, each naming its variable. */
export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(problems.join('; '));
  }
}

type Env = Record<string, string | undefined>;

/** Reads variables, noting every bad one instead of stopping at the first; each returns a fallback when bad. */
class EnvReader {
  readonly problems: string[] = [];

  constructor(private readonly env: Env) {}

  text(name: string, fallback: string): string {
    return this.env[name] || fallback;
  }

  integer(name: string, fallback: number, min: number, max: number): number {
    const raw = this.env[name];
    if (raw === undefined || raw === '') return fallback;
    const value = Number(raw);
    if (!/^\d+$/.test(raw.trim()) || value < min || value > max) {
      this.problems.push(`${name} must be a whole number from ${min} to ${max}, got '${raw}'`);
      return fallback;
    }
    return value;
  }

  url(name: string, protocols: string[]): string | null {
    const raw = this.env[name];
    if (raw === undefined || raw === '') return null;
    let parsed: URL;
    try {
      parsed = new URL(raw);
    } catch {
      this.problems.push(`${name} must be a URL, got '${raw}'`);
      return null;
    }
    if (!protocols.includes(parsed.protocol)) {
      this.problems.push(`${name} must use ${protocols.join(' or ')}, got '${parsed.protocol}'`);
      return null;
    }
    return raw;
  }

  boolean(name: string, fallback: boolean): boolean {
    const raw = this.env[name];
    if (raw === undefined || raw === '') return fallback;
    if (raw === 'true' || raw === 'false') return raw === 'true';
    this.problems.push(`${name} must be true or false, got '${raw}'`);
    return fallback;
  }

  ratio(name: string, fallback: number): number {
    const raw = this.env[name];
    if (raw === undefined || raw === '') return fallback;
    const value = Number(raw);
    if (!/^\s*\d*\.?\d+\s*$/.test(raw) || value > 1) {
      this.problems.push(`${name} must be a number from 0 to 1, got '${raw}'`);
      return fallback;
    }
    return value;
  }

  oneOf<T extends string>(name: string, fallback: T, allowed: readonly T[]): T {
    const value = this.text(name, fallback);
    if ((allowed as readonly string[]).includes(value)) return value as T;
    this.problems.push(`${name} must be one of ${allowed.join(', ')}, got '${value}'`);
    return fallback;
  }
}

/** Names Fastify (proxy-addr) accepts for address ranges in `trustProxy`. */
const PROXY_RANGES = new Set(['loopback', 'linklocal', 'uniquelocal']);

/** An address, a CIDR (`10.0.0.0/8`) or a named range, as proxy-addr takes them. */
function isProxyAddress(entry: string): boolean {
  if (PROXY_RANGES.has(entry)) return true;
  const [address = '', bits, ...rest] = entry.split('/');
  const version = isIP(address);
  if (version === 0 || rest.length > 0) return false;
  return bits === undefined || (/^\d{1,3}$/.test(bits) && Number(bits) <= (version === 4 ? 32 : 128));
}

/**
 * TRUST_PROXY: `true`, `false`, a hop count (trust that many proxies in front), or trusted proxy
 * addresses, CIDRs and named ranges, comma-separated. Anything else is a problem named here rather
 * than an exception from inside Fastify.
 */
function trustProxy(read: EnvReader, raw: string | undefined): AppConfig['trustProxy'] {
  if (raw === undefined || raw === '' || raw === 'false') return false;
  if (raw === 'true') return true;
  if (/^\d+$/.test(raw)) {
    const hops = Number(raw);
    return (_address: string, hop: number) => hop < hops;
  }
  const bad = raw.split(',').map((entry) => entry.trim()).find((entry) => !isProxyAddress(entry));
  if (bad === undefined) return raw;
  read.problems.push(`TRUST_PROXY must be true, false, a hop count, or addresses, CIDRs or loopback/linklocal/uniquelocal, got '${bad}'`);
  return false;
}

/** Tracing settings when OTEL_EXPORTER_OTLP_ENDPOINT is set, else null. */
function tracing(read: EnvReader): TracingConfig | null {
  const endpoint = read.url('OTEL_EXPORTER_OTLP_ENDPOINT', ['http:', 'https:']);
  if (!endpoint) return null;
  return {
    endpoint,
    protocol: read.oneOf('OTEL_EXPORTER_OTLP_PROTOCOL', 'http/protobuf', OTLP_PROTOCOLS),
    sampler: read.oneOf('OTEL_TRACES_SAMPLER', 'parentbased_always_on', TRACES_SAMPLERS),
    samplerRatio: read.ratio('OTEL_TRACES_SAMPLER_ARG', 1),
    exportDelayMs: read.integer('OTEL_BSP_SCHEDULE_DELAY', 5_000, 0, 3_600_000),
  };
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

/** A JWT secret for development, made once and kept in the data folder so restarts keep sessions. */
async function developmentSecret(dataDir: string): Promise<string> {
  const file = path.join(dataDir, 'jwt-secret');
  const existing = await readFile(file, 'utf8').catch(() => '');
  if (existing.trim().length >= 32) return existing.trim();
  const secret = randomBytes(48).toString('base64url');
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  await writeFile(file, secret, { mode: 0o600 });
  return secret;
}

/** Secrets that appear in examples (ours and the usual ones): anyone who read them could sign tokens. */
const PLACEHOLDER_SECRET = /change.?me|replace.?(me|with)|placeholder|your.?secret|example/i;
const MIN_SECRET_BITS = 128;

/**
 * Bits of entropy of `secret` if each character were drawn at random with the frequency it has
 * (Shannon): an upper bound, so a low value surely means a guessable secret.
 */
function entropyBits(secret: string): number {
  const counts = new Map<string, number>();
  for (const character of secret) counts.set(character, (counts.get(character) ?? 0) + 1);
  const length = [...secret].length;
  let bits = 0;
  for (const count of counts.values()) bits -= count * Math.log2(count / length);
  return bits;
}

/** Why `secret` must not sign production tokens, or null. */
function weakSecret(secret: string): string | null {
  if (PLACEHOLDER_SECRET.test(secret)) return 'JWT_SECRET is a placeholder from an example; set it to the output of `openssl rand -base64 48`';
  const bits = Math.floor(entropyBits(secret));
  if (bits < MIN_SECRET_BITS) {
    return `JWT_SECRET is guessable (about ${bits} bits of entropy, at least ${MIN_SECRET_BITS} needed); set it to the output of \`openssl rand -base64 48\``;
  }
  return null;
}

/** Reads and validates the environment; throws a ConfigError naming every bad variable. */
export async function loadConfig(env: Env = process.env): Promise<AppConfig> {
  const read = new EnvReader(env);
  const nodeEnv = read.text('NODE_ENV', 'development');
  const port = read.integer('PORT', 3000, 0, 65535);
  const host = read.text('HOST', '127.0.0.1');
  const dataDir = path.resolve(read.text('DATA_DIR', '.data'));
  const logLevel = read.oneOf('LOG_LEVEL', 'info', LOG_LEVELS);

  let jwtSecret = env.JWT_SECRET ?? '';
  if (jwtSecret === '') {
    if (nodeEnv === 'production') read.problems.push('JWT_SECRET is required when NODE_ENV=production');
    else jwtSecret = await developmentSecret(dataDir);
  } else if (jwtSecret.length < 32) {
    read.problems.push('JWT_SECRET must be at least 32 characters');
  } else if (nodeEnv === 'production') {
    const weakness = weakSecret(jwtSecret);
    if (weakness) read.problems.push(weakness);
  }

  const publicBaseUrl = read.url('PUBLIC_BASE_URL', ['http:', 'https:']) ?? `http://${host}:${port}`;
  const mailFrom = read.text('MAIL_FROM', 'Contacts <no-reply@contacts.local>');
  if (!/^[^<>]*<?[^\s@<>]+@[^\s@<>]+>?$/.test(mailFrom)) read.problems.push(`MAIL_FROM must be an e-mail address, got '${mailFrom}'`);

  const metricsToken = read.text('METRICS_TOKEN', '') || null;
  if (metricsToken !== null && !/^[\x21-\x7e]{16,256}$/.test(metricsToken)) {
    read.problems.push('METRICS_TOKEN must be 16 to 256 printable characters without spaces');
  }

  const config: AppConfig = {
    nodeEnv,
    host,
    port,
    databaseUrl: read.url('DATABASE_URL', ['postgres:', 'postgresql:']),
    redisUrl: read.url('REDIS_URL', ['redis:', 'rediss:']),
    redisKeyPrefix: read.text('REDIS_KEY_PREFIX', 'contacts:'),
    redisCommandTimeoutMs: read.integer('REDIS_COMMAND_TIMEOUT_MS', 250, 1, 60_000),
    dataDir,
    jwtSecret,
    smtpUrl: read.url('SMTP_URL', ['smtp:', 'smtps:']),
    outboxDir: path.resolve(read.text('MAIL_OUTBOX_DIR', path.join(dataDir, 'outbox'))),
    mailFrom,
    publicBaseUrl: publicBaseUrl.replace(/\/+$/, ''),
    accessTokenTtl: read.integer('ACCESS_TOKEN_TTL', 900, 1, 86_400),
    refreshTokenTtl: read.integer('REFRESH_TOKEN_TTL', 604_800, 1, 31_536_000),
    verifyTokenTtl: read.integer('VERIFY_TOKEN_TTL', 604_800, 1, 31_536_000),
    resetTokenTtl: read.integer('RESET_TOKEN_TTL', 900, 1, 86_400),
    bcryptCost: read.integer('BCRYPT_COST', 12, 4, 15),
    trustProxy: trustProxy(read, env.TRUST_PROXY),
    logLevel,
    corsOrigins: read.text('CORS_ORIGINS', '').split(',').map((o) => o.trim()).filter(Boolean),
    rateLimitAnonPerMin: read.integer('RATE_LIMIT_ANON_PER_MIN', 20, 1, 1_000_000),
    rateLimitMePerMin: read.integer('RATE_LIMIT_ME_PER_MIN', 5, 1, 1_000_000),
    rateLimitImportPerMin: read.integer('RATE_LIMIT_IMPORT_PER_MIN', 10, 1, 1_000_000),
    rateLimitExportPerMin: read.integer('RATE_LIMIT_EXPORT_PER_MIN', 10, 1, 1_000_000),
    rateLimitSyncPerMin: read.integer('RATE_LIMIT_SYNC_PER_MIN', 120, 1, 1_000_000),
    rateLimitAvatarPerMin: read.integer('RATE_LIMIT_AVATAR_PER_MIN', 10, 1, 1_000_000),
    exportConcurrentPerUser: read.integer('EXPORT_CONCURRENT_PER_USER', 2, 1, 1000),
    exportConcurrentPerInstance: read.integer('EXPORT_CONCURRENT_PER_INSTANCE', 8, 1, 10_000),
    exportSpoolMaxBytes: read.integer('EXPORT_SPOOL_MAX_BYTES', 4_294_967_296, 1_048_576, 1_099_511_627_776),
    exportSendTimeoutMs: read.integer('EXPORT_SEND_TIMEOUT_MS', 30_000, 100, 3_600_000),
    contactsMaxPerUser: read.integer('CONTACTS_MAX_PER_USER', 100_000, 1, 10_000_000),
    shutdownTimeoutMs: read.integer('SHUTDOWN_TIMEOUT_MS', 10_000, 1, 600_000),
    syncTombstoneDays: read.integer('SYNC_TOMBSTONE_DAYS', 30, 1, 3650),
    passwordHash: read.oneOf('PASSWORD_HASH', 'bcrypt', PASSWORD_HASH_ALGORITHMS),
    argon2MemoryKib: read.integer('ARGON2_MEMORY_KIB', 19_456, 1024, 1_048_576),
    argon2TimeCost: read.integer('ARGON2_TIME_COST', 2, 1, 20),
    argon2Parallelism: read.integer('ARGON2_PARALLELISM', 1, 1, 16),
    passwordQueueLimit: read.integer('PASSWORD_QUEUE_LIMIT', 64, 1, 100_000),
    metricsEnabled: read.boolean('METRICS_ENABLED', true),
    metricsToken,
    tracing: tracing(read),
    importParseTimeoutMs: read.integer('IMPORT_PARSE_TIMEOUT_MS', 10_000, 1, 600_000),
    cacheMaxAnswerBytes: read.integer('CACHE_MAX_ANSWER_BYTES', 524_288, 0, 16_777_216),
    cacheUserBytes: read.integer('CACHE_USER_BYTES', 4_194_304, 0, 1_073_741_824),
    avatarRenderQueueLimit: read.integer('AVATAR_RENDER_QUEUE_LIMIT', 8, 0, 1000),
  };
  if (read.problems.length > 0) throw new ConfigError(read.problems);
  return config;
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
