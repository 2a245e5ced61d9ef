/**
 * Every environment variable the service reads: its type, bounds, default and meaning. loadConfig
 * (config.ts) validates the environment against this with env-schema, and `npm run config:docs`
 * writes .env.example and the table of docs/configuration.md from it (`npm run config:check` fails
 * when either drifts).
 *
 * Adding a variable is one entry in `variables` below (in the order the docs list it), with
 *   - `type` and its bounds (`minimum`/`maximum`, `enum`, `pattern`, `minLength`, or `protocols`
 *     for a URL): every number needs both bounds;
 *   - `default` when there is one, or `docDefault` to say in the docs what happens without it;
 *   - `description`: one or two sentences for the docs table and .env.example;
 *   - `mustBe` when a `pattern` needs words for its error message, `secret` when the value must
 *     never be echoed, `example` when .env.example should show another value than the default;
 * then a field of AppConfig and the line that fills it in loadConfig. The error message, the docs
 * row and the .env.example line follow from the entry.
 */

/** One variable, as a JSON Schema property plus the annotations the docs and error messages read. */
export interface VariableSpec {
  readonly type: 'string' | 'integer' | 'number' | 'boolean';
  readonly description: string;
  readonly default?: string | number | boolean;
  readonly minimum?: number;
  readonly maximum?: number;
  readonly enum?: readonly string[];
  readonly pattern?: string;
  readonly minLength?: number;
  /** A URL with one of these protocols (`new URL(value).protocol`). */
  readonly protocols?: readonly string[];
  /** The requirement in words, for a `pattern`, which says nothing a reader could use. */
  readonly mustBe?: string;
  /** Never echoed in an error: it may be or carry a credential. */
  readonly secret?: boolean;
  /** Read (and validated) only when this other variable is set. */
  readonly onlyWith?: string;
  /** What the docs say in place of `default` when that is computed or absent (markdown). */
  readonly docDefault?: string;
  /** The value .env.example shows, when not the default. */
  readonly example?: string;
}

export const OTLP_PROTOCOLS = ['http/protobuf', 'http/json'] as const;
export const TRACES_SAMPLERS = [
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
  'always_on',
  'always_off',
  'traceidratio',
] as const;
export const PASSWORD_HASH_ALGORITHMS = ['bcrypt', 'argon2id'] as const;
const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

export const variables = {
  HOST: { type: 'string', default: '127.0.0.1', example: '0.0.0.0', description: 'Address to listen on.' },
  PORT: { type: 'integer', minimum: 0, maximum: 65_535, default: 3000, description: 'Port to listen on.' },
  DATABASE_URL: {
    type: 'string',
    protocols: ['postgres:', 'postgresql:'],
    secret: true,
    docDefault: 'unset',
    description:
      'PostgreSQL to use. Unset: embedded PostgreSQL (PGlite, a development dependency) in `DATA_DIR/pgdata`. compose.yaml sets it.',
  },
  DATABASE_READ_URLS: {
    type: 'string',
    pattern: '^\\s*postgres(ql)?://[^\\s,]+(\\s*,\\s*postgres(ql)?://[^\\s,]+)*\\s*$',
    mustBe: 'postgres:// or postgresql:// URLs, comma-separated',
    secret: true,
    docDefault: 'unset',
    description:
      'Streaming-replication standbys of `DATABASE_URL` (comma-separated) that serve uncached reads, never older than the reading user\'s own last write; requires `DATABASE_URL`. Unset: every statement goes to `DATABASE_URL`. docs/performance.md, "Read replicas".',
  },
  DB_STATEMENT_TIMEOUT_MS: {
    type: 'integer',
    minimum: 10,
    maximum: 600_000,
    default: 5000,
    description:
      "PostgreSQL's `statement_timeout` for a request's statements: one running longer is cancelled and the request is 503 with `Retry-After`. Imports, exports and account deletions use `DB_BULK_STATEMENT_TIMEOUT_MS`; migrations none. The embedded database cannot cancel a statement, so it has none.",
  },
  DB_BULK_STATEMENT_TIMEOUT_MS: {
    type: 'integer',
    minimum: 10,
    maximum: 3_600_000,
    default: 60_000,
    description: '`statement_timeout` of the statements of an import, an export or an account deletion (their transaction sets it).',
  },
  DB_USER_CONNECTIONS: {
    type: 'integer',
    minimum: 1,
    maximum: 1000,
    default: 3,
    description:
      "Requests of one user that may use database connections at once, per instance (of the pool's 10); the user's next ones wait for one of them, so another user's request never waits behind them.",
  },
  DB_USER_WAITING: {
    type: 'integer',
    minimum: 0,
    maximum: 100_000,
    default: 20,
    description:
      'Requests of one user that may wait for `DB_USER_CONNECTIONS`, per instance; past it the request is 429 with `Retry-After`.',
  },
  REDIS_URL: {
    type: 'string',
    protocols: ['redis:', 'rediss:'],
    secret: true,
    docDefault: 'unset',
    description: 'Redis to use. Unset: in-process LRU cache and per-instance rate-limit counters. compose.yaml sets it.',
  },
  REDIS_CLUSTER_URLS: {
    type: 'string',
    pattern: '^\\s*rediss?://[^\\s,]+(\\s*,\\s*rediss?://[^\\s,]+)*\\s*$',
    mustBe: 'redis:// or rediss:// URLs, comma-separated',
    secret: true,
    docDefault: 'unset',
    description:
      'Seed nodes of a Redis Cluster (`redis://host:port`, comma-separated; the credentials and TLS of the first apply to every node), used instead of `REDIS_URL`; setting both is an error. docs/performance.md, "Redis Cluster".',
  },
  REDIS_KEY_PREFIX: { type: 'string', default: 'contacts:', description: 'Prefix of every Redis key, so deployments can share one Redis.' },
  REDIS_COMMAND_TIMEOUT_MS: {
    type: 'integer',
    minimum: 1,
    maximum: 60_000,
    default: 250,
    description:
      'A Redis command slower than this fails, and the request goes on without Redis (a hung Redis costs each request at most this).',
  },
  DATA_DIR: {
    type: 'string',
    default: '.data',
    example: '/app/.data',
    description: 'Embedded database, development JWT secret and mail outbox.',
  },
  JWT_SECRET: {
    type: 'string',
    minLength: 32,
    secret: true,
    docDefault: 'generated',
    example: 'replace-with-the-output-of-openssl-rand-base64-48',
    description:
      'Signs the tokens; e.g. the output of `openssl rand -base64 48`. Unset: generated once and kept in `DATA_DIR/jwt-secret`. With `NODE_ENV=production` it is required, and placeholders from examples or guessable values (under 128 bits of entropy) are refused.',
  },
  SMTP_URL: {
    type: 'string',
    protocols: ['smtp:', 'smtps:'],
    secret: true,
    docDefault: 'unset',
    description: 'Mail server. Unset: mail goes to the outbox folder and the link is logged. compose.yaml sets it.',
  },
  MAIL_OUTBOX_DIR: { type: 'string', docDefault: '`DATA_DIR/outbox`', description: 'Where `.eml` files go without `SMTP_URL`.' },
  MAIL_FROM: {
    type: 'string',
    pattern: '^[^<>]*<?[^\\s@<>]+@[^\\s@<>]+>?$',
    mustBe: 'an e-mail address',
    default: 'Contacts <no-reply@contacts.local>',
    description: 'Sender of verification and reset mails.',
  },
  PUBLIC_BASE_URL: {
    type: 'string',
    protocols: ['http:', 'https:'],
    docDefault: '`http://HOST:PORT`',
    example: 'http://localhost:8080',
    description: 'Base of the links in mails.',
  },
  ACCESS_TOKEN_TTL: { type: 'integer', minimum: 1, maximum: 86_400, default: 900, description: 'Access token lifetime, seconds.' },
  REFRESH_TOKEN_TTL: {
    type: 'integer',
    minimum: 1,
    maximum: 31_536_000,
    default: 604_800,
    description: 'Refresh token lifetime, seconds.',
  },
  VERIFY_TOKEN_TTL: {
    type: 'integer',
    minimum: 1,
    maximum: 31_536_000,
    default: 604_800,
    description: 'E-mail verification link lifetime, seconds.',
  },
  RESET_TOKEN_TTL: { type: 'integer', minimum: 1, maximum: 86_400, default: 900, description: 'Password-reset link lifetime, seconds.' },
  BCRYPT_COST: { type: 'integer', minimum: 4, maximum: 15, default: 12, description: 'bcrypt cost of new hashes.' },
  PASSWORD_HASH: {
    type: 'string',
    enum: PASSWORD_HASH_ALGORITHMS,
    default: 'bcrypt',
    description:
      'Algorithm of new password hashes. Stored hashes of either verify; one of the other algorithm, or with another cost or other argon2id parameters, is rehashed at the next successful login.',
  },
  ARGON2_MEMORY_KIB: {
    type: 'integer',
    minimum: 1024,
    maximum: 1_048_576,
    default: 19_456,
    description: "argon2id memory per hash in KiB (the default is OWASP's first recommended setting, m=19 MiB, t=2, p=1).",
  },
  ARGON2_TIME_COST: { type: 'integer', minimum: 1, maximum: 20, default: 2, description: 'argon2id passes.' },
  ARGON2_PARALLELISM: { type: 'integer', minimum: 1, maximum: 16, default: 1, description: 'argon2id lanes.' },
  IMPORT_PARSE_TIMEOUT_MS: {
    type: 'integer',
    minimum: 1,
    maximum: 600_000,
    default: 10_000,
    description:
      'An import body over 8 KiB is read in a worker thread of its own; past this many ms after it arrives (waiting for the thread included) the import is 503 with `Retry-After`.',
  },
  CACHE_MAX_ANSWER_BYTES: {
    type: 'integer',
    minimum: 0,
    maximum: 16_777_216,
    default: 524_288,
    description: 'A cached read whose JSON body is larger is not cached.',
  },
  CACHE_USER_BYTES: {
    type: 'integer',
    minimum: 0,
    maximum: 1_073_741_824,
    default: 4_194_304,
    description:
      "One user's unexpired cached answers take at most this many bytes (in Redis, and in each process's memory); past it new answers are not cached.",
  },
  AVATAR_RENDER_QUEUE_LIMIT: {
    type: 'integer',
    minimum: 0,
    maximum: 1000,
    default: 8,
    description: 'Avatar uploads render one at a time per process; this many may wait, and the next is 503 with `Retry-After`.',
  },
  PASSWORD_QUEUE_LIMIT: {
    type: 'integer',
    minimum: 1,
    maximum: 100_000,
    default: 64,
    description:
      'Password hashes and checks that may wait for a worker thread (one thread per core). Beyond it register, login and reset answer 503 `Too many password checks in progress` with `Retry-After`: the seconds the waiting work takes at the mean time per hash so far (at least 1).',
  },
  PASSWORD_QUEUE_PER_CLIENT: {
    type: 'integer',
    minimum: 1,
    maximum: 100_000,
    default: 4,
    description:
      'Of those, how many one client address (IPv6 per /56) may hold; its next is 503 as above. The queue serves the client that has asked least first ([limits.md](limits.md#sign-in)).',
  },
  TRUST_PROXY: {
    type: 'string',
    mustBe: 'true, false, a hop count, or addresses, CIDRs or loopback/linklocal/uniquelocal',
    default: 'false',
    example: '1',
    description:
      "Take the client address from `X-Forwarded-For`, trusting that many proxies or those addresses (comma-separated). Set it behind a load balancer (compose.yaml has one: `1`), never when clients connect directly. `true` (trust every hop) is refused with `NODE_ENV=production`, where any client could pick its address. A forwarded value that is no IP address counts as the proxy's own address.",
  },
  LOG_LEVEL: { type: 'string', enum: LOG_LEVELS, default: 'info', description: 'The least severe level logged.' },
  CORS_ORIGINS: { type: 'string', docDefault: 'empty', description: 'Comma-separated origins allowed by CORS; empty turns CORS off.' },
  RATE_LIMIT_ANON_PER_MIN: {
    type: 'integer',
    minimum: 1,
    maximum: 1_000_000,
    default: 20,
    description: "Requests a minute per client address (IPv6 per /56) without a valid access token, logins included (the seed's limit).",
  },
  RATE_LIMIT_ME_PER_MIN: {
    type: 'integer',
    minimum: 1,
    maximum: 1_000_000,
    default: 5,
    description: '`GET /api/users/me` requests a minute per user.',
  },
  RATE_LIMIT_PASSWORD_PER_MIN: {
    type: 'integer',
    minimum: 1,
    maximum: 1_000_000,
    default: 20,
    description:
      'Register, login and reset-password requests a minute per client address (IPv6 per /56), a bucket of their own on top of the anonymous one; set it lower to hold the password operations tighter than the rest.',
  },
  SIGN_IN_ACCOUNT_FAILURES: {
    type: 'integer',
    minimum: 1,
    maximum: 1_000_000,
    default: 20,
    description:
      'Wrong passwords for one account within the window after which an address that sent `SIGN_IN_ADDRESS_FAILURES` of them gets 429 for that account.',
  },
  SIGN_IN_FAILURE_WINDOW_S: {
    type: 'integer',
    minimum: 1,
    maximum: 86_400,
    default: 900,
    description: "That window, from the account's first counted failure, in seconds.",
  },
  SIGN_IN_ADDRESS_FAILURES: {
    type: 'integer',
    minimum: 1,
    maximum: 1_000_000,
    default: 5,
    description:
      "Of the account's failures in that window, how many must have come from one client address (IPv6 per /56) before it is refused: an owner's typo or two while the account is under attack elsewhere locks nothing.",
  },
  MAIL_PER_RECIPIENT_PER_HOUR: {
    type: 'integer',
    minimum: 1,
    maximum: 1000,
    default: 3,
    description:
      'Verification mails, and reset mails, each at most this many an hour per recipient address (in Redis, shared by every instance); past it the request is answered as always and nothing is sent.',
  },
  RATE_LIMIT_IMPORT_PER_MIN: { type: 'integer', minimum: 1, maximum: 1_000_000, default: 10, description: 'Imports a minute per user.' },
  RATE_LIMIT_EXPORT_PER_MIN: { type: 'integer', minimum: 1, maximum: 1_000_000, default: 10, description: 'Exports a minute per user.' },
  RATE_LIMIT_SYNC_PER_MIN: {
    type: 'integer',
    minimum: 1,
    maximum: 1_000_000,
    default: 120,
    description:
      'Sync pages a minute per user: `GET /api/contacts/sync` and CardDAV whole-book reads (sync-collection, PROPFIND Depth 1 of the book, addressbook-query) together.',
  },
  RATE_LIMIT_AVATAR_PER_MIN: {
    type: 'integer',
    minimum: 1,
    maximum: 1_000_000,
    default: 10,
    description: 'Avatar uploads a minute per user.',
  },
  RATE_LIMIT_APP_PASSWORD_PER_MIN: {
    type: 'integer',
    minimum: 1,
    maximum: 1_000_000,
    default: 5,
    description: 'App password creations a minute per user (each checks the account password).',
  },
  RATE_LIMIT_ACCOUNT_PER_MIN: {
    type: 'integer',
    minimum: 1,
    maximum: 1_000_000,
    default: 5,
    description: 'Account deletions and password changes a minute per user, together (each checks the account password).',
  },
  RATE_LIMIT_MULTIGET_PER_MIN: {
    type: 'integer',
    minimum: 1,
    maximum: 1_000_000,
    default: 600,
    description: 'CardDAV addressbook-multiget REPORTs a minute per user (each names at most 10,000 hrefs).',
  },
  RATE_LIMIT_CARD_PUT_PER_MIN: {
    type: 'integer',
    minimum: 1,
    maximum: 1_000_000,
    default: 600,
    description: 'CardDAV card PUTs a minute per user.',
  },
  DAV_STREAMS_PER_USER: {
    type: 'integer',
    minimum: 1,
    maximum: 1000,
    default: 8,
    description:
      'CardDAV multistatus answers written batch by batch (multiget, sync-collection, PROPFIND Depth 1 of the book, addressbook-query) one user may have in flight per instance; the next is 429.',
  },
  DAV_STREAMS_PER_INSTANCE: {
    type: 'integer',
    minimum: 1,
    maximum: 10_000,
    default: 64,
    description: 'CardDAV multistatus answers written batch by batch in flight per instance, all users together; the next is 503.',
  },
  EXPORT_CONCURRENT_PER_USER: {
    type: 'integer',
    minimum: 1,
    maximum: 1000,
    default: 2,
    description: 'Exports one user may have in flight (written or being sent) per instance; the next is 429.',
  },
  EXPORT_CONCURRENT_PER_INSTANCE: {
    type: 'integer',
    minimum: 1,
    maximum: 10_000,
    default: 8,
    description: 'Exports in flight per instance; the next is 503 with `Retry-After`.',
  },
  EXPORT_SPOOL_MAX_BYTES: {
    type: 'integer',
    minimum: 1_048_576,
    maximum: 1_099_511_627_776,
    default: 4_294_967_296,
    description: 'Bytes of export spool files (in the temporary directory) an instance holds at once; an export that would pass it is 503.',
  },
  EXPORT_SEND_TIMEOUT_MS: {
    type: 'integer',
    minimum: 100,
    maximum: 3_600_000,
    default: 30_000,
    description: 'An export whose client takes no bytes for this long is cut and its spool freed.',
  },
  CONTACTS_MAX_PER_USER: {
    type: 'integer',
    minimum: 1,
    maximum: 10_000_000,
    default: 100_000,
    description: 'Contacts one user may have; a create past it is 409 (507 over CardDAV), an import that would pass it creates nothing.',
  },
  CARDS_MAX_BYTES_PER_USER: {
    type: 'integer',
    minimum: 1024,
    maximum: 1_099_511_627_776,
    default: 268_435_456,
    description:
      'Octets of card text one user may store over CardDAV (the cards as their clients sent them); a card PUT that would pass it is 507 with `DAV:quota-not-exceeded`.',
  },
  IDEMPOTENCY_KEY_HOURS: {
    type: 'integer',
    minimum: 24,
    maximum: 720,
    default: 24,
    description:
      'Hours the answer of a write sent with an `Idempotency-Key` is kept: within them the same key and request get it again, after them the request writes again.',
  },
  IDEMPOTENCY_KEYS_PER_USER: {
    type: 'integer',
    minimum: 1,
    maximum: 10_000_000,
    default: 10_000,
    description: "`Idempotency-Key`s one user holds; past it that user's oldest are forgotten first (no write is refused for it).",
  },
  IDEMPOTENCY_USER_BYTES: {
    type: 'integer',
    minimum: 0,
    maximum: 1_073_741_824,
    default: 33_554_432,
    description:
      "Bytes of stored `Idempotency-Key` answers one user holds; past it that user's oldest keys are forgotten first, never the newest.",
  },
  NODE_ENV: {
    type: 'string',
    default: 'development',
    example: 'production',
    description: '`production` requires a strong `JWT_SECRET` and keeps live links out of the logs.',
  },
  SYNC_TOMBSTONE_DAYS: {
    type: 'integer',
    minimum: 1,
    maximum: 3650,
    default: 30,
    description: 'Days deleted contacts are remembered for incremental sync; an older sync token is 410 and the client starts a full sync.',
  },
  LARGE_OWNER_CONTACTS: {
    type: 'integer',
    minimum: 1,
    maximum: 1_000_000_000,
    default: 50_000,
    description:
      'An owner with more contacts than this is promoted in the background to a large owner, whose short searches use the grams index ([performance.md](performance.md)).',
  },
  HTTP_REQUEST_TIMEOUT_MS: {
    type: 'integer',
    minimum: 1000,
    maximum: 3_600_000,
    default: 60_000,
    description:
      'A request whose header and body have not all arrived this many ms after it started is answered 408 and its connection closed (checked every second); headers alone get at most 60 s. 60 s lets a 10 MiB import through at 175 KB/s.',
  },
  SHUTDOWN_TIMEOUT_MS: {
    type: 'integer',
    minimum: 1,
    maximum: 600_000,
    default: 10_000,
    description: 'On SIGTERM/SIGINT, how long requests in flight may take to finish; past it the process exits with code 1 anyway.',
  },
  METRICS_ENABLED: {
    type: 'boolean',
    default: true,
    description: "`false`: no request histogram, no process metrics, and `/metrics` is 404 (the benchmark's metrics-off side).",
  },
  METRICS_TOKEN: {
    type: 'string',
    pattern: '^[\\x21-\\x7e]{16,256}$',
    mustBe: '16 to 256 printable characters without spaces',
    secret: true,
    docDefault: 'unset',
    description:
      '`/metrics` then needs `Authorization: Bearer <METRICS_TOKEN>` (e.g. `openssl rand -hex 32`). Unset, `/metrics` is open, except with `NODE_ENV=production`, where it is 404.',
  },
  OTEL_EXPORTER_OTLP_ENDPOINT: {
    type: 'string',
    protocols: ['http:', 'https:'],
    docDefault: 'unset',
    description:
      "An OTLP/HTTP collector's base URL (e.g. `http://otel-collector:4318`): traces each request with OpenTelemetry. Unset, tracing is off, none of the SDK is loaded, and the other `OTEL_*` variables are not read.",
  },
  OTEL_EXPORTER_OTLP_PROTOCOL: {
    type: 'string',
    enum: OTLP_PROTOCOLS,
    default: 'http/protobuf',
    onlyWith: 'OTEL_EXPORTER_OTLP_ENDPOINT',
    description: 'How spans are encoded.',
  },
  OTEL_TRACES_SAMPLER: {
    type: 'string',
    enum: TRACES_SAMPLERS,
    default: 'parentbased_always_on',
    onlyWith: 'OTEL_EXPORTER_OTLP_ENDPOINT',
    description: 'Which requests are traced.',
  },
  OTEL_TRACES_SAMPLER_ARG: {
    type: 'number',
    minimum: 0,
    maximum: 1,
    default: 1,
    onlyWith: 'OTEL_EXPORTER_OTLP_ENDPOINT',
    description: 'The ratio of the `traceidratio` samplers.',
  },
  OTEL_BSP_SCHEDULE_DELAY: {
    type: 'integer',
    minimum: 0,
    maximum: 3_600_000,
    default: 5000,
    onlyWith: 'OTEL_EXPORTER_OTLP_ENDPOINT',
    description:
      'Milliseconds between two exports of finished spans. The exporter reads the other standard `OTEL_*` variables itself (docs/operations.md, Traces).',
  },
} as const satisfies Record<string, VariableSpec>;

export type VariableName = keyof typeof variables;

type ValueOf<S> = S extends { readonly enum: readonly (infer E)[] }
  ? E
  : S extends { readonly type: 'integer' | 'number' }
    ? number
    : S extends { readonly type: 'boolean' }
      ? boolean
      : string;

/** The environment after validation: numbers and booleans converted, defaults filled in, unset ones undefined. */
export type ConfigValues = {
  readonly [K in VariableName]: (typeof variables)[K] extends { readonly default: unknown }
    ? ValueOf<(typeof variables)[K]>
    : ValueOf<(typeof variables)[K]> | undefined;
};

/** What a value must be, in words: error messages and the docs' table say it alike. */
export function requirement(spec: VariableSpec): string {
  if (spec.mustBe) return spec.mustBe;
  if (spec.enum) return `one of ${spec.enum.join(', ')}`;
  if (spec.protocols) return `a URL with ${spec.protocols.join(' or ')}`;
  if (spec.type === 'integer') return `a whole number from ${spec.minimum} to ${spec.maximum}`;
  if (spec.type === 'number') return `a number from ${spec.minimum} to ${spec.maximum}`;
  if (spec.type === 'boolean') return 'true or false';
  if (spec.minLength) return `at least ${spec.minLength} characters`;
  return 'any text';
}
