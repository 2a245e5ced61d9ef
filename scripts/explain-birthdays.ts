/**
 * Prints PostgreSQL's plan for the upcoming-birthday query exactly as the service sends it
 * (captured from the repository function, parameters included), against DATABASE_URL.
 *
 *   DATABASE_URL=postgres://... npx tsx scripts/explain-birthdays.ts [--user ID] [--days N] [--today YYYY-MM-DD] [--no-analyze]
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
  },
});
const databaseUrl = process.env.DATABASE_URL;
if (!databaseUrl) {
  console.error('Set DATABASE_URL to the PostgreSQL database to explain against.');
  process.exit(2);
}

const pool = new pg.Pool({ connectionString: databaseUrl, max: 1 });
let captured: CompiledQuery | undefined;
const db = new Kysely<Database>({
  dialect: new PostgresDialect({ pool }),
  log: (event) => {
    if (event.level === 'query') captured = event.query;
  },
});

try {
  const ownerId = values.user
    ? Number(values.user)
    : (await pool.query<{ owner_id: number }>('select owner_id from contacts group by owner_id order by count(*) desc limit 1')).rows[0]?.owner_id;
  if (!ownerId) throw new Error('No contacts in this database.');
  const today = values.today ? new Date(`${values.today}T12:00:00Z`) : new Date();
  const days = Number(values.days);
  const { rows: sizes } = await pool.query<{ total: string; owned: string }>(
    'select (select count(*) from contacts) as total, (select count(*) from contacts where owner_id = $1) as owned',
    [ownerId],
  );
  await listUpcomingBirthdays(db, ownerId, birthdayWindow(today, days), { skip: 0, limit: 100 });
  if (!captured) throw new Error('The query was not captured.');

  const options = values['no-analyze'] ? '' : '(ANALYZE, BUFFERS)';
  const plan = await pool.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${options} ${captured.sql}`, [...captured.parameters]);
  console.log(`contacts: ${sizes[0]?.total}; user ${ownerId}: ${sizes[0]?.owned}; today ${today.toISOString().slice(0, 10)}; time_range ${days}`);
  console.log(`\n${captured.sql}\nparameters: ${JSON.stringify(captured.parameters)}\n`);
  for (const row of plan.rows) console.log(row['QUERY PLAN']);
} finally {
  await db.destroy();
}
