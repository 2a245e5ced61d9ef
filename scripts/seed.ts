/**
 * `npm run seed -- --users U --contacts-per-user C [--big-user B] [--seed N] [--password P] [--force]`
 * Fills the configured database (DATABASE_URL, or the embedded one) with deterministic fake data:
 * COPY on PostgreSQL, batched inserts on the embedded database. Owners with more contacts than
 * LARGE_OWNER_CONTACTS are loaded as large owners (src/contacts/large-owners.ts), their contacts
 * marked as they go in, so the grams are built once with the other indexes.
 */
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { parseArgs } from 'node:util';
import bcrypt from 'bcryptjs';
import { type Insertable, sql } from 'kysely';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { loadConfig } from '../plugins/config.js';
import { openDatabase } from '../plugins/db.js';
import type { ContactsTable, Database } from '../src/db/database.js';
import { migrateToLatest } from '../plugins/migrate.js';
import { migrations } from '../src/db/migrations/index.js';
import { seededRandom } from '../test/random.js';

const USAGE = `Usage: npm run seed -- --users U --contacts-per-user C [options]
  --big-user B    the first user gets B contacts instead of C (a skewed load: --users 451
                  --contacts-per-user 2000 --big-user 100000 is 1,000,000 contacts)
  --seed N        random seed (default 42): the same seed gives the same data
  --password P    give every user password P and mark them verified, so a benchmark can log in
                  (off by default: seeded users then have no usable password)
  --force         wipe existing users and contacts first (refused without it when users exist)`;

const { values } = parseArgs({
  options: {
    users: { type: 'string' },
    'contacts-per-user': { type: 'string' },
    'big-user': { type: 'string' },
    seed: { type: 'string', default: '42' },
    password: { type: 'string' },
    force: { type: 'boolean', default: false },
    help: { type: 'boolean', default: false },
  },
});
const wholeNumber = (raw: string | undefined) => (raw !== undefined && /^\d+$/.test(raw) ? Number(raw) : NaN);
const users = wholeNumber(values.users);
const perUser = wholeNumber(values['contacts-per-user']);
const bigUser = values['big-user'] === undefined ? perUser : wholeNumber(values['big-user']);
const seed = wholeNumber(values.seed);
if (values.help || !(users >= 1) || !(perUser >= 0) || !(bigUser >= 0) || Number.isNaN(seed)) {
  console.error(USAGE);
  process.exit(values.help ? 0 : 2);
}

const FIRST = [
  'James',
  'Mary',
  'John',
  'Patricia',
  'Robert',
  'Jennifer',
  'Michael',
  'Linda',
  'William',
  'Elizabeth',
  'David',
  'Barbara',
  'Richard',
  'Susan',
  'Joseph',
  'Jessica',
  'Thomas',
  'Sarah',
  'Charles',
  'Karen',
  'Zoë',
  'José',
  'Łukasz',
  'Aiko',
  'Olusegun',
];
const LAST = [
  'Smith',
  'Johnson',
  'Williams',
  'Brown',
  'Jones',
  'Garcia',
  'Miller',
  'Davis',
  'Rodriguez',
  'Martinez',
  'Hernandez',
  'Lopez',
  'Gonzalez',
  'Wilson',
  'Anderson',
  'Thomas',
  'Taylor',
  'Moore',
  'Jackson',
  "O'Brien",
  'Müller',
  'Nakamura',
  'Okafor',
];
const DAY_MS = 86_400_000;
const today = Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), new Date().getUTCDate());

/** Birthdays spread uniformly over the last 90 years (leap days included), none today or later. */
function birthday(rand: () => number): string {
  const daysAgo = 1 + Math.floor(rand() * 90 * 365.25);
  return new Date(today - daysAgo * DAY_MS).toISOString().slice(0, 10);
}

type ContactRow = Required<
  Pick<Insertable<ContactsTable>, 'owner_id' | 'first_name' | 'last_name' | 'email' | 'phone' | 'birthday' | 'large_owner'>
>;

function* contactsOf(ownerId: number, count: number, rand: () => number): Generator<ContactRow> {
  const large = count > config.largeOwnerContacts;
  for (let i = 0; i < count; i++) {
    const first = FIRST[Math.floor(rand() * FIRST.length)]!;
    const last = LAST[Math.floor(rand() * LAST.length)]!;
    yield {
      owner_id: ownerId,
      first_name: first,
      last_name: last,
      email: `${first}.${last}.${i}@example.com`.toLowerCase().replace(/[^a-z0-9.@]/g, ''),
      phone: `+1${String(2_000_000_000 + Math.floor(rand() * 7_999_999_999))}`,
      birthday: birthday(rand),
      large_owner: large,
    };
  }
}

/** A progress bar on a terminal, plain lines every 10% elsewhere. */
function progress(total: number): (done: number) => void {
  const started = Date.now();
  let lastDecile = -1;
  return (done) => {
    const fraction = total === 0 ? 1 : done / total;
    const seconds = ((Date.now() - started) / 1000).toFixed(1);
    if (process.stdout.isTTY) {
      const width = 30;
      const bar = '#'.repeat(Math.round(fraction * width)).padEnd(width, '.');
      process.stdout.write(`\r[${bar}] ${(fraction * 100).toFixed(0).padStart(3)}% ${done}/${total} contacts ${seconds}s`);
      if (done === total) process.stdout.write('\n');
    } else if (Math.floor(fraction * 10) > lastDecile) {
      lastDecile = Math.floor(fraction * 10);
      console.log(`${(fraction * 100).toFixed(0)}% ${done}/${total} contacts ${seconds}s`);
    }
  };
}

/**
 * Runs the CREATE INDEX statements `definitions` on as many sessions as the machine has cores,
 * the GIN ones first (the longest builds), so that every core is busy until the last one ends.
 */
async function buildIndexes(databaseUrl: string, definitions: string[]): Promise<void> {
  const queue = [...definitions].sort((a, b) => Number(/ USING gin /i.test(b)) - Number(/ USING gin /i.test(a)));
  const sessions = Math.min(os.availableParallelism(), queue.length);
  await Promise.all(
    Array.from({ length: sessions }, async () => {
      const client = new pg.Client({ connectionString: databaseUrl });
      await client.connect();
      try {
        // One core per session: a btree build's own parallel workers would only take another's.
        await client.query("set maintenance_work_mem = '256MB'; set max_parallel_maintenance_workers = 0");
        for (let definition = queue.shift(); definition !== undefined; definition = queue.shift()) await client.query(definition);
      } finally {
        await client.end();
      }
    }),
  );
}

const config = await loadConfig();
const db = await openDatabase<Database>(config.databaseUrl, path.join(config.dataDir, 'pgdata'));
const started = Date.now();
try {
  await migrateToLatest(db, migrations);
  const { count } = await db
    .selectFrom('users')
    .select((eb) => eb.fn.countAll<number>().as('count'))
    .executeTakeFirstOrThrow();
  if (count > 0) {
    if (!values.force) {
      console.error(`The database already holds ${count} users; pass --force to wipe them (and their contacts) first.`);
      process.exit(1);
    }
    await sql`truncate users, user_names, user_emails restart identity cascade`.execute(db);
  }

  const rand = seededRandom(seed);
  // One hash for everyone: hashing each user's password at cost 12 would dominate the run.
  const passwordHash = values.password ? await bcrypt.hash(values.password, config.bcryptCost) : '!seeded-without-password';
  const userRows = Array.from({ length: users }, (_, i) => ({
    username: `user${String(i + 1).padStart(7, '0')}`,
    email: `user${i + 1}@example.com`,
    password_hash: passwordHash,
    is_verified: values.password !== undefined,
  }));
  const ownerIds: number[] = [];
  for (let i = 0; i < userRows.length; i += 1000) {
    const inserted = await db
      .insertInto('users')
      .values(userRows.slice(i, i + 1000))
      .returning(['id', 'username', 'email'])
      .execute();
    // The keys sign-in finds users by (migration 034); the seeded names are lower-case already.
    await db
      .insertInto('user_names')
      .values(inserted.map((row) => ({ name: row.username, user_id: row.id })))
      .execute();
    await db
      .insertInto('user_emails')
      .values(inserted.map((row) => ({ email: row.email, user_id: row.id })))
      .execute();
    ownerIds.push(...inserted.map((row) => row.id));
  }

  const countOf = (index: number) => (index === 0 ? bigUser : perUser);
  const total = bigUser + (users - 1) * perUser;
  const report = progress(total);
  let done = 0;
  function* allContacts(): Generator<ContactRow> {
    for (const [index, ownerId] of ownerIds.entries()) {
      for (const row of contactsOf(ownerId, countOf(index), rand)) {
        yield row;
        if (++done % 10_000 === 0) report(done);
      }
    }
  }

  if (config.databaseUrl) {
    const client = new pg.Client({ connectionString: config.databaseUrl });
    await client.connect();
    try {
      // Building each secondary index once after the load is several times faster than
      // maintaining it row by row (the trigram GIN indexes above all); contacts is empty here.
      const { rows: indexes } = await client.query<{ indexname: string; indexdef: string }>(
        `select i.indexname, i.indexdef from pg_indexes i
          where i.tablename = 'contacts' and i.schemaname = current_schema()
            and not exists (select 1 from pg_constraint c where c.conname = i.indexname)`,
      );
      for (const { indexname } of indexes) await client.query(`drop index ${pg.escapeIdentifier(indexname)}`);
      const copy = client.query(
        copyFrom('COPY contacts (owner_id, first_name, last_name, email, phone, birthday, large_owner) FROM STDIN'),
      );
      const lines = Readable.from(
        (function* () {
          let chunk = '';
          for (const c of allContacts()) {
            chunk += `${c.owner_id}\t${c.first_name}\t${c.last_name}\t${c.email}\t${c.phone}\t${c.birthday}\t${c.large_owner}\n`;
            if (chunk.length > 64_000) {
              yield chunk;
              chunk = '';
            }
          }
          if (chunk) yield chunk;
        })(),
      );
      await pipeline(lines, copy);
      await buildIndexes(
        config.databaseUrl,
        indexes.map(({ indexdef }) => indexdef),
      );
      // Vacuum too: it sets the visibility map, so counts and id pages can be index-only scans from the start.
      await client.query('vacuum analyze contacts');
    } finally {
      await client.end();
    }
  } else {
    let batch: ContactRow[] = [];
    for (const row of allContacts()) {
      batch.push(row);
      if (batch.length === 2000) {
        await db.insertInto('contacts').values(batch).execute();
        batch = [];
      }
    }
    if (batch.length > 0) await db.insertInto('contacts').values(batch).execute();
  }
  const large = ownerIds.filter((_, index) => countOf(index) > config.largeOwnerContacts);
  if (large.length > 0)
    await db
      .insertInto('large_owners')
      .values(large.map((ownerId) => ({ owner_id: ownerId, ready: true })))
      .execute();
  report(total);
  console.log(`Seeded ${users} users and ${total} contacts in ${((Date.now() - started) / 1000).toFixed(1)} s (seed ${seed}).`);
} finally {
  await db.destroy();
}
