/**
 * `npm run bench:scale -- [--reseed] [--requests N] [--concurrency C] [--rounds R] [--only a,b] [--plans all|big|none]`
 *
 * The contacts queries at 1,000,000 contacts, at the database: seeds `contacts_scale` on the local
 * PostgreSQL (451 users: one with 100,000 contacts, 450 with 2,000; reused while it holds that seed,
 * `--reseed` to load it again), migrates it, then runs the repository functions directly on a pool
 * of 10 connections with C concurrent workers (default 10). Every request has its own parameters
 * (filter value, page, window, day), so no two are alike. For each query and user it prints p50,
 * p99 and the mean total, then the EXPLAIN (ANALYZE, BUFFERS) of one request, and flags any plan
 * that scans contacts sequentially or reads an index without an owner_id condition.
 *
 * The machine's speed drifts by tens of percent from hour to hour, so each query's requests run in
 * R rounds (default 3), each after a round of as many requests of a fixed reference (the 100,000-
 * contact user's contacts counted in their owner index, SQL that no change to the service touches)
 * at the same concurrency. The ratio of the two p99s compares runs made at different times.
 *
 * BENCH_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/postgres) names the server.
 */
import { execFileSync } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { type CompiledQuery, Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { openDatabase } from '../plugins/db.js';
import { migrateToLatest } from '../plugins/migrate.js';
import { birthdayWindow } from '../src/contacts/birthdays.js';
import { listContacts, listUpcomingBirthdays, type PageOf } from '../src/contacts/contacts.repository.js';
import { parseFilter } from '../src/contacts/filter.js';
import { parseSort } from '../src/contacts/sort.js';
import type { Database } from '../src/db/database.js';
import { migrations } from '../src/db/migrations/index.js';
import { seededRandom } from '../test/random.js';

const { values } = parseArgs({
  options: {
    reseed: { type: 'boolean', default: false },
    requests: { type: 'string', default: '300' },
    concurrency: { type: 'string', default: '10' },
    rounds: { type: 'string', default: '3' },
    only: { type: 'string' },
    plans: { type: 'string', default: 'all' },
    database: { type: 'string', default: 'contacts_scale' },
  },
});
/** The option `name` as a whole number of at least 1; anything else stops the run before it starts. */
function positiveInteger(name: 'requests' | 'concurrency' | 'rounds'): number {
  const value = Number(values[name]);
  if (Number.isInteger(value) && value >= 1) return value;
  console.error(`--${name} must be a whole number of at least 1, not ${JSON.stringify(values[name])}.`);
  process.exit(2);
}
const REQUESTS = positiveInteger('requests');
const CONCURRENCY = positiveInteger('concurrency');
const ROUNDS = positiveInteger('rounds');
const WARMUP = 10;
const SEED_ARGS = ['--users', '451', '--contacts-per-user', '2000', '--big-user', '100000', '--seed', '42'];
const SEED_MARK = `bench:scale seed ${SEED_ARGS.join(' ')}`;

const adminUrl = process.env.BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const databaseUrl = Object.assign(new URL(adminUrl), { pathname: `/${values.database}` }).toString();

/** Creates and seeds the database unless it already holds this seed. */
async function ensureSeeded(): Promise<void> {
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    const { rows } = await admin.query<{ mark: string | null }>(
      'select shobj_description(oid, $2) as mark from pg_database where datname = $1',
      [values.database, 'pg_database'],
    );
    if (rows.length === 0) await admin.query(`create database ${pg.escapeIdentifier(values.database)}`);
    if (rows[0]?.mark === SEED_MARK && !values.reseed) {
      console.log(`Reusing ${values.database} (${SEED_MARK.replace('bench:scale ', '')}).`);
      return;
    }
    await admin.query(`comment on database ${pg.escapeIdentifier(values.database)} is null`);
    const tsx = fileURLToPath(new URL('../node_modules/.bin/tsx', import.meta.url));
    execFileSync(tsx, [fileURLToPath(new URL('../scripts/seed.ts', import.meta.url)), ...SEED_ARGS, '--force'], {
      stdio: 'inherit',
      env: { ...process.env, DATABASE_URL: databaseUrl },
    });
    await admin.query(`comment on database ${pg.escapeIdentifier(values.database)} is ${pg.escapeLiteral(SEED_MARK)}`);
  } finally {
    await admin.end();
  }
}

interface User {
  label: string;
  id: number;
  size: number;
  sample: { first_name: string; last_name: string; email: string; birthday: string }[];
}

type Call = (db: Kysely<Database>) => Promise<PageOf<unknown>>;

interface Query {
  name: string;
  /** A request for `user`: its key (what makes it distinct, and the plan's heading) and the call. */
  request(user: User, rand: () => number): { key: string; call: Call };
}

const pick = <T>(rand: () => number, items: readonly T[]): T => items[Math.floor(rand() * items.length)]!;
const int = (rand: () => number, from: number, to: number) => from + Math.floor(rand() * (to - from + 1));
const piece = (rand: () => number, text: string, length: number) => {
  const from = int(rand, 0, Math.max(0, text.length - length));
  return text.slice(from, from + length);
};
/** A list request; `page` is [skip, limit]. */
const list = (user: User, expression: string, [skip, limit]: [number, number]) => ({
  key: `${expression} skip=${skip} limit=${limit}`,
  call: (db: Kysely<Database>) => listContacts(db, user.id, parseFilter(expression), { skip, limit }),
});
/** The list in a sort order (`sort=`), as the service reads it. */
const sorted = (user: User, sort: string, [skip, limit]: [number, number]) => ({
  key: `sort=${sort} skip=${skip} limit=${limit}`,
  call: (db: Kysely<Database>) => listContacts(db, user.id, [], { skip, limit }, parseSort(sort)),
});

/** One of the first five pages, 20 to 100 rows long (the length varies so requests differ). */
const firstPages = (rand: () => number): [number, number] => {
  const limit = int(rand, 20, 100);
  return [int(rand, 0, 4) * limit, limit];
};

const QUERIES: Query[] = [
  { name: 'list (pages 1-5)', request: (user, rand) => list(user, '', firstPages(rand)) },
  {
    name: 'list, deep page',
    request: (user, rand) => list(user, '', [user.size - 1000 + int(rand, 0, 900), 100]),
  },
  { name: 'sorted by last_name (pages 1-5)', request: (user, rand) => sorted(user, 'last_name', firstPages(rand)) },
  { name: 'sorted by -birthday (pages 1-5)', request: (user, rand) => sorted(user, '-birthday', firstPages(rand)) },
  {
    name: 'last_name:startswith:<1-3 letters>',
    request: (user, rand) =>
      list(user, `last_name:startswith:${pick(rand, user.sample).last_name.slice(0, int(rand, 1, 3))}`, firstPages(rand)),
  },
  {
    name: 'last_name:contains:<2-3 letters>',
    request: (user, rand) =>
      list(user, `last_name:contains:${piece(rand, pick(rand, user.sample).last_name, int(rand, 2, 3))}`, firstPages(rand)),
  },
  {
    name: 'last_name:endswith:<2-3 letters>',
    request: (user, rand) =>
      list(user, `last_name:endswith:${pick(rand, user.sample).last_name.slice(-int(rand, 2, 3))}`, firstPages(rand)),
  },
  {
    name: 'first_name:like:<letter>%<2 letters>',
    request: (user, rand) => {
      const name = pick(rand, user.sample).first_name;
      return list(user, `first_name:like:${name.slice(0, 1)}%${name.slice(-2)}`, firstPages(rand));
    },
  },
  {
    name: 'email:ilike:%<3 letters>%',
    request: (user, rand) => list(user, `email:ilike:%${piece(rand, pick(rand, user.sample).email, 3).toUpperCase()}%`, firstPages(rand)),
  },
  {
    name: 'last_name:eq',
    request: (user, rand) => list(user, `last_name:eq:${pick(rand, user.sample).last_name}`, firstPages(rand)),
  },
  {
    name: 'first_name:in_:[2-3 names]',
    request: (user, rand) => {
      const names = Array.from({ length: int(rand, 2, 3) }, () => pick(rand, user.sample).first_name);
      return list(user, `first_name:in_:${JSON.stringify(names)}`, firstPages(rand));
    },
  },
  {
    name: 'birthday:between (1-10 years)',
    request: (user, rand) => {
      const from = pick(rand, user.sample).birthday;
      const to = `${Number(from.slice(0, 4)) + int(rand, 1, 10)}${from.slice(4)}`.replace('-02-29', '-02-28');
      return list(user, `birthday:between:${from},${to}`, firstPages(rand));
    },
  },
  {
    name: 'bare term <3 letters>',
    request: (user, rand) => {
      const row = pick(rand, user.sample);
      return list(user, piece(rand, pick(rand, [row.first_name, row.last_name, row.email]), 3).replace(/[,:]/g, 'a'), firstPages(rand));
    },
  },
  {
    name: 'bare term <2 letters>',
    request: (user, rand) => {
      const row = pick(rand, user.sample);
      return list(user, piece(rand, pick(rand, [row.first_name, row.last_name, row.email]), 2).replace(/[,:]/g, 'a'), firstPages(rand));
    },
  },
  {
    name: 'upcoming, time_range 1-60',
    request: (user, rand) => {
      const today = new Date(Date.UTC(2026, 0, 1) + int(rand, 0, 364) * 86_400_000);
      const days = int(rand, 1, 60);
      const [skip, limit] = firstPages(rand);
      return {
        key: `${today.toISOString().slice(0, 10)} time_range=${days} skip=${skip} limit=${limit}`,
        call: (db) => listUpcomingBirthdays(db, user.id, birthdayWindow(today, days), { skip, limit }),
      };
    },
  },
  {
    name: 'upcoming, time_range 60, last page',
    request: (user, rand) => {
      const today = new Date(Date.UTC(2026, 0, 1) + int(rand, 0, 364) * 86_400_000);
      // About 61/365 of the contacts fall in the window (0.167); a page near its end.
      const skip = Math.max(0, Math.floor(user.size * 0.16) - int(rand, 0, 300));
      return {
        key: `${today.toISOString().slice(0, 10)} time_range=60 skip=${skip} limit=100`,
        call: (db) => listUpcomingBirthdays(db, user.id, birthdayWindow(today, 60), { skip, limit: 100 }),
      };
    },
  },
];

/** The reference: a count of `ownerId`'s entries in the (owner_id, id) index, the same work at any time. */
const reference =
  (ownerId: number): Call =>
  async (db) => {
    const { rows } = await sql<{ total: number }>`select count(*)::integer as total from contacts where owner_id = ${ownerId}`.execute(db);
    return { total: rows[0]!.total, rows: [] };
  };

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/** `count` distinct requests (by key); gives up on distinctness after many tries (a tiny user, say). */
function requests(query: Query, user: User, count: number, seed: number) {
  const rand = seededRandom(seed);
  const seen = new Map<string, Call>();
  for (let tries = 0; seen.size < count && tries < count * 50; tries++) {
    const { key, call } = query.request(user, rand);
    if (!seen.has(key)) seen.set(key, call);
  }
  return [...seen.entries()];
}

async function measure(db: Kysely<Database>, calls: [string, Call][]): Promise<{ latencies: number[]; totals: number[] }> {
  const latencies: number[] = [];
  const totals: number[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < calls.length) {
        const [, call] = calls[next++]!;
        const started = performance.now();
        const page = await call(db);
        latencies.push(performance.now() - started);
        totals.push(page.total);
      }
    }),
  );
  return { latencies, totals };
}

/**
 * `calls` in ROUNDS rounds, each after as many calls of `referenceCall`, so both meet the same
 * moments of the machine; latencies sorted.
 */
async function measureBesideReference(db: Kysely<Database>, calls: [string, Call][], referenceCall: Call) {
  const latencies: number[] = [];
  const totals: number[] = [];
  const referenceLatencies: number[] = [];
  const size = Math.ceil(calls.length / ROUNDS);
  for (let from = 0; from < calls.length; from += size) {
    const round = calls.slice(from, from + size);
    const referenceRound = await measure(
      db,
      round.map(([key]) => [key, referenceCall]),
    );
    referenceLatencies.push(...referenceRound.latencies);
    const queryRound = await measure(db, round);
    latencies.push(...queryRound.latencies);
    totals.push(...queryRound.totals);
  }
  const ascending = (a: number, b: number) => a - b;
  return { latencies: latencies.sort(ascending), totals, referenceLatencies: referenceLatencies.sort(ascending) };
}

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Index Cond'?: string;
  Plans?: PlanNode[];
}

/** What a plan does that it should not: a sequential scan of contacts, or an index read not limited to one owner. */
function violations(node: PlanNode, problems: string[] = [], onContacts = false): string[] {
  const type = node['Node Type'];
  const contacts = node['Relation Name'] === 'contacts';
  if (contacts && type === 'Seq Scan') problems.push('Seq Scan on contacts');
  if ((contacts && (type === 'Index Scan' || type === 'Index Only Scan')) || (onContacts && type === 'Bitmap Index Scan')) {
    const cond = node['Index Cond'] ?? '';
    // Fetching the page's rows by primary key is one row per id the owner-scoped scan found.
    // (The page is `page`, or for upcoming birthdays the union's first branch, `"*SELECT* 1"`.)
    const pageLookup = node['Index Name'] === 'contacts_pkey' && /^\(id = (page|"\*SELECT\* 1")\.id\)$/.test(cond);
    // The grams (migrations 009 and 019) are `owner:field:run`: a lookup reads one owner's entries when all its grams name that owner.
    const gramOwners = new Set([...cond.matchAll(/[{,]"?(\d+):\d+:/g)].map((match) => match[1]));
    const gramsLookup = node['Index Name'] === 'contacts_large_owner_grams_idx' && gramOwners.size === 1;
    if (!/\bowner_id = /.test(cond) && !pageLookup && !gramsLookup)
      problems.push(`${type} on ${node['Index Name']} without owner_id: ${cond || 'no condition'}`);
  }
  const bitmapOfContacts = contacts && type === 'Bitmap Heap Scan';
  for (const child of node.Plans ?? []) violations(child, problems, bitmapOfContacts || (onContacts && type.startsWith('Bitmap')));
  return problems;
}

/** The statements one call sends, captured on a one-connection Kysely that logs them. */
async function statementsOf(call: Call): Promise<CompiledQuery[]> {
  const captured: CompiledQuery[] = [];
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 1 });
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }), log: (event) => void captured.push(event.query) });
  try {
    await call(db);
  } finally {
    await db.destroy();
  }
  return captured.filter((query) => /^\s*(select|with)\b/i.test(query.sql));
}

async function explain(client: pg.Client, statements: CompiledQuery[]): Promise<{ text: string; problems: string[] }> {
  const parts: string[] = [];
  const problems: string[] = [];
  for (const statement of statements) {
    const parameters = [...statement.parameters];
    const json = await client.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(`explain (format json) ${statement.sql}`, parameters);
    problems.push(...violations(json.rows[0]!['QUERY PLAN'][0].Plan));
    const plan = await client.query<{ 'QUERY PLAN': string }>(`explain (analyze, buffers) ${statement.sql}`, parameters);
    parts.push(`${statement.sql}\n-- ${JSON.stringify(parameters)}\n${plan.rows.map((row) => row['QUERY PLAN']).join('\n')}`);
  }
  return { text: parts.join('\n\n'), problems };
}

const ms = (value: number) => (value >= 100 ? value.toFixed(0) : value.toFixed(1));

await ensureSeeded();
const db = await openDatabase<Database>(databaseUrl, '');
try {
  const applied = await migrateToLatest(db, migrations);
  if (applied.length > 0) console.log(`Migrated: ${applied.join(', ')}`);

  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  const sizes = await client.query<{ owner_id: number; n: string; total: string; users: string }>(
    `select owner_id, count(*) as n, sum(count(*)) over () as total, count(*) over () as users
       from contacts group by owner_id order by count(*) desc, owner_id limit 2`,
  );
  const [big, small] = sizes.rows;
  if (!big || !small) throw new Error(`${values.database} holds no contacts.`);
  const users: User[] = [];
  for (const [label, row] of [
    ['2k', small],
    ['100k', big],
  ] as const) {
    // Every 20th contact (by id) is where filter values and birthdays are drawn from.
    const sample = await client.query<User['sample'][number]>(
      `select first_name, last_name, email, birthday::text from contacts where owner_id = $1 and id % 20 = 0 order by id`,
      [row.owner_id],
    );
    users.push({ label, id: row.owner_id, size: Number(row.n), sample: sample.rows });
  }
  console.log(
    `${values.database}: ${Number(big.total).toLocaleString('en')} contacts, ${big.users} users; user ${small.owner_id} has ${users[0]!.size.toLocaleString('en')}, user ${big.owner_id} has ${users[1]!.size.toLocaleString('en')}.`,
  );
  console.log(
    `${REQUESTS} distinct requests per query and user, ${CONCURRENCY} concurrent, pool of 10, in ${ROUNDS} rounds after as many of the reference; times in ms.\n`,
  );
  const referenceCall = reference(big.owner_id);

  const only = values.only?.split(',').map((s) => s.trim().toLowerCase());
  const selected = QUERIES.filter((q) => !only || only.some((o) => q.name.toLowerCase().includes(o)));
  const rows: string[] = [
    '| query | user | n | p50 | p99 | max | reference p99 | p99 ÷ reference | mean total | plan |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---|',
  ];
  const plans: string[] = [];
  let flagged = 0;
  for (const query of selected) {
    for (const user of users) {
      // Seeded by the query's place in QUERIES, so --only draws the same requests as a full run.
      const calls = requests(query, user, REQUESTS + WARMUP + 1, 1000 * QUERIES.indexOf(query) + user.id);
      const [explained, ...rest] = calls;
      await measure(db, rest.slice(0, WARMUP));
      const { latencies, totals, referenceLatencies } = await measureBesideReference(db, rest.slice(WARMUP), referenceCall);
      const { text, problems } = await explain(client, await statementsOf(explained![1]));
      flagged += problems.length;
      const mean = totals.reduce((a, b) => a + b, 0) / totals.length;
      const [p99, referenceP99] = [percentile(latencies, 99), percentile(referenceLatencies, 99)];
      rows.push(
        `| ${query.name} | ${user.label} | ${latencies.length} | ${ms(percentile(latencies, 50))} | ${ms(p99)} | ${ms(latencies.at(-1)!)} | ${ms(referenceP99)} | ${(p99 / referenceP99).toFixed(2)} | ${Math.round(mean).toLocaleString('en')} | ${problems.length ? `**${problems.join('; ')}**` : 'owner-scoped'} |`,
      );
      console.log(rows.at(-1));
      if (values.plans === 'all' || (values.plans === 'big' && user.label === '100k')) {
        plans.push(`### ${query.name}, ${user.label} user (${explained![0]})\n\n${text}`);
      }
    }
  }
  await client.end();
  console.log(`\n${rows.join('\n')}\n`);
  console.log(
    flagged
      ? `${flagged} plan problem(s) flagged above.`
      : 'Every plan reads contacts through an owner-scoped index condition; no sequential scan.',
  );
  if (plans.length) console.log(`\n${plans.join('\n\n')}`);
  if (flagged) process.exitCode = 1;
} finally {
  await db.destroy();
}
