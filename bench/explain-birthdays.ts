/**
 * Prints PostgreSQL's plan for the upcoming-birthday query exactly as the service sends it
 * (captured from the repository function, parameters included), against DATABASE_URL.
 * `npm run bench:scale` prints the plan of every contacts query.
 *
 *   DATABASE_URL=postgres://... npx tsx bench/explain-birthdays.ts [--user ID] [--days N] [--today YYYY-MM-DD] [--skip N] [--no-analyze]
 *
 * Without --user it takes the user with the most contacts.
 */
import { parseArgs } from 'node:util';
import { Kysely, PostgresDialect, type CompiledQuery } from 'kysely';
import pg from 'pg';
import { birthdayWindow } from '../src/contacts/birthdays.js';
import { listUpcomingBirthdays } from '../src/contacts/contacts.repository.js';
import type { Database } from '../src/db/database.js';

const { values } = parseArgs({
  options: {
    user: { type: 'string' },
    days: { type: 'string', default: '7' },
    today: { type: 'string' },
    'no-analyze': { type: 'boolean', default: false },
    skip: { type: 'string', default: '0' },
  },
});
const databaseUrl = process.env.DATABASE_URL;
if (!databaseUrl) {
  console.error('Set DATABASE_URL to the PostgreSQL database to explain against.');
  process.exit(2);
}

const pool = new pg.Pool({ connectionString: databaseUrl, max: 1 });
const captured: CompiledQuery[] = [];
const db = new Kysely<Database>({
  dialect: new PostgresDialect({ pool }),
  log: (event) => {
    if (event.level === 'query' && /^\s*(select|with)\b/i.test(event.query.sql)) captured.push(event.query);
  },
});

try {
  const ownerId = values.user
    ? Number(values.user)
    : (await pool.query<{ owner_id: number }>('select owner_id from contacts group by owner_id order by count(*) desc limit 1')).rows[0]
        ?.owner_id;
  if (!ownerId) throw new Error('No contacts in this database.');
  const today = values.today ? new Date(`${values.today}T12:00:00Z`) : new Date();
  const days = Number(values.days);
  const { rows: sizes } = await pool.query<{ total: string; owned: string }>(
    'select (select count(*) from contacts) as total, (select count(*) from contacts where owner_id = $1) as owned',
    [ownerId],
  );
  await listUpcomingBirthdays(db, ownerId, birthdayWindow(today, days), { skip: Number(values.skip), limit: 100 });
  if (captured.length === 0) throw new Error('No query was captured.');

  const options = values['no-analyze'] ? '' : '(ANALYZE, BUFFERS)';
  console.log(
    `contacts: ${sizes[0]?.total}; user ${ownerId}: ${sizes[0]?.owned}; today ${today.toISOString().slice(0, 10)}; time_range ${days}`,
  );
  for (const query of captured) {
    const plan = await pool.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${options} ${query.sql}`, [...query.parameters]);
    console.log(`\n${query.sql}\nparameters: ${JSON.stringify(query.parameters)}\n`);
    for (const row of plan.rows) console.log(row['QUERY PLAN']);
  }
} finally {
  await db.destroy();
}
