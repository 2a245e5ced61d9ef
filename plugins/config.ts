import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { isIP } from 'node:net';
import path from 'node:path';
import type { Ajv } from 'ajv';
import envSchema from 'env-schema';
import fp from 'fastify-plugin';
import {
  type ConfigValues,
  OTLP_PROTOCOLS,
  PASSWORD_HASH_ALGORITHMS,
  requirement,
  TRACES_SAMPLERS,
  type VariableName,
  type VariableSpec,
  variables,
} from './config-schema.js';

/** Typed, validated settings; every field comes from one environment variable. */
export interface AppConfig {
  nodeEnv: string;
  host: string;
  port: number;
  /** Unset: embedded PostgreSQL (PGlite) in `dataDir`. */
  databaseUrl: string | null;
  /** Standbys of `databaseUrl` for uncached reads; empty when unset. */
  databaseReadUrls: string[];
  /** Unset: an in-process cache and per-instance rate-limit counters. */
  redisUrl: string | null;
  /** Seed nodes of a Redis Cluster, used instead of `redisUrl` (never both); null when unset. */
  redisClusterUrls: string[] | null;
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
  /** Register, login and reset requests a minute per client address (IPv6 per /56). */
  rateLimitPasswordPerMin: number;
  /** Wrong passwords for one account in the window before an address that sent enough of them is refused. */
  signInAccountFailures: number;
  /** How many of them one address must have sent to be refused. */
  signInAddressFailures: number;
  /** Verification mails, and reset mails, per recipient address and hour. */
  mailPerRecipientPerHour: number;
  /** Seconds from an account's first counted failure until its count starts again. */
  signInFailureWindowS: number;
  /** Per-user requests a minute of the `import`, `export`, `sync` (REST and CardDAV) and `avatar` buckets. */
  rateLimitImportPerMin: number;
  rateLimitExportPerMin: number;
  rateLimitSyncPerMin: number;
  rateLimitAvatarPerMin: number;
  /** App password creations a minute per user. */
  rateLimitAppPasswordPerMin: number;
  rateLimitAccountPerMin: number;
  /** Exports one user may have in flight (spooling or sending) in one instance; past it 429. */
  rateLimitMultigetPerMin: number;
  rateLimitCardPutPerMin: number;
  davStreamsPerUser: number;
  davStreamsPerInstance: number;
  exportConcurrentPerUser: number;
  /** Exports in flight in one instance; past it 503. */
  exportConcurrentPerInstance: number;
  /** Bytes of export spool files one instance holds at once; past it the export is 503. */
  exportSpoolMaxBytes: number;
  /** An export whose reader takes nothing for this long is cut, and its spool freed. */
  exportSendTimeoutMs: number;
  /** Contacts one user may have; a create past it is refused (409, or 507 over CardDAV). */
  contactsMaxPerUser: number;
  /** Octets of card text one user may store; a card PUT past it is 507. */
  cardsMaxBytesPerUser: number;
  /** Hours the answer of a write sent with an Idempotency-Key is sent again for the same key and request. */
  idempotencyKeyHours: number;
  /** Idempotency keys one user holds; past it the oldest are forgotten. */
  idempotencyKeysPerUser: number;
  /** Bytes of stored Idempotency-Key answers one user holds; past it the oldest are forgotten (never the newest). */
  idempotencyUserBytes: number;
  /** How long SIGTERM waits for requests in flight before the process exits anyway (non-zero). */
  shutdownTimeoutMs: number;
  /** Days deletions are remembered for incremental sync; older sync tokens are refused (410). */
  syncTombstoneDays: number;
  /** Owners with more contacts are promoted to large owners, whose short searches use the grams index. */
  largeOwnerContacts: number;
  /** The algorithm of new password hashes; stored hashes of the other one still verify and are rehashed at login. */
  passwordHash: PasswordHashAlgorithm;
  /** argon2id memory in KiB, passes and lanes (OWASP's first choice: 19456, 2, 1). */
  argon2MemoryKib: number;
  argon2TimeCost: number;
  argon2Parallelism: number;
  /** Password jobs that may wait for a worker thread; past it register, login and reset answer 503. */
  passwordQueueLimit: number;
  /** Of those, how many one client address may hold; past it that client's next is 503. */
  passwordQueuePerClient: number;
  /** Whether the service records metrics and serves /metrics (METRICS_ENABLED). */
  metricsEnabled: boolean;
  /** Bearer token /metrics requires; null leaves it open outside production and 404 in production. */
  metricsToken: string | null;
  /** OpenTelemetry tracing; null (OTEL_EXPORTER_OTLP_ENDPOINT unset) loads none of it. */
  tracing: TracingConfig | null;
  /** How long an import body read in the worker pool may take, waiting included; past it 503. */
  importParseTimeoutMs: number;
  /** Time for a request's head and body to arrive; past it 408 and the connection closes. */
  httpRequestTimeoutMs: number;
  /** statement_timeout of a request's statements (PostgreSQL only). */
  dbStatementTimeoutMs: number;
  /** statement_timeout an import's or export's transaction sets for itself. */
  dbBulkStatementTimeoutMs: number;
  /** Requests of one user using database connections at once, per instance. */
  dbUserConnections: number;
  /** Requests of one user waiting for those, per instance; past it 429. */
  dbUserWaiting: number;
  /** A larger answer (its JSON body) is not cached. */
  cacheMaxAnswerBytes: number;
  /** Bytes of one user's cached answers at most (in Redis, and in each process's memory). */
  cacheUserBytes: number;
  /** Avatar renders that may wait for this process's one render at a time; past it 503. */
  avatarRenderQueueLimit: number;
}

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

export type PasswordHashAlgorithm = (typeof PASSWORD_HASH_ALGORITHMS)[number];

/** Every bad setting at once, each naming its variable. */
export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(problems.join('; '));
  }
}

type Env = Record<string, string | undefined>;

const schema = { type: 'object', properties: variables, additionalProperties: false };
const names = Object.keys(variables) as VariableName[];

/** Schema keywords beyond JSON Schema's: `protocols` validates, the others only annotate (config-schema.ts). */
function withOurKeywords(ajv: Ajv): Ajv {
  ajv.addKeyword({
    keyword: 'protocols',
    type: 'string',
    schemaType: 'array',
    errors: false,
    validate: (protocols: string[], value: string) => URL.canParse(value) && protocols.includes(new URL(value).protocol),
  });
  ajv.addVocabulary(['mustBe', 'secret', 'onlyWith', 'docDefault', 'example']);
  return ajv;
}

/** The problem with `raw`, a value of `name` that failed the schema. */
function problem(name: VariableName, raw: string): string {
  const spec: VariableSpec = variables[name];
  const got = spec.secret ? '' : `, got '${raw}'`;
  if (spec.protocols && URL.canParse(raw)) return `${name} must use ${spec.protocols.join(' or ')}, got '${new URL(raw).protocol}'`;
  if (spec.protocols) return `${name} must be a URL${got}`;
  return `${name} must be ${requirement(spec)}${got}`;
}

/**
 * The environment validated against the schema, or the problems, one for each bad variable in the
 * schema's order. A blank value is the same as none (so `.env.example`'s `NAME=` lines mean the
 * default), and a variable whose `onlyWith` is unset is not read at all.
 */
function validate(env: Env): { values: ConfigValues | null; problems: string[] } {
  const given = (name: string) => (env[name]?.trim() ? env[name] : undefined);
  const data: Record<string, string> = {};
  for (const name of names) {
    const spec: VariableSpec = variables[name];
    const raw = given(name);
    if (raw !== undefined && (spec.onlyWith === undefined || given(spec.onlyWith) !== undefined)) data[name] = raw;
  }
  try {
    return { values: envSchema<ConfigValues>({ schema, data, env: false, ajv: { customOptions: withOurKeywords } }), problems: [] };
  } catch (error) {
    const failures = (error as { errors?: { instancePath: string }[] }).errors;
    if (!failures) throw error;
    const bad = new Set(failures.map((failure) => failure.instancePath.slice(1)));
    return { values: null, problems: names.filter((name) => bad.has(name)).map((name) => problem(name, data[name] ?? '')) };
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
 * TRUST_PROXY: `true` (not in production), `false`, a hop count (trust that many proxies in front), or trusted proxy
 * addresses, CIDRs and named ranges, comma-separated; undefined when it is none of these, so the
 * problem is named here rather than thrown from inside Fastify.
 */
function trustProxy(raw: string): AppConfig['trustProxy'] | undefined {
  if (raw === 'false') return false;
  if (raw === 'true') return true;
  if (/^\d+$/.test(raw)) {
    const hops = Number(raw);
    return (_address: string, hop: number) => hop < hops;
  }
  return raw.split(',').every((entry) => isProxyAddress(entry.trim())) ? raw : undefined;
}

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
  if (PLACEHOLDER_SECRET.test(secret))
    return 'JWT_SECRET is a placeholder from an example; set it to the output of `openssl rand -base64 48`';
  const bits = Math.floor(entropyBits(secret));
  if (bits < MIN_SECRET_BITS) {
    return `JWT_SECRET is guessable (about ${bits} bits of entropy, at least ${MIN_SECRET_BITS} needed); set it to the output of \`openssl rand -base64 48\``;
  }
  return null;
}

/** Reads and validates the environment; throws a ConfigError naming every bad variable. */
export async function loadConfig(env: Env = process.env): Promise<AppConfig> {
  const { values, problems } = validate(env);
  // What no JSON Schema says: checked on the raw values, so that they are reported with the others.
  const nodeEnv = env.NODE_ENV?.trim() || variables.NODE_ENV.default;
  const secret = env.JWT_SECRET?.trim() ? env.JWT_SECRET : undefined;
  if (secret === undefined && nodeEnv === 'production') problems.push('JWT_SECRET is required when NODE_ENV=production');
  if (secret !== undefined && secret.length >= variables.JWT_SECRET.minLength && nodeEnv === 'production') {
    const weakness = weakSecret(secret);
    if (weakness) problems.push(weakness);
  }
  const proxyList = env.TRUST_PROXY?.trim() ? env.TRUST_PROXY : variables.TRUST_PROXY.default;
  const proxies = trustProxy(proxyList);
  if (proxies === true && nodeEnv === 'production') {
    // Every client would choose its own address, and with it its rate-limit bucket, by sending X-Forwarded-For.
    problems.push(
      'TRUST_PROXY=true is refused when NODE_ENV=production (any client could pick its address with X-Forwarded-For); set the number of proxies in front (e.g. 1) or their addresses/CIDRs (e.g. 10.0.0.0/8)',
    );
  } else if (proxies === undefined) {
    const bad = proxyList
      .split(',')
      .map((entry) => entry.trim())
      .find((entry) => !isProxyAddress(entry));
    problems.push(`TRUST_PROXY must be ${requirement(variables.TRUST_PROXY)}, got '${bad}'`);
  }
  const redisCluster = env.REDIS_CLUSTER_URLS?.trim() ? env.REDIS_CLUSTER_URLS : undefined;
  const seedUrls = redisCluster?.split(',').map((url) => url.trim());
  if (values?.REDIS_CLUSTER_URLS !== undefined && !seedUrls?.every((url) => URL.canParse(url) && new URL(url).hostname !== '')) {
    problems.push(`REDIS_CLUSTER_URLS must be ${requirement(variables.REDIS_CLUSTER_URLS)}`);
  }
  const readUrls = env.DATABASE_READ_URLS?.trim() ? env.DATABASE_READ_URLS.split(',').map((url) => url.trim()) : [];
  if (values?.DATABASE_READ_URLS !== undefined && !readUrls.every((url) => URL.canParse(url) && new URL(url).hostname !== '')) {
    problems.push(`DATABASE_READ_URLS must be ${requirement(variables.DATABASE_READ_URLS)}`);
  }
  if (readUrls.length > 0 && !env.DATABASE_URL?.trim()) {
    problems.push('DATABASE_READ_URLS needs DATABASE_URL: the embedded database has no standbys');
  }
  if (redisCluster !== undefined && env.REDIS_URL?.trim()) {
    problems.push('REDIS_URL and REDIS_CLUSTER_URLS are both set: set REDIS_URL for one Redis, or REDIS_CLUSTER_URLS for a Redis Cluster');
  }
  if (redisCluster !== undefined && /[{}]/.test(env.REDIS_KEY_PREFIX ?? '')) {
    // A hash tag in the prefix would put every key in one slot, on one master.
    problems.push('REDIS_KEY_PREFIX must not contain { or } with REDIS_CLUSTER_URLS (a Redis Cluster would keep every key on one node)');
  }
  if (values === null || proxies === undefined || problems.length > 0) throw new ConfigError(problems);

  const dataDir = path.resolve(values.DATA_DIR);
  const publicBaseUrl = values.PUBLIC_BASE_URL ?? `http://${values.HOST}:${values.PORT}`;
  return {
    nodeEnv: values.NODE_ENV,
    host: values.HOST,
    port: values.PORT,
    databaseUrl: values.DATABASE_URL ?? null,
    databaseReadUrls: readUrls,
    redisUrl: values.REDIS_URL ?? null,
    redisClusterUrls: seedUrls ?? null,
    redisKeyPrefix: values.REDIS_KEY_PREFIX,
    redisCommandTimeoutMs: values.REDIS_COMMAND_TIMEOUT_MS,
    dataDir,
    jwtSecret: values.JWT_SECRET ?? (await developmentSecret(dataDir)),
    smtpUrl: values.SMTP_URL ?? null,
    outboxDir: path.resolve(values.MAIL_OUTBOX_DIR ?? path.join(dataDir, 'outbox')),
    mailFrom: values.MAIL_FROM,
    publicBaseUrl: publicBaseUrl.replace(/\/+$/, ''),
    accessTokenTtl: values.ACCESS_TOKEN_TTL,
    refreshTokenTtl: values.REFRESH_TOKEN_TTL,
    verifyTokenTtl: values.VERIFY_TOKEN_TTL,
    resetTokenTtl: values.RESET_TOKEN_TTL,
    bcryptCost: values.BCRYPT_COST,
    trustProxy: proxies,
    logLevel: values.LOG_LEVEL,
    corsOrigins: (values.CORS_ORIGINS ?? '')
      .split(',')
      .map((o) => o.trim())
      .filter(Boolean),
    rateLimitAnonPerMin: values.RATE_LIMIT_ANON_PER_MIN,
    rateLimitMePerMin: values.RATE_LIMIT_ME_PER_MIN,
    rateLimitPasswordPerMin: values.RATE_LIMIT_PASSWORD_PER_MIN,
    signInAccountFailures: values.SIGN_IN_ACCOUNT_FAILURES,
    signInAddressFailures: values.SIGN_IN_ADDRESS_FAILURES,
    mailPerRecipientPerHour: values.MAIL_PER_RECIPIENT_PER_HOUR,
    signInFailureWindowS: values.SIGN_IN_FAILURE_WINDOW_S,
    rateLimitImportPerMin: values.RATE_LIMIT_IMPORT_PER_MIN,
    rateLimitExportPerMin: values.RATE_LIMIT_EXPORT_PER_MIN,
    rateLimitSyncPerMin: values.RATE_LIMIT_SYNC_PER_MIN,
    rateLimitAvatarPerMin: values.RATE_LIMIT_AVATAR_PER_MIN,
    rateLimitAppPasswordPerMin: values.RATE_LIMIT_APP_PASSWORD_PER_MIN,
    rateLimitAccountPerMin: values.RATE_LIMIT_ACCOUNT_PER_MIN,
    rateLimitMultigetPerMin: values.RATE_LIMIT_MULTIGET_PER_MIN,
    rateLimitCardPutPerMin: values.RATE_LIMIT_CARD_PUT_PER_MIN,
    davStreamsPerUser: values.DAV_STREAMS_PER_USER,
    davStreamsPerInstance: values.DAV_STREAMS_PER_INSTANCE,
    exportConcurrentPerUser: values.EXPORT_CONCURRENT_PER_USER,
    exportConcurrentPerInstance: values.EXPORT_CONCURRENT_PER_INSTANCE,
    exportSpoolMaxBytes: values.EXPORT_SPOOL_MAX_BYTES,
    exportSendTimeoutMs: values.EXPORT_SEND_TIMEOUT_MS,
    contactsMaxPerUser: values.CONTACTS_MAX_PER_USER,
    cardsMaxBytesPerUser: values.CARDS_MAX_BYTES_PER_USER,
    idempotencyKeyHours: values.IDEMPOTENCY_KEY_HOURS,
    idempotencyKeysPerUser: values.IDEMPOTENCY_KEYS_PER_USER,
    idempotencyUserBytes: values.IDEMPOTENCY_USER_BYTES,
    shutdownTimeoutMs: values.SHUTDOWN_TIMEOUT_MS,
    syncTombstoneDays: values.SYNC_TOMBSTONE_DAYS,
    largeOwnerContacts: values.LARGE_OWNER_CONTACTS,
    passwordHash: values.PASSWORD_HASH,
    argon2MemoryKib: values.ARGON2_MEMORY_KIB,
    argon2TimeCost: values.ARGON2_TIME_COST,
    argon2Parallelism: values.ARGON2_PARALLELISM,
    passwordQueueLimit: values.PASSWORD_QUEUE_LIMIT,
    passwordQueuePerClient: values.PASSWORD_QUEUE_PER_CLIENT,
    metricsEnabled: values.METRICS_ENABLED,
    metricsToken: values.METRICS_TOKEN ?? null,
    tracing: values.OTEL_EXPORTER_OTLP_ENDPOINT
      ? {
          endpoint: values.OTEL_EXPORTER_OTLP_ENDPOINT,
          protocol: values.OTEL_EXPORTER_OTLP_PROTOCOL,
          sampler: values.OTEL_TRACES_SAMPLER,
          samplerRatio: values.OTEL_TRACES_SAMPLER_ARG,
          exportDelayMs: values.OTEL_BSP_SCHEDULE_DELAY,
        }
      : null,
    importParseTimeoutMs: values.IMPORT_PARSE_TIMEOUT_MS,
    httpRequestTimeoutMs: values.HTTP_REQUEST_TIMEOUT_MS,
    dbStatementTimeoutMs: values.DB_STATEMENT_TIMEOUT_MS,
    dbBulkStatementTimeoutMs: values.DB_BULK_STATEMENT_TIMEOUT_MS,
    dbUserConnections: values.DB_USER_CONNECTIONS,
    dbUserWaiting: values.DB_USER_WAITING,
    cacheMaxAnswerBytes: values.CACHE_MAX_ANSWER_BYTES,
    cacheUserBytes: values.CACHE_USER_BYTES,
    avatarRenderQueueLimit: values.AVATAR_RENDER_QUEUE_LIMIT,
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
