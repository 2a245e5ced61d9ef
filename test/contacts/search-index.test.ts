/**
 * The bare term's search key (src/contacts/filter-sql.ts) is the expression migration 007 indexed:
 * were they to drift apart (a new `x-search` field without a migration), PostgreSQL would lower-case
 * every field of every row again, with the same answers, so no answer could tell.
 */
import { sql } from 'kysely';
import t from 'tap';
import { migrateToLatest } from '../../plugins/migrate.js';
import { parseFilter } from '../../src/contacts/filter.js';
import { filterPredicate, searchKey } from '../../src/contacts/filter-sql.js';
import { migrations } from '../../src/db/migrations/index.js';
import { emptyDatabase, indexExpressions } from '../helper.js';

const db = await emptyDatabase(t);
t.teardown(() => db.destroy());
await migrateToLatest(db, migrations);

t.test('the search key is the expression contacts_owner_search_idx holds', async (t) => {
  const { probe, existing } = await indexExpressions(db, sql`(owner_id, id, ${searchKey})`, 'contacts_owner_search_idx');
  t.equal(probe, existing);
});

t.test('a bare term is searched in the key', async (t) => {
  const where = (filter: string) =>
    db
      .selectFrom('contacts')
      .select('id')
      .where((eb) => filterPredicate(eb, parseFilter(filter)))
      .compile().sql;
  const key = searchKey.compile(db).sql;
  t.ok(where('ann').includes(`${key} like`), 'a plain term');
  t.ok(where('415 555').includes(`${key} like`), 'a phone number typed with separators');
  t.notOk(where('ann\u001flee').includes(key), 'not a term holding the separator');
});
