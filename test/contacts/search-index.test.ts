/**
 * The bare term's search key (src/contacts/filter-sql.ts) is the expression migration 007 indexed:
 * were they to drift apart (a new `x-search` field without a migration), PostgreSQL would lower-case
 * every field of every row again, with the same answers, so no answer could tell.
 */
import { type Kysely, sql } from 'kysely';
import t from 'tap';
import { migrateToLatest } from '../../plugins/migrate.js';
import { parseFilter } from '../../src/contacts/filter.js';
import { filterPredicate, searchKey } from '../../src/contacts/filter-sql.js';
import type { Database } from '../../src/db/database.js';
import { migrations } from '../../src/db/migrations/index.js';
import { emptyDatabase } from '../helper.js';

const db = await emptyDatabase(t);
t.teardown(() => db.destroy());
await migrateToLatest(db, migrations);

/** The index's expressions as PostgreSQL stores them, without where in the statement they were written. */
const expressionsOf = async (trx: Kysely<Database>, index: string): Promise<string> => {
  const { rows } = await sql<{ expressions: string }>`
    select regexp_replace(indexprs::text, ' :location -?[0-9]+', '', 'g') as expressions
      from pg_index where indexrelid = to_regclass(${index})`.execute(trx);
  return rows[0]!.expressions;
};

t.test('the search key is the expression contacts_owner_search_idx holds', async (t) => {
  await db
    .transaction()
    .execute(async (trx) => {
      await sql`create index search_key_probe on contacts (owner_id, id, ${searchKey})`.execute(trx);
      t.equal(await expressionsOf(trx, 'search_key_probe'), await expressionsOf(trx, 'contacts_owner_search_idx'));
      throw new Error('rolled back');
    })
    .catch((error: Error) => t.equal(error.message, 'rolled back', 'the probe index is not kept'));
});

t.test('a bare term is searched in the key', async (t) => {
  const where = (filter: string) => db.selectFrom('contacts').select('id').where((eb) => filterPredicate(eb, parseFilter(filter))).compile().sql;
  const key = searchKey.compile(db).sql;
  t.ok(where('ann').includes(`${key} like`), 'a plain term');
  t.ok(where('415 555').includes(`${key} like`), 'a phone number typed with separators');
  t.notOk(where('ann\u001flee').includes(key), 'not a term holding the separator');
});
