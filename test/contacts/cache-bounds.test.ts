/**
 * The answer cache cannot be inflated (issue 21): equivalent queries share one key, an answer over
 * CACHE_MAX_ANSWER_BYTES is not cached, and a user's answers take CACHE_USER_BYTES at most. On the
 * postgres backend the keys and bytes are counted in Redis itself.
 */
import type { FastifyInstance } from 'fastify';
import t from 'tap';
import { as, buildContactsApp, type Caller, contactBody, createUser, type TestUser } from './fixtures.js';

const USER_BYTES = 40_000;
const app = await buildContactsApp(t, { env: { CACHE_USER_BYTES: String(USER_BYTES) }, now: () => new Date('2025-06-15T12:00:00.000Z') });

/** A user with `count` contacts, each with `extra` characters of additional_data. */
async function userWith(app: FastifyInstance, count: number, extra: number): Promise<{ user: TestUser; call: Caller }> {
  const user = await createUser(app);
  const rows = Array.from({ length: count }, (_, i) => ({
    owner_id: user.id,
    ...(contactBody({ email: `c${i}@example.com`, birthday: '1990-06-20' }) as {
      first_name: string;
      last_name: string;
      email: string;
      phone: string;
      birthday: string;
    }),
    additional_data: extra > 0 ? JSON.stringify({ note: 'x'.repeat(extra) }) : null,
  }));
  await app.db.insertInto('contacts').values(rows).execute();
  return { user, call: as(app, user) };
}

/** The user's answer keys in Redis and the bytes Redis says they take (MEMORY USAGE); null on the embedded backend. */
async function redisAnswers(app: FastifyInstance, user: TestUser): Promise<{ keys: number; bytes: number } | null> {
  const redis = app.redisClient;
  if (!redis) return null;
  const keys = await redis.keys(`${app.config.redisKeyPrefix}cache:{u${user.id}}:a:*`);
  let bytes = 0;
  for (const key of keys) bytes += (await redis.memory('USAGE', key)) ?? 0;
  return { keys: keys.length, bytes };
}

const upcoming = '/api/contacts/get-upcoming-birthday';
/** The requests: the same page, `skip` written with more and more zeros. */
const zeros = Array.from({ length: 10 }, (_, i) => `${upcoming}?time_range=366&limit=1000&skip=${'0'.repeat(i + 1)}`);

t.test('one key for equivalent queries: zeros, parameter order, defaults written out', async (t) => {
  const { user, call } = await userWith(app, 3, 0);
  const variants = [...zeros, `${upcoming}?limit=1000&skip=0&time_range=366`, `${upcoming}?skip=0&time_range=0366&limit=01000`];
  const answers = [];
  for (const url of variants) answers.push(await call('GET', url));
  t.same(
    answers.map((res) => res.statusCode),
    variants.map(() => 200),
  );
  t.same(
    answers.map((res) => res.headers['x-cache']),
    ['MISS', ...variants.slice(1).map(() => 'HIT')],
    'one MISS, then HITs',
  );
  t.same(new Set(answers.map((res) => res.body)).size, 1, 'one answer');
  t.equal((await call('GET', `${upcoming}?time_range=7`)).headers['x-cache'], 'MISS', 'the default time_range…');
  t.equal((await call('GET', upcoming)).headers['x-cache'], 'HIT', '…is the same query as none');
  t.equal((await call('GET', `${upcoming}?skip=0&skip=0`)).statusCode, 422, 'a repeated parameter is refused, so it makes no key');
  t.equal((await call('GET', `${upcoming}?nickname=x`)).statusCode, 422, 'so is an unknown one');
  const stored = await redisAnswers(app, user);
  if (stored) {
    t.equal(stored.keys, 2, 'two answers in Redis: time_range 366 and 7');
    t.comment(`Redis: ${stored.keys} answer keys, ${stored.bytes} bytes`);
  }
});

t.test(`an answer over 512 KiB is not cached: the issue's ten requests store nothing`, async (t) => {
  // 40 contacts with 16,000 characters of additional_data: a page of about 650 kB.
  const { user, call } = await userWith(app, 40, 16_000);
  const answers = [];
  for (const url of zeros) answers.push(await call('GET', url));
  t.same(
    answers.map((res) => res.statusCode),
    zeros.map(() => 200),
  );
  t.ok(answers[0]!.rawPayload.length > 524_288, `the page is ${answers[0]!.rawPayload.length} bytes`);
  t.same(
    answers.map((res) => res.headers['x-cache']),
    zeros.map(() => 'MISS'),
    'every one answered from the database',
  );
  const stored = await redisAnswers(app, user);
  if (stored) {
    t.same(stored, { keys: 0, bytes: 0 }, 'no answer in Redis');
    t.comment(`Redis after the ten requests: ${stored.keys} answer keys, ${stored.bytes} bytes`);
  }
});

t.test(`a user's cached answers take ${USER_BYTES} bytes at most; past it answers come from the database`, async (t) => {
  const { user, call } = await userWith(app, 60, 500);
  const pages = Array.from({ length: 40 }, (_, skip) => `/api/contacts/?limit=3&skip=${skip}`);
  for (const url of pages) t.equal((await call('GET', url)).statusCode, 200);
  let hits = 0;
  let hitBytes = 0;
  for (const url of pages) {
    const res = await call('GET', url);
    if (res.headers['x-cache'] !== 'HIT') continue;
    hits += 1;
    hitBytes += res.rawPayload.length;
  }
  t.ok(hits > 0 && hits < pages.length, `some pages are cached, not all (${hits} of ${pages.length})`);
  t.ok(hitBytes <= USER_BYTES, `the cached pages take ${hitBytes} bytes, within ${USER_BYTES}`);
  const stored = await redisAnswers(app, user);
  if (stored) {
    t.equal(stored.keys, hits, 'Redis holds those pages and no more');
    t.comment(`Redis: ${stored.keys} answer keys, ${stored.bytes} bytes (budget ${USER_BYTES})`);
  }

  const other = await userWith(app, 1, 0);
  await other.call('GET', '/api/contacts/');
  t.equal((await other.call('GET', '/api/contacts/')).headers['x-cache'], 'HIT', "another user's budget is their own");
});
