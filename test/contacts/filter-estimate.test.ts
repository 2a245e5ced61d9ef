/**
 * A case-sensitive condition that the key's index serves (eq, in_, a pattern with a literal prefix)
 * compares the lower-cased key, then the value. Estimated as independent, the two shares would be
 * multiplied: `J%er` seemed to match 162 of 100,000 contacts where 4,001 do, and its page read and
 * sorted every match instead of walking to the page. The planner must see the key's share alone.
 */
import { CompiledQuery } from 'kysely';
import t from 'tap';
import { parseFilter } from '../../src/contacts/filter.js';
import { filterPredicate } from '../../src/contacts/filter-sql.js';
import { buildContactsApp, createUser } from './fixtures.js';

const app = await buildContactsApp(t);
const user = await createUser(app);

// One contact in five of each name: a share the two comparisons would square to one in twenty-five.
const NAMES = ['Jennifer', 'Mark', 'Sofia', 'Ian', 'Zoë'];
const CONTACTS = 1000;
await app.db
  .insertInto('contacts')
  .values(
    Array.from({ length: CONTACTS }, (_, i) => ({
      owner_id: user.id,
      first_name: NAMES[i % NAMES.length]!,
      last_name: 'Lee',
      email: `c${i}@example.com`,
      phone: `+1555${String(i).padStart(7, '0')}`,
      birthday: '1990-01-01',
    })),
  )
  .execute();
await app.db.executeQuery(CompiledQuery.raw('analyze contacts'));

/** The planner's estimate of the rows `filter` matches. */
async function estimate(filter: string): Promise<number> {
  const query = app.db
    .selectFrom('contacts')
    .select('id')
    .where((eb) => filterPredicate(eb, parseFilter(filter)))
    .compile();
  const { rows } = await app.db.executeQuery<{ 'QUERY PLAN': [{ Plan: { 'Plan Rows': number } }] }>(
    CompiledQuery.raw(`explain (format json) ${query.sql}`, [...query.parameters]),
  );
  return rows[0]!['QUERY PLAN'][0].Plan['Plan Rows'];
}

t.test("a case-sensitive condition is estimated by its key's share, halved at most", async (t) => {
  const MATCHES: [string, number][] = [
    ['first_name:eq:Jennifer', 200],
    ['first_name:in_:["Jennifer","Mark"]', 400],
    ['first_name:startswith:Je', 200],
    ['first_name:like:J%er', 200],
  ];
  for (const [filter, matches] of MATCHES) {
    const rows = await estimate(filter);
    t.ok(rows >= matches / 2 && rows <= matches, `${filter}: estimated ${rows}, ${matches} match`);
  }
});
