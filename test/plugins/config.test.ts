import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import t from 'tap';
import { ConfigError, loadConfig } from '../../plugins/config.js';
import { decodeClaims, loggedInUser } from '../auth/accounts.js';
import { build, TEST_JWT_SECRET } from '../helper.js';

async function tempDir(t: { teardown(fn: () => unknown): void }): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), 'contacts-config-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

t.test('defaults', async (t) => {
  const dataDir = await tempDir(t);
  const config = await loadConfig({ DATA_DIR: dataDir, JWT_SECRET: TEST_JWT_SECRET });
  t.match(config, {
    nodeEnv: 'development',
    host: '127.0.0.1',
    port: 3000,
    databaseUrl: null,
    redisUrl: null,
    redisClusterUrls: null,
    databaseReadUrls: [],
    smtpUrl: null,
    dataDir,
    outboxDir: path.join(dataDir, 'outbox'),
    publicBaseUrl: 'http://127.0.0.1:3000',
    accessTokenTtl: 900,
    refreshTokenTtl: 604_800,
    verifyTokenTtl: 604_800,
    resetTokenTtl: 900,
    bcryptCost: 12,
    trustProxy: false,
    logLevel: 'info',
    corsOrigins: [],
    rateLimitAnonPerMin: 20,
    rateLimitMePerMin: 5,
    rateLimitImportPerMin: 10,
    rateLimitExportPerMin: 10,
    rateLimitSyncPerMin: 120,
    rateLimitAvatarPerMin: 10,
    exportConcurrentPerUser: 2,
    exportConcurrentPerInstance: 8,
    exportSpoolMaxBytes: 4_294_967_296,
    exportSendTimeoutMs: 30_000,
    contactsMaxPerUser: 100_000,
    cardsMaxBytesPerUser: 268_435_456,
    shutdownTimeoutMs: 10_000,
    passwordHash: 'bcrypt',
    argon2MemoryKib: 19_456,
    argon2TimeCost: 2,
    argon2Parallelism: 1,
    passwordQueueLimit: 64,
  });
});

t.test('every variable is read', async (t) => {
  const dataDir = await tempDir(t);
  const config = await loadConfig({
    NODE_ENV: 'production',
    HOST: '0.0.0.0',
    PORT: '8080',
    DATA_DIR: dataDir,
    DATABASE_URL: 'postgres://u:p@db:5432/contacts',
    REDIS_URL: 'redis://cache:6379',
    JWT_SECRET: TEST_JWT_SECRET,
    SMTP_URL: 'smtp://mail:1025',
    MAIL_FROM: 'Team <team@example.com>',
    PUBLIC_BASE_URL: 'https://contacts.example.com/',
    ACCESS_TOKEN_TTL: '60',
    REFRESH_TOKEN_TTL: '3600',
    BCRYPT_COST: '10',
    TRUST_PROXY: '10.0.0.0/8',
    LOG_LEVEL: 'warn',
    CORS_ORIGINS: 'https://a.example, https://b.example',
    RATE_LIMIT_ANON_PER_MIN: '100',
    RATE_LIMIT_ME_PER_MIN: '7',
    RATE_LIMIT_IMPORT_PER_MIN: '11',
    RATE_LIMIT_EXPORT_PER_MIN: '12',
    RATE_LIMIT_SYNC_PER_MIN: '130',
    RATE_LIMIT_AVATAR_PER_MIN: '13',
    EXPORT_CONCURRENT_PER_USER: '3',
    EXPORT_CONCURRENT_PER_INSTANCE: '9',
    EXPORT_SPOOL_MAX_BYTES: '1048576',
    EXPORT_SEND_TIMEOUT_MS: '5000',
    CONTACTS_MAX_PER_USER: '500',
    SHUTDOWN_TIMEOUT_MS: '2500',
    PASSWORD_HASH: 'argon2id',
    ARGON2_MEMORY_KIB: '47104',
    ARGON2_TIME_COST: '1',
    ARGON2_PARALLELISM: '2',
    PASSWORD_QUEUE_LIMIT: '200',
    PASSWORD_QUEUE_PER_CLIENT: '6',
    RATE_LIMIT_PASSWORD_PER_MIN: '9',
    SIGN_IN_ACCOUNT_FAILURES: '12',
    SIGN_IN_FAILURE_WINDOW_S: '600',
    IMPORT_PARSE_TIMEOUT_MS: '4000',
    CACHE_MAX_ANSWER_BYTES: '65536',
    CACHE_USER_BYTES: '1048576',
    AVATAR_RENDER_QUEUE_LIMIT: '0',
  });
  t.match(config, {
    nodeEnv: 'production',
    host: '0.0.0.0',
    port: 8080,
    databaseUrl: 'postgres://u:p@db:5432/contacts',
    redisUrl: 'redis://cache:6379',
    jwtSecret: TEST_JWT_SECRET,
    smtpUrl: 'smtp://mail:1025',
    mailFrom: 'Team <team@example.com>',
    publicBaseUrl: 'https://contacts.example.com',
    accessTokenTtl: 60,
    refreshTokenTtl: 3600,
    bcryptCost: 10,
    trustProxy: '10.0.0.0/8',
    logLevel: 'warn',
    corsOrigins: ['https://a.example', 'https://b.example'],
    rateLimitAnonPerMin: 100,
    rateLimitMePerMin: 7,
    rateLimitImportPerMin: 11,
    rateLimitExportPerMin: 12,
    rateLimitSyncPerMin: 130,
    rateLimitAvatarPerMin: 13,
    exportConcurrentPerUser: 3,
    exportConcurrentPerInstance: 9,
    exportSpoolMaxBytes: 1_048_576,
    exportSendTimeoutMs: 5000,
    contactsMaxPerUser: 500,
    shutdownTimeoutMs: 2500,
    passwordHash: 'argon2id',
    argon2MemoryKib: 47_104,
    argon2TimeCost: 1,
    argon2Parallelism: 2,
    passwordQueueLimit: 200,
    passwordQueuePerClient: 6,
    rateLimitPasswordPerMin: 9,
    signInAccountFailures: 12,
    signInFailureWindowS: 600,
    importParseTimeoutMs: 4000,
    cacheMaxAnswerBytes: 65_536,
    cacheUserBytes: 1_048_576,
    avatarRenderQueueLimit: 0,
  });
});

t.test('a bad value stops loadConfig with a message naming the variable', async (t) => {
  const dataDir = await tempDir(t);
  const base = { DATA_DIR: dataDir, JWT_SECRET: TEST_JWT_SECRET };
  const cases: [Record<string, string>, string, RegExp][] = [
    [{ PORT: 'abc' }, 'PORT', /^PORT must be a whole number from 0 to 65535, got 'abc'$/],
    [{ PORT: '70000' }, 'PORT', /^PORT /],
    [{ PORT: '-1' }, 'PORT', /^PORT /],
    [{ PORT: '80.5' }, 'PORT', /^PORT /],
    [{ NODE_ENV: 'production', JWT_SECRET: '' }, 'JWT_SECRET', /^JWT_SECRET is required when NODE_ENV=production$/],
    [{ JWT_SECRET: 'too-short' }, 'JWT_SECRET', /^JWT_SECRET must be at least 32 characters$/],
    [{ DATABASE_URL: 'mysql://db/contacts' }, 'DATABASE_URL', /^DATABASE_URL must use postgres: or postgresql:/],
    [{ DATABASE_URL: 'not a url' }, 'DATABASE_URL', /^DATABASE_URL must be a URL/],
    [{ REDIS_URL: 'http://cache' }, 'REDIS_URL', /^REDIS_URL /],
    [{ SMTP_URL: 'mail.example.com' }, 'SMTP_URL', /^SMTP_URL /],
    [{ PUBLIC_BASE_URL: 'ftp://example.com' }, 'PUBLIC_BASE_URL', /^PUBLIC_BASE_URL /],
    [{ MAIL_FROM: 'nobody' }, 'MAIL_FROM', /^MAIL_FROM /],
    [{ SHUTDOWN_TIMEOUT_MS: '0' }, 'SHUTDOWN_TIMEOUT_MS', /^SHUTDOWN_TIMEOUT_MS must be a whole number from 1 to 600000, got '0'$/],
    [{ ACCESS_TOKEN_TTL: '0' }, 'ACCESS_TOKEN_TTL', /^ACCESS_TOKEN_TTL /],
    [{ REFRESH_TOKEN_TTL: 'week' }, 'REFRESH_TOKEN_TTL', /^REFRESH_TOKEN_TTL /],
    [{ BCRYPT_COST: '3' }, 'BCRYPT_COST', /^BCRYPT_COST must be a whole number from 4 to 15, got '3'$/],
    [{ BCRYPT_COST: '16' }, 'BCRYPT_COST', /^BCRYPT_COST /],
    [{ LOG_LEVEL: 'loud' }, 'LOG_LEVEL', /^LOG_LEVEL /],
    [{ RATE_LIMIT_ANON_PER_MIN: '0' }, 'RATE_LIMIT_ANON_PER_MIN', /^RATE_LIMIT_ANON_PER_MIN /],
    [{ RATE_LIMIT_ME_PER_MIN: 'five' }, 'RATE_LIMIT_ME_PER_MIN', /^RATE_LIMIT_ME_PER_MIN /],
    [
      { RATE_LIMIT_IMPORT_PER_MIN: '0' },
      'RATE_LIMIT_IMPORT_PER_MIN',
      /^RATE_LIMIT_IMPORT_PER_MIN must be a whole number from 1 to 1000000, got '0'$/,
    ],
    [{ RATE_LIMIT_EXPORT_PER_MIN: 'ten' }, 'RATE_LIMIT_EXPORT_PER_MIN', /^RATE_LIMIT_EXPORT_PER_MIN /],
    [{ RATE_LIMIT_SYNC_PER_MIN: '-1' }, 'RATE_LIMIT_SYNC_PER_MIN', /^RATE_LIMIT_SYNC_PER_MIN /],
    [{ RATE_LIMIT_AVATAR_PER_MIN: '1000001' }, 'RATE_LIMIT_AVATAR_PER_MIN', /^RATE_LIMIT_AVATAR_PER_MIN /],
    [
      { EXPORT_CONCURRENT_PER_USER: '0' },
      'EXPORT_CONCURRENT_PER_USER',
      /^EXPORT_CONCURRENT_PER_USER must be a whole number from 1 to 1000, got '0'$/,
    ],
    [
      { EXPORT_CONCURRENT_PER_INSTANCE: '0' },
      'EXPORT_CONCURRENT_PER_INSTANCE',
      /^EXPORT_CONCURRENT_PER_INSTANCE must be a whole number from 1 to 10000, got '0'$/,
    ],
    [
      { EXPORT_SPOOL_MAX_BYTES: '1048575' },
      'EXPORT_SPOOL_MAX_BYTES',
      /^EXPORT_SPOOL_MAX_BYTES must be a whole number from 1048576 to 1099511627776, got '1048575'$/,
    ],
    [
      { EXPORT_SEND_TIMEOUT_MS: '99' },
      'EXPORT_SEND_TIMEOUT_MS',
      /^EXPORT_SEND_TIMEOUT_MS must be a whole number from 100 to 3600000, got '99'$/,
    ],
    [{ CONTACTS_MAX_PER_USER: '0' }, 'CONTACTS_MAX_PER_USER', /^CONTACTS_MAX_PER_USER must be a whole number from 1 to 10000000, got '0'$/],
    [{ PASSWORD_HASH: 'argon2' }, 'PASSWORD_HASH', /^PASSWORD_HASH must be one of bcrypt, argon2id, got 'argon2'$/],
    [{ PASSWORD_HASH: 'Bcrypt' }, 'PASSWORD_HASH', /^PASSWORD_HASH /],
    [{ ARGON2_MEMORY_KIB: '1023' }, 'ARGON2_MEMORY_KIB', /^ARGON2_MEMORY_KIB must be a whole number from 1024 to 1048576, got '1023'$/],
    [{ ARGON2_MEMORY_KIB: '19MiB' }, 'ARGON2_MEMORY_KIB', /^ARGON2_MEMORY_KIB /],
    [{ ARGON2_TIME_COST: '0' }, 'ARGON2_TIME_COST', /^ARGON2_TIME_COST must be a whole number from 1 to 20, got '0'$/],
    [{ ARGON2_PARALLELISM: '17' }, 'ARGON2_PARALLELISM', /^ARGON2_PARALLELISM must be a whole number from 1 to 16, got '17'$/],
    [{ PASSWORD_QUEUE_LIMIT: '0' }, 'PASSWORD_QUEUE_LIMIT', /^PASSWORD_QUEUE_LIMIT must be a whole number from 1 to 100000, got '0'$/],
    [{ PASSWORD_QUEUE_LIMIT: 'unbounded' }, 'PASSWORD_QUEUE_LIMIT', /^PASSWORD_QUEUE_LIMIT /],
    [
      { IMPORT_PARSE_TIMEOUT_MS: '0' },
      'IMPORT_PARSE_TIMEOUT_MS',
      /^IMPORT_PARSE_TIMEOUT_MS must be a whole number from 1 to 600000, got '0'$/,
    ],
    [
      { CACHE_MAX_ANSWER_BYTES: '16777217' },
      'CACHE_MAX_ANSWER_BYTES',
      /^CACHE_MAX_ANSWER_BYTES must be a whole number from 0 to 16777216, got '16777217'$/,
    ],
    [{ CACHE_USER_BYTES: '4 MiB' }, 'CACHE_USER_BYTES', /^CACHE_USER_BYTES /],
    [
      { AVATAR_RENDER_QUEUE_LIMIT: '1001' },
      'AVATAR_RENDER_QUEUE_LIMIT',
      /^AVATAR_RENDER_QUEUE_LIMIT must be a whole number from 0 to 1000, got '1001'$/,
    ],
    [
      { PASSWORD_QUEUE_PER_CLIENT: '0' },
      'PASSWORD_QUEUE_PER_CLIENT',
      /^PASSWORD_QUEUE_PER_CLIENT must be a whole number from 1 to 100000, got '0'$/,
    ],
    [
      { RATE_LIMIT_PASSWORD_PER_MIN: '0' },
      'RATE_LIMIT_PASSWORD_PER_MIN',
      /^RATE_LIMIT_PASSWORD_PER_MIN must be a whole number from 1 to 1000000, got '0'$/,
    ],
    [{ SIGN_IN_ACCOUNT_FAILURES: 'ten' }, 'SIGN_IN_ACCOUNT_FAILURES', /^SIGN_IN_ACCOUNT_FAILURES /],
    [
      { SIGN_IN_FAILURE_WINDOW_S: '86401' },
      'SIGN_IN_FAILURE_WINDOW_S',
      /^SIGN_IN_FAILURE_WINDOW_S must be a whole number from 1 to 86400, got '86401'$/,
    ],
  ];
  for (const [env, name, message] of cases) {
    const error = await loadConfig({ ...base, ...env }).then(
      () => null,
      (e: unknown) => e,
    );
    t.type(error, ConfigError, `${name}=${Object.values(env)[0]} is refused`);
    t.match((error as Error | null)?.message, message, `${name} is named`);
  }
});

t.test('every bad variable is reported at once', async (t) => {
  const dataDir = await tempDir(t);
  const error = await loadConfig({
    DATA_DIR: dataDir,
    PORT: 'abc',
    JWT_SECRET: 'short',
    LOG_LEVEL: 'loud',
    REDIS_URL: 'http://cache',
  }).then(
    () => null,
    (e: unknown) => e,
  );
  t.type(error, ConfigError);
  t.same(
    (error as ConfigError).problems,
    [
      "PORT must be a whole number from 0 to 65535, got 'abc'",
      "REDIS_URL must use redis: or rediss:, got 'http:'",
      'JWT_SECRET must be at least 32 characters',
      "LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent, got 'loud'",
    ],
    'in the order of the schema (and of docs/configuration.md)',
  );
});

t.test('a blank value is the same as none: the default', async (t) => {
  const dataDir = await tempDir(t);
  const config = await loadConfig({
    DATA_DIR: dataDir,
    JWT_SECRET: TEST_JWT_SECRET,
    PORT: ' ',
    HOST: '',
    METRICS_ENABLED: '',
    TRUST_PROXY: '  ',
  });
  t.match(config, { port: 3000, host: '127.0.0.1', metricsEnabled: true, trustProxy: false });
});

t.test('numbers are read as docs/configuration.md says: as Number() reads them', async (t) => {
  const dataDir = await tempDir(t);
  for (const port of ['3000', ' 3000 ', '3e3', '0xbb8']) {
    t.equal((await loadConfig({ DATA_DIR: dataDir, JWT_SECRET: TEST_JWT_SECRET, PORT: port })).port, 3000, `PORT=${JSON.stringify(port)}`);
  }
});

t.test('credentials are never echoed in a problem', async (t) => {
  const dataDir = await tempDir(t);
  const problems = async (env: Record<string, string>) =>
    (
      (await loadConfig({ DATA_DIR: dataDir, JWT_SECRET: TEST_JWT_SECRET, ...env }).then(
        () => null,
        (e: unknown) => e,
      )) as ConfigError
    ).problems;
  t.strictSame(await problems({ DATABASE_URL: 'postgres//contacts:hunter2@db/contacts' }), ['DATABASE_URL must be a URL']);
  t.strictSame(await problems({ REDIS_URL: 'http://:hunter2@cache' }), ["REDIS_URL must use redis: or rediss:, got 'http:'"]);
  t.strictSame(await problems({ METRICS_TOKEN: 'hunter2 hunter2 hunter2' }), [
    'METRICS_TOKEN must be 16 to 256 printable characters without spaces',
  ]);
  t.strictSame(await problems({ JWT_SECRET: 'hunter2' }), ['JWT_SECRET must be at least 32 characters']);
});

t.test('REDIS_CLUSTER_URLS: seed nodes of a Redis Cluster, never together with REDIS_URL', async (t) => {
  const dataDir = await tempDir(t);
  const base = { DATA_DIR: dataDir, JWT_SECRET: TEST_JWT_SECRET };
  const config = await loadConfig({ ...base, REDIS_CLUSTER_URLS: ' redis://:s3cret@cache-a:7000 ,rediss://cache-b ' });
  t.same(config.redisClusterUrls, ['redis://:s3cret@cache-a:7000', 'rediss://cache-b']);
  t.equal(config.redisUrl, null);
  const problems = async (env: Record<string, string>) =>
    (
      (await loadConfig({ ...base, ...env }).then(
        () => null,
        (e: unknown) => e,
      )) as ConfigError | null
    )?.problems;
  t.strictSame(await problems({ REDIS_URL: 'redis://cache:6379', REDIS_CLUSTER_URLS: 'redis://cache-a:7000' }), [
    'REDIS_URL and REDIS_CLUSTER_URLS are both set: set REDIS_URL for one Redis, or REDIS_CLUSTER_URLS for a Redis Cluster',
  ]);
  for (const bad of [
    'http://:hunter2@cache-a:7000',
    'redis://cache-a:7000;redis://cache-b:7000',
    'redis://:hunter2@',
    'redis://cache-a:7000,',
  ]) {
    t.strictSame(
      await problems({ REDIS_CLUSTER_URLS: bad }),
      ['REDIS_CLUSTER_URLS must be redis:// or rediss:// URLs, comma-separated'],
      `${bad} is refused without being echoed`,
    );
  }
  t.strictSame(await problems({ REDIS_CLUSTER_URLS: 'redis://cache-a:7000', REDIS_KEY_PREFIX: 'contacts{prod}:' }), [
    'REDIS_KEY_PREFIX must not contain { or } with REDIS_CLUSTER_URLS (a Redis Cluster would keep every key on one node)',
  ]);
  t.equal(
    (await loadConfig({ ...base, REDIS_URL: 'redis://cache:6379', REDIS_KEY_PREFIX: 'contacts{prod}:' })).redisKeyPrefix,
    'contacts{prod}:',
    'one Redis takes any prefix',
  );
});

t.test('the other OTEL_* variables are read only with OTEL_EXPORTER_OTLP_ENDPOINT', async (t) => {
  const dataDir = await tempDir(t);
  const otel = { OTEL_TRACES_SAMPLER: 'jaeger_remote', OTEL_TRACES_SAMPLER_ARG: '2', OTEL_BSP_SCHEDULE_DELAY: 'soon' };
  const off = await loadConfig({ DATA_DIR: dataDir, JWT_SECRET: TEST_JWT_SECRET, ...otel });
  t.equal(off.tracing, null, 'tracing off: values meant for another program are not ours to refuse');
  const on = { DATA_DIR: dataDir, JWT_SECRET: TEST_JWT_SECRET, OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' };
  t.strictSame(
    (
      (await loadConfig({ ...on, ...otel }).then(
        () => null,
        (e: unknown) => e,
      )) as ConfigError
    ).problems,
    [
      "OTEL_TRACES_SAMPLER must be one of parentbased_always_on, parentbased_always_off, parentbased_traceidratio, always_on, always_off, traceidratio, got 'jaeger_remote'",
      "OTEL_TRACES_SAMPLER_ARG must be a number from 0 to 1, got '2'",
      "OTEL_BSP_SCHEDULE_DELAY must be a whole number from 0 to 3600000, got 'soon'",
    ],
  );
  t.strictSame((await loadConfig({ ...on, OTEL_TRACES_SAMPLER_ARG: '.25' })).tracing, {
    endpoint: 'http://collector:4318',
    protocol: 'http/protobuf',
    sampler: 'parentbased_always_on',
    samplerRatio: 0.25,
    exportDelayMs: 5000,
  });
});

t.test('production refuses placeholder and guessable JWT secrets, naming the variable', async (t) => {
  const dataDir = await tempDir(t);
  const load = (secret: string) => loadConfig({ DATA_DIR: dataDir, NODE_ENV: 'production', JWT_SECRET: secret });
  const refused = async (secret: string) =>
    (
      (await load(secret).then(
        () => null,
        (e: unknown) => e,
      )) as ConfigError | null
    )?.problems;
  const placeholder = /^JWT_SECRET is a placeholder from an example; set it to the output of `openssl rand -base64 48`$/;
  t.match(await refused('change-me-to-at-least-32-random-characters'), [placeholder], 'the old .env.example value');
  t.match(await refused('replace-with-the-output-of-openssl-rand-base64-48'), [placeholder], "today's .env.example value");
  t.match(await refused('aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'), [
    /^JWT_SECRET is guessable \(about 0 bits of entropy, at least 128 needed\)/,
  ]);
  t.match(await refused('abababababababababababababababab'), [/^JWT_SECRET is guessable \(about 32 bits/]);
  t.equal(
    (await load('3q2+7wR1k0Zs9yXcV8bN4mT6pL2aH5jD0eF7gU1iO3wQ6rS9tY2uI4oP8aS1dF3g')).nodeEnv,
    'production',
    'a random base64 secret starts',
  );
  t.equal((await load(TEST_JWT_SECRET)).nodeEnv, 'production', 'a long passphrase-like secret starts');
  const development = await loadConfig({ DATA_DIR: dataDir, JWT_SECRET: 'change-me-to-at-least-32-random-characters' });
  t.equal(development.jwtSecret, 'change-me-to-at-least-32-random-characters', 'development takes any secret of 32 characters');
});

t.test('without JWT_SECRET, development generates one secret and keeps it in the data folder', async (t) => {
  const dataDir = await tempDir(t);
  const first = await loadConfig({ DATA_DIR: dataDir });
  t.ok(first.jwtSecret.length >= 32);
  t.equal((await readFile(path.join(dataDir, 'jwt-secret'), 'utf8')).trim(), first.jwtSecret);
  const second = await loadConfig({ DATA_DIR: dataDir });
  t.equal(second.jwtSecret, first.jwtSecret, 'restarts keep sessions valid');
});

t.test('TRUST_PROXY takes true, false, a hop count or addresses', async (t) => {
  const dataDir = await tempDir(t);
  const load = (value: string) => loadConfig({ DATA_DIR: dataDir, JWT_SECRET: TEST_JWT_SECRET, TRUST_PROXY: value });
  t.equal((await load('true')).trustProxy, true);
  t.equal((await load('false')).trustProxy, false);
  t.equal((await load('10.0.0.0/8')).trustProxy, '10.0.0.0/8');
  const hops = (await load('1')).trustProxy as (address: string, hop: number) => boolean;
  t.equal(typeof hops, 'function');
  t.equal(hops('10.0.0.1', 0), true);
  t.equal(hops('10.0.0.1', 1), false);
  t.equal((await load('loopback, 10.0.0.0/8, ::1, fd00::/8')).trustProxy, 'loopback, 10.0.0.0/8, ::1, fd00::/8');
  const cases: [value: string, bad: string][] = [
    ['yes', 'yes'],
    ['10.0.0.1, 10.0.0.0/33', '10.0.0.0/33'],
    ['10.0.0.0/8/1', '10.0.0.0/8/1'],
    ['10.0.0.1,', ''],
  ];
  for (const [value, bad] of cases) {
    const error = await load(value).then(
      () => null,
      (e: unknown) => e,
    );
    t.type(error, ConfigError, `TRUST_PROXY=${value} is refused`);
    t.strictSame((error as ConfigError).problems, [
      `TRUST_PROXY must be true, false, a hop count, or addresses, CIDRs or loopback/linklocal/uniquelocal, got '${bad}'`,
    ]);
  }
});

t.test('NODE_ENV=production refuses TRUST_PROXY=true, naming the alternatives; a hop count or addresses start', async (t) => {
  const dataDir = await tempDir(t);
  const load = (value: string) =>
    loadConfig({ DATA_DIR: dataDir, NODE_ENV: 'production', JWT_SECRET: TEST_JWT_SECRET, TRUST_PROXY: value });
  const error = await load('true').then(
    () => null,
    (e: unknown) => e,
  );
  t.type(error, ConfigError);
  t.strictSame((error as ConfigError).problems, [
    'TRUST_PROXY=true is refused when NODE_ENV=production (any client could pick its address with X-Forwarded-For); set the number of proxies in front (e.g. 1) or their addresses/CIDRs (e.g. 10.0.0.0/8)',
  ]);
  t.equal(typeof (await load('1')).trustProxy, 'function');
  t.equal((await load('10.0.0.0/8')).trustProxy, '10.0.0.0/8');
});

t.test('the settings reach the app: token lifetimes and bcrypt cost', async (t) => {
  const app = await build(t, {
    env: { ACCESS_TOKEN_TTL: '77', REFRESH_TOKEN_TTL: '7777', BCRYPT_COST: '5', RATE_LIMIT_ANON_PER_MIN: '1000' },
  });
  const session = await loggedInUser(app);
  const access = decodeClaims(session.accessToken) as { iat: number; exp: number };
  const refresh = decodeClaims(session.refreshToken) as { iat: number; exp: number };
  t.equal(access.exp - access.iat, 77);
  t.equal(refresh.exp - refresh.iat, 7777);
  const row = await app.db.selectFrom('users').select('password_hash').where('id', '=', session.id).executeTakeFirstOrThrow();
  t.match(row.password_hash, /^\$2[aby]\$05\$/);
});

t.test('the server refuses to start on a bad value, naming it', async (t) => {
  const dataDir = await tempDir(t);
  const run = spawnSync(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
    env: { PATH: process.env.PATH, DATA_DIR: dataDir, JWT_SECRET: TEST_JWT_SECRET, PORT: 'not-a-port' },
    encoding: 'utf8',
    timeout: 60_000,
  });
  t.equal(run.status, 1);
  t.equal(
    run.stderr,
    "Configuration error: PORT must be a whole number from 0 to 65535, got 'not-a-port'\n",
    'one line naming it, no stack',
  );
});

t.test('the server refuses to start on a bad password setting, naming it', async (t) => {
  const dataDir = await tempDir(t);
  const run = spawnSync(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
    env: { PATH: process.env.PATH, DATA_DIR: dataDir, JWT_SECRET: TEST_JWT_SECRET, PASSWORD_QUEUE_LIMIT: '-5' },
    encoding: 'utf8',
    timeout: 60_000,
  });
  t.equal(run.status, 1);
  t.match(run.stderr, /Configuration error: PASSWORD_QUEUE_LIMIT must be a whole number from 1 to 100000, got '-5'/);
});

t.test('DATABASE_READ_URLS: standbys of DATABASE_URL, never of the embedded database', async (t) => {
  const dataDir = await tempDir(t);
  const base = { DATA_DIR: dataDir, JWT_SECRET: TEST_JWT_SECRET, DATABASE_URL: 'postgres://app:s3cret@primary/contacts' };
  const config = await loadConfig({
    ...base,
    DATABASE_READ_URLS: ' postgres://app:s3cret@standby-a/contacts ,postgresql://standby-b:5433/contacts ',
  });
  t.strictSame(config.databaseReadUrls, ['postgres://app:s3cret@standby-a/contacts', 'postgresql://standby-b:5433/contacts']);
  const problems = async (env: Record<string, string>) =>
    (
      (await loadConfig({ ...base, ...env }).then(
        () => null,
        (e: unknown) => e,
      )) as ConfigError | null
    )?.problems;
  t.strictSame(await problems({ DATABASE_URL: '', DATABASE_READ_URLS: 'postgres://standby-a/contacts' }), [
    'DATABASE_READ_URLS needs DATABASE_URL: the embedded database has no standbys',
  ]);
  for (const bad of [
    'mysql://:hunter2@standby-a/contacts',
    'postgres://standby-a postgres://standby-b',
    'postgres://:hunter2@',
    'postgres://standby-a,',
  ]) {
    t.strictSame(
      await problems({ DATABASE_READ_URLS: bad }),
      ['DATABASE_READ_URLS must be postgres:// or postgresql:// URLs, comma-separated'],
      `${bad} is refused without being echoed`,
    );
  }
});
