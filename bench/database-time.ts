/**
 * `npx tsx bench/database-time.ts [--book 20000] [--searches 20]`
 *
 * Another user's PATCH while one user runs `--searches` 20-term searches over a `--book`-contact
 * book at once (issue 30, finding 3), on a throw-away database of the local PostgreSQL: first with
 * the per-user share lifted (as before: DB_USER_CONNECTIONS and DB_USER_WAITING at 1000), then
 * with the defaults. Prints the PATCH's latency, how many searches had answered by then, and the
 * searches' statuses.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { sql } from 'kysely';
import { loadConfig } from '../plugins/config.js';
import { buildApp } from '../src/app.js';
import { cleanUp, createDatabase, log } from './support.js';

const { values } = parseArgs({ options: { book: { type: 'string', default: '20000' }, searches: { type: 'string', default: '20' } } });
const book = Number(values.book);
const searches = Number(values.searches);

async function run(label: string, env: Record<string, string>): Promise<string> {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'bench-database-time-'));
  const app = await buildApp({
    config: await loadConfig({
      NODE_ENV: 'test',
      LOG_LEVEL: 'silent',
      DATA_DIR: dataDir,
      DATABASE_URL: await createDatabase(`contacts_bench_dbtime_${Date.now()}`, false),
      JWT_SECRET: 'bench-secret-that-is-at-least-32-characters',
      ...env,
    }),
  });
  try {
    const user = async (name: string) => {
      const { id } = await app.db
        .insertInto('users')
        .values({ username: name, email: `${name}@example.com`, password_hash: 'not-a-hash', is_verified: true })
        .returning('id')
        .executeTakeFirstOrThrow();
      return { id, authorization: `Bearer ${app.tokens.sign(id, 'access', 3600)}` };
    };
    const alice = await user('alice');
    const bob = await user('bob');
    await app.db.connection().execute(async (connection) => {
      await sql`set statement_timeout = 0`.execute(connection);
      await sql`insert into contacts (owner_id, first_name, last_name, email, phone, birthday)
        select ${alice.id}::integer, md5(g::text), md5((g * 7)::text), 'c' || g || '@example.com', '+14155550123', date '1990-01-02'
          from generate_series(1, ${book}::integer) g`.execute(connection);
    });
    const created = await app.inject({
      method: 'POST',
      url: '/api/contacts/',
      headers: { authorization: bob.authorization },
      payload: { first_name: 'Bob', last_name: 'B', email: 'bob@example.com', phone: '+14155550123', birthday: '1990-01-01' },
    });
    const contactId = created.json<{ id: number }>().id;
    log(`${label}: ${searches} searches of a ${book}-contact book, then the PATCH`);
    let answered = 0;
    const started = performance.now();
    const running = Array.from({ length: searches }, (_, i) => {
      const terms = Array.from({ length: 20 }, (_, term) => `${'abcdef'[term % 6]}${i % 10}${term % 10}`).join(' ');
      return app
        .inject({
          method: 'GET',
          url: `/api/contacts/?limit=1&query=${encodeURIComponent(terms)}`,
          headers: { authorization: alice.authorization },
        })
        .then((res) => (answered++, res.statusCode));
    });
    await new Promise((resolve) => setTimeout(resolve, 200));
    const patchStarted = performance.now();
    const patch = await app.inject({
      method: 'PATCH',
      url: `/api/contacts/${contactId}`,
      headers: { authorization: bob.authorization },
      payload: { last_name: 'Builder' },
    });
    const patchMs = performance.now() - patchStarted;
    const atPatch = answered;
    const statuses = await Promise.all(running);
    const totalMs = performance.now() - started;
    const byStatus = new Map<number, number>();
    for (const status of statuses) byStatus.set(status, (byStatus.get(status) ?? 0) + 1);
    const counts = [...byStatus].map(([status, n]) => `${n}× ${status}`);
    return `| ${label} | ${patch.statusCode} in ${patchMs.toFixed(0)} | ${atPatch} of ${searches} | ${counts.join(', ')} | ${totalMs.toFixed(0)} |`;
  } finally {
    await app.close();
    await rm(dataDir, { recursive: true, force: true });
  }
}

try {
  const rows = [
    await run('share lifted (before)', { DB_USER_CONNECTIONS: '1000', DB_USER_WAITING: '1000', DB_STATEMENT_TIMEOUT_MS: '600000' }),
    await run('defaults (3 at once, 20 waiting, 5 s)', {}),
  ];
  console.log('| setting | PATCH (ms) | searches answered before it | searches | all searches (ms) |');
  console.log('|---|---|---|---|---|');
  for (const row of rows) console.log(row);
} finally {
  await cleanUp();
}
