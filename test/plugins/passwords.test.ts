/**
 * app.passwords on its own (config, metrics and the plugin, no database): known-answer vectors for bcrypt
 * and argon2id, new hashes under each algorithm, needsRehash, the bounded queue, and close.
 */
import { readFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import bcrypt from 'bcryptjs';
import Fastify, { type FastifyInstance } from 'fastify';
import t from 'tap';
import configPlugin, { loadConfig } from '../../plugins/config.js';
import metricsPlugin from '../../plugins/metrics.js';
import passwordsPlugin, { PasswordQueueFull, retryAfterSeconds } from '../../plugins/passwords.js';
import { TEST_JWT_SECRET, type Teardown } from '../helper.js';

async function passwordsApp(t: Teardown, env: Record<string, string> = {}): Promise<FastifyInstance> {
  const config = await loadConfig({ JWT_SECRET: TEST_JWT_SECRET, BCRYPT_COST: '4', ...env });
  const app = Fastify({ logger: false });
  await app.register(configPlugin, { config });
  await app.register(metricsPlugin);
  await app.register(passwordsPlugin);
  t.teardown(() => app.close());
  await app.ready();
  return app;
}

/*
 * bcrypt: the test vectors of Openwall's crypt_blowfish (wrapper.c, `tests[]`), the reference
 * the other implementations check against. The ASCII ones only: the others are 8-bit byte
 * strings that are not UTF-8, which no JSON or form body can carry. `$2b$` and `$2y$` differ from
 * `$2a$` only for 8-bit bytes and very long inputs, so for ASCII they give the same digest, as
 * wrapper.c itself shows for "\xa3" (`$2a$`/`$2b$`/`$2y$` …Sa7shbm4.OzKpvFnX1pQLmQW96oUlCq).
 */
const BCRYPT_VECTORS: [password: string, hash: string][] = [
  ['U*U', '$2a$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW'],
  ['U*U*', '$2a$05$CCCCCCCCCCCCCCCCCCCCC.VGOzA784oUp/Z0DY336zx7pLYAy0lwK'],
  ['U*U*U', '$2a$05$XXXXXXXXXXXXXXXXXXXXXOAcXxm9kjPGEMsLznoKqmqw7tc8WCx4a'],
  ['', '$2a$05$CCCCCCCCCCCCCCCCCCCCC.7uG0VCzI2bS7j6ymqJi9CdcdxiRTWNy'],
  ['U*U', '$2b$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW'],
  ['U*U', '$2y$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW'],
];
/** wrapper.c's 98-byte vector: bcrypt reads its first 72 bytes only. */
const BCRYPT_LONG = [
  '0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789chars after 72 are ignored',
  '$2a$05$abcdefghijklmnopqrstuu5s2v8.iXieOjg/.AySBTTZIIVFJeBui',
] as const;

/*
 * argon2id: the reference implementation's vectors (P-H-C/phc-winner-argon2, src/test.c, the
 * Argon2id block for version 0x13): t, m = 2^k KiB, p, password, salt, raw digest in hex, and the
 * encoded string test.c asserts. The 256 MiB one is left out for the time it takes.
 */
const ARGON2ID_VECTORS = [
  {
    t: 2,
    m: 65536,
    p: 1,
    password: 'password',
    salt: 'somesalt',
    hex: '09316115d5cf24ed5a15a31a3ba326e5cf32edc24702987c02b6566f61913cf7',
    phc: '$argon2id$v=19$m=65536,t=2,p=1$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8ArZWb2GRPPc',
  },
  {
    t: 2,
    m: 256,
    p: 1,
    password: 'password',
    salt: 'somesalt',
    hex: '9dfeb910e80bad0311fee20f9c0e2b12c17987b4cac90c2ef54d5b3021c68bfe',
    phc: '$argon2id$v=19$m=256,t=2,p=1$c29tZXNhbHQ$nf65EOgLrQMR/uIPnA4rEsF5h7TKyQwu9U1bMCHGi/4',
  },
  {
    t: 2,
    m: 256,
    p: 2,
    password: 'password',
    salt: 'somesalt',
    hex: '6d093c501fd5999645e0ea3bf620d7b8be7fd2db59c20d9fff9539da2bf57037',
    phc: '$argon2id$v=19$m=256,t=2,p=2$c29tZXNhbHQ$bQk8UB/VmZZF4Oo79iDXuL5/0ttZwg2f/5U52iv1cDc',
  },
  {
    t: 1,
    m: 65536,
    p: 1,
    password: 'password',
    salt: 'somesalt',
    hex: 'f6a5adc1ba723dddef9b5ac1d464e180fcd9dffc9d1cbf76cca2fed795d9ca98',
    phc: '$argon2id$v=19$m=65536,t=1,p=1$c29tZXNhbHQ$9qWtwbpyPd3vm1rB1GThgPzZ3/ydHL92zKL+15XZypg',
  },
  {
    t: 2,
    m: 65536,
    p: 1,
    password: 'differentpassword',
    salt: 'somesalt',
    hex: '0b84d652cf6b0c4beaef0dfe278ba6a80df6696281d7e0d2891b817d8c458fde',
    phc: '$argon2id$v=19$m=65536,t=2,p=1$c29tZXNhbHQ$C4TWUs9rDEvq7w3+J4umqA32aWKB1+DSiRuBfYxFj94',
  },
  {
    t: 2,
    m: 65536,
    p: 1,
    password: 'password',
    salt: 'diffsalt',
    hex: 'bdf32b05ccc42eb15d58fd19b1f856b113da1e9a5874fdcc544308565aa8141c',
    phc: '$argon2id$v=19$m=65536,t=2,p=1$ZGlmZnNhbHQ$vfMrBczELrFdWP0ZsfhWsRPaHppYdP3MVEMIVlqoFBw',
  },
];

/** The PHC string format (unpadded standard base64) of an argon2id v=19 digest. */
function phcString(v: (typeof ARGON2ID_VECTORS)[number]): string {
  const b64 = (bytes: Buffer) => bytes.toString('base64').replace(/=+$/, '');
  return `$argon2id$v=19$m=${v.m},t=${v.t},p=${v.p}$${b64(Buffer.from(v.salt))}$${b64(Buffer.from(v.hex, 'hex'))}`;
}

/** The argon2id settings of the reference vector above, so its hash needs no rehash. */
const REFERENCE_ARGON2 = { PASSWORD_HASH: 'argon2id', ARGON2_MEMORY_KIB: '65536', ARGON2_TIME_COST: '2', ARGON2_PARALLELISM: '1' };
/** Cheap argon2id settings for tests that only need the format. */
const FAST_ARGON2 = { PASSWORD_HASH: 'argon2id', ARGON2_MEMORY_KIB: '1024', ARGON2_TIME_COST: '1', ARGON2_PARALLELISM: '1' };

t.test('bcrypt known answers verify; a wrong password does not', async (t) => {
  const app = await passwordsApp(t, { BCRYPT_COST: '5' });
  for (const [password, hash] of BCRYPT_VECTORS) {
    t.same(
      await app.passwords.verify(password, hash, 'test-client'),
      { ok: true, needsRehash: false },
      `${hash} is ${JSON.stringify(password)}`,
    );
    t.same(
      await app.passwords.verify(`${password}x`, hash, 'test-client'),
      { ok: false, needsRehash: false },
      `${hash} is not ${password}x`,
    );
  }
  t.same(await app.passwords.verify('U*U*', BCRYPT_VECTORS[0]![1], 'test-client'), { ok: false, needsRehash: false });
});

t.test('a bcrypt hash never matches a password longer than 72 bytes, though bcrypt alone would', async (t) => {
  const app = await passwordsApp(t, { BCRYPT_COST: '5' });
  const [long, hash] = BCRYPT_LONG;
  t.equal(bcrypt.compareSync(long, hash), true, 'the vector is right: bcrypt reads 72 bytes');
  t.same(await app.passwords.verify(long, hash, 'test-client'), { ok: false, needsRehash: false });
  await t.rejects(app.passwords.hash(long, 'test-client'), RangeError, 'nor is it hashed, cut to 72 bytes');
});

t.test('argon2id known answers of the reference implementation verify; wrong passwords do not', async (t) => {
  const app = await passwordsApp(t, REFERENCE_ARGON2);
  for (const vector of ARGON2ID_VECTORS) {
    t.equal(phcString(vector), vector.phc, `the digest ${vector.hex.slice(0, 8)}… is test.c's string`);
    const matches = await app.passwords.verify(vector.password, vector.phc, 'test-client');
    t.equal(matches.ok, true, `${vector.phc} is ${vector.password}`);
    t.equal(
      matches.needsRehash,
      vector.m !== 65536 || vector.t !== 2 || vector.p !== 1,
      'rehash only when m, t or p differ from the settings',
    );
    t.same(await app.passwords.verify('passwore', vector.phc, 'test-client'), { ok: false, needsRehash: false });
  }
  const [reference] = ARGON2ID_VECTORS;
  t.same(await app.passwords.verify('Password', reference!.phc, 'test-client'), { ok: false, needsRehash: false });
});

t.test('both schemes verify under either setting; the one not configured asks for a rehash', async (t) => {
  const [reference] = ARGON2ID_VECTORS;
  const [password, bcryptHash] = BCRYPT_VECTORS[0]!;
  const underBcrypt = await passwordsApp(t, { BCRYPT_COST: '5' });
  t.same(await underBcrypt.passwords.verify('password', reference!.phc, 'test-client'), { ok: true, needsRehash: true });
  const underArgon2 = await passwordsApp(t, REFERENCE_ARGON2);
  t.same(await underArgon2.passwords.verify(password, bcryptHash, 'test-client'), { ok: true, needsRehash: true });
  const otherCost = await passwordsApp(t, { BCRYPT_COST: '4' });
  t.same(await otherCost.passwords.verify(password, bcryptHash, 'test-client'), { ok: true, needsRehash: true }, 'another bcrypt cost');
  for (const [setting, value] of [
    ['ARGON2_MEMORY_KIB', '32768'],
    ['ARGON2_TIME_COST', '3'],
    ['ARGON2_PARALLELISM', '2'],
  ] as const) {
    const other = await passwordsApp(t, { ...REFERENCE_ARGON2, [setting]: value });
    t.same(await other.passwords.verify('password', reference!.phc, 'test-client'), { ok: true, needsRehash: true }, `another ${setting}`);
  }
  // The same digest written without `v=` is version 0x10, which this service does not hash with.
  t.same(await underArgon2.passwords.verify('password', reference!.phc.replace('v=19$', ''), 'test-client'), {
    ok: false,
    needsRehash: false,
  });
});

t.test('anything but a bcrypt or argon2id hash never matches', async (t) => {
  const app = await passwordsApp(t);
  const stored = [
    '',
    'password',
    // test.c's argon2i and argon2d vectors: real hashes, but of variants this service does not accept.
    '$argon2i$v=19$m=256,t=2,p=1$c29tZXNhbHQ$iekCn0Y3spW+sCcFanM2xBT63UP2sghkUoHLIUpWRS8',
    '$argon2d$v=16$m=8,t=1,p=1$ICAgICAgICA$X54KZYxUSfMUihzebb70sKbheabHilo8gsUldrVU4IU',
    // wrapper.c's `$2x$` (the 8-bit bug's compatibility mode) and a truncated bcrypt hash.
    '$2x$05$/OK.fbVrR/bpIqNJ5ianF.CE5elHaaO4EbggVDjb8P19RukzXSM3e',
    '$2a$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOe',
    // Well-formed on their face, but bcrypt refuses cost 3 and argon2 a 3-byte digest.
    '$2b$03$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW',
    '$argon2id$v=19$m=1024,t=1,p=1$c29tZXNhbHQ$AAAA',
  ];
  for (const hash of stored)
    t.same(await app.passwords.verify('password', hash, 'test-client'), { ok: false, needsRehash: false }, JSON.stringify(hash));
});

t.test('new hashes use the configured algorithm and parameters, with a fresh salt each time', async (t) => {
  const underBcrypt = await passwordsApp(t, { BCRYPT_COST: '5' });
  const first = await underBcrypt.passwords.hash('correct-horse', 'test-client');
  const second = await underBcrypt.passwords.hash('correct-horse', 'test-client');
  t.match(first, /^\$2b\$05\$[./A-Za-z0-9]{53}$/);
  t.not(first, second, 'salted');
  t.same(await underBcrypt.passwords.verify('correct-horse', first, 'test-client'), { ok: true, needsRehash: false });
  t.equal(bcrypt.compareSync('correct-horse', first), true, 'readable by bcryptjs itself');

  const underArgon2 = await passwordsApp(t, { ...FAST_ARGON2, ARGON2_PARALLELISM: '2' });
  const argon2 = await underArgon2.passwords.hash('correct-horse', 'test-client');
  t.match(argon2, /^\$argon2id\$v=19\$m=1024,t=1,p=2\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}$/, '16-byte salt, 32-byte digest');
  t.not(argon2, await underArgon2.passwords.hash('correct-horse', 'test-client'), 'salted');
  t.same(await underArgon2.passwords.verify('correct-horse', argon2, 'test-client'), { ok: true, needsRehash: false });
  t.same(await underArgon2.passwords.verify('correct-horsf', argon2, 'test-client'), { ok: false, needsRehash: false });
  t.same(
    await underBcrypt.passwords.verify('correct-horse', argon2, 'test-client'),
    { ok: true, needsRehash: true },
    'and the bcrypt setting reads it',
  );

  const owaspDefaults = await passwordsApp(t, { PASSWORD_HASH: 'argon2id' });
  t.match(await owaspDefaults.passwords.hash('correct-horse', 'test-client'), /^\$argon2id\$v=19\$m=19456,t=2,p=1\$/, 'OWASP defaults');
});

t.test('burn spends a real compare under either algorithm and every setting', async (t) => {
  // burn rejects when its hash is one the algorithm cannot read, which would answer at once.
  const settings: Record<string, string>[] = [
    { BCRYPT_COST: '4' },
    { BCRYPT_COST: '10' },
    FAST_ARGON2,
    { ...FAST_ARGON2, ARGON2_MEMORY_KIB: '4096', ARGON2_TIME_COST: '3', ARGON2_PARALLELISM: '4' },
  ];
  for (const env of settings) {
    const app = await passwordsApp(t, env);
    t.equal(await app.passwords.burn('anything', 'test-client'), undefined, JSON.stringify(env));
  }
});

t.test(
  'past PASSWORD_QUEUE_LIMIT waiting jobs, password work is refused with a 503 error, and served again once the queue drains',
  async (t) => {
    const app = await passwordsApp(t, { BCRYPT_COST: '12', PASSWORD_QUEUE_LIMIT: '1' });
    const jobs = availableParallelism() * 2 + 8;
    const results = await Promise.allSettled(
      Array.from({ length: jobs }, (_, i) =>
        i % 3 === 0
          ? app.passwords.hash('correct-horse', 'test-client')
          : i % 3 === 1
            ? app.passwords.burn('x', 'test-client')
            : app.passwords.verify('x', BCRYPT_VECTORS[0]![1], 'test-client'),
      ),
    );
    const refused = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    t.ok(refused.length >= 8, `at most threads + starting threads + 1 accepted; ${refused.length} of ${jobs} refused`);
    t.ok(refused.length < jobs, 'some were served');
    for (const { reason } of refused) {
      t.type(reason, PasswordQueueFull);
      t.match(reason, { statusCode: 503, message: 'Too many password checks in progress' });
      const retryAfter = (reason as PasswordQueueFull).headers['Retry-After'];
      t.ok(Number.isInteger(retryAfter) && Number(retryAfter) >= 1, `Retry-After ${retryAfter} is a whole number of seconds, at least 1`);
    }
    t.match(await app.passwords.hash('correct-horse', 'test-client'), /^\$2b\$12\$/, 'served once the queue drained');
  },
);

t.test('Retry-After is the time the waiting jobs take on the pool, rounded up, at least 1 second', async (t) => {
  t.equal(retryAfterSeconds(64, 270, 2), 9, '64 bcrypt hashes at cost 12 on 2 threads: 8.64 s');
  t.equal(retryAfterSeconds(1, 270, 2), 1);
  t.equal(retryAfterSeconds(1, 2500, 2), 2);
  t.equal(retryAfterSeconds(10, 100, 4), 1, 'less than a second is still 1');
  t.equal(retryAfterSeconds(0, 270, 2), 1);
  t.equal(retryAfterSeconds(5, Number.NaN, 2), 1, 'before any job has finished');
});

/** Threads of this process, from the kernel (Linux). */
async function threadCount(): Promise<number> {
  return Number(/^Threads:\s+(\d+)$/m.exec(await readFile('/proc/self/status', 'utf8'))?.[1]);
}

t.test('close ends every worker thread', async (t) => {
  // libuv's thread pool starts on first use; start it before counting.
  await readFile(new URL(import.meta.url));
  const before = await threadCount();
  const app = await passwordsApp({ teardown: () => {}, fail: t.fail.bind(t) }, { BCRYPT_COST: '4' });
  await Promise.all(Array.from({ length: 4 }, () => app.passwords.hash('correct-horse', 'test-client')));
  t.ok((await threadCount()) > before, 'the pool runs threads');
  await app.close();
  t.equal(await threadCount(), before);
  await t.rejects(app.passwords.hash('correct-horse', 'test-client'), 'a closed pool takes no work');
});
