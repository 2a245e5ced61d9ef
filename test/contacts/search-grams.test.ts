/**
 * Migration 009's grams: a count of a short bare term or ilike `%run%` looks its run up in
 * contacts_large_owner_grams_idx (019) instead of testing each contact, for a large owner (promoted
 * here by hand). The lookup must count exactly what the row tests count, field by field and owner
 * by owner, and must be the indexed expression; before the owner's promotion the row tests answer.
 */
import { CompiledQuery, PostgresQueryCompiler, sql } from 'kysely';
import t from 'tap';
import { migrateToLatest } from '../../plugins/migrate.js';
import { listContacts, type PageRequest } from '../../src/contacts/contacts.repository.js';
import { parseFilter } from '../../src/contacts/filter.js';
import { countPredicate, searchGrams } from '../../src/contacts/filter-sql.js';
import { promoteOwner } from '../../src/contacts/large-owners.js';
import { migrations } from '../../src/db/migrations/index.js';
import { emptyDatabase, indexExpressions } from '../helper.js';

const db = await emptyDatabase(t);
t.teardown(() => db.destroy());
await migrateToLatest(db, migrations);

const [owner, other] = await db
  .insertInto('users')
  .values(['owner', 'other'].map((name) => ({ username: name, email: `${name}@example.com`, password_hash: 'x' })))
  .returning('id')
  .execute();
const CONTACTS = [
  { first_name: 'Ann', last_name: 'Jones', email: 'ann@example.com', phone: '+14155550123', birthday: '1990-01-01' },
  { first_name: 'Zoë', last_name: 'Ünal', email: 'zoe@mail.org', phone: '+442071234567', birthday: '1991-01-01' },
  { first_name: 'Ian', last_name: 'K', email: 'ian.k@example.com', phone: '+19998887777', birthday: '1992-01-01' },
  { first_name: 'Sofia', last_name: 'Lee', email: 'sofia@x.gr', phone: '+302101234567', birthday: '1993-01-01' },
];
// The other owner has the same contacts: a count that reached them would be too high.
await db
  .insertInto('contacts')
  .values([owner!, other!].flatMap(({ id }) => CONTACTS.map((contact) => ({ ...contact, owner_id: id }))))
  .execute();

t.test('the grams are the expression contacts_large_owner_grams_idx holds, for large owners only', async (t) => {
  const { probe, existing } = await indexExpressions(
    db,
    sql`using gin (${searchGrams}) where large_owner`,
    'contacts_large_owner_grams_idx',
  );
  t.equal(probe, existing);
});

t.test('a contact has each run of 1 to 3 characters of each lower-cased field, once, under its owner', async (t) => {
  const { rows } = await sql<{
    grams: string[];
  }>`select ${searchGrams} as grams from contacts where owner_id = ${owner!.id} and first_name = 'Ann'`.execute(db);
  const grams = rows[0]!.grams;
  const id = owner!.id;
  for (const gram of [`${id}:1:a`, `${id}:1:an`, `${id}:1:ann`, `${id}:2:jon`, `${id}:4:+`, `${id}:4:550`])
    t.ok(grams.includes(gram), gram);
  t.equal(new Set(grams).size, grams.length, 'no gram twice');
  t.notOk(grams.includes(`${id}:1:nj`), 'no run across two fields');
  t.notOk(grams.includes(`${id}:1:Ann`), 'lower-cased');
  t.notOk(grams.includes(`${id}:1:anne`), 'no run longer than 3');
});

/** Each filter's total and page sizes at limits 100 and 1, as listContacts answers now. */
async function answers(filters: readonly string[]): Promise<[number, number, number][]> {
  const found: [number, number, number][] = [];
  for (const filter of filters) {
    const all = await listContacts(db, owner!.id, parseFilter(filter), { skip: 0, limit: 100 });
    const first = await listContacts(db, owner!.id, parseFilter(filter), { skip: 0, limit: 1 });
    found.push([all.total, all.rows.length, first.rows.length]);
  }
  return found;
}

const SHORT_RUNS = ['a', 'AN', 'nj', '4-1', 'first_name:ilike:%AN%', 'last_name:contains:ON', 'email:endswith:.o', 'e,email:ilike:%ex%'];
// Subtests run in order: from this one on, the owners are large ones, as src/contacts/large-owners.ts makes them.
t.test('a promoted owner gets the answers the row tests gave, and all its contacts are marked', async (t) => {
  const unpromoted = await answers(SHORT_RUNS);
  for (const { id } of [owner!, other!]) await promoteOwner(db, id);
  t.same(await answers(SHORT_RUNS), unpromoted);
  const { rows } = await sql<{ unmarked: number }>`select count(*)::integer as unmarked from contacts where not large_owner`.execute(db);
  t.equal(rows[0]!.unmarked, 0);
});

t.test('a count by the grams is the number of matches, and a page holds them, walked or fetched', async (t) => {
  const EXPECTED: [string, number][] = [
    ['a', 4],
    ['AN', 2],
    ['ann', 1],
    ['nj', 0], // Ann, Jones: not a run of one field
    ['ÜN', 1],
    ['.', 4],
    ['@ex', 2],
    ['+1', 2],
    ['55', 1],
    ['4-1', 1], // the phone for 41
    ['(415', 1], // four characters: row tests
    ['-', 0],
    ['first_name:ilike:%AN%', 2],
    ['last_name:ilike:%e%', 2],
    ['email:ilike:%.K%', 1],
    ['first_name:ilike:%zz%', 0],
    ['last_name:contains:on', 1],
    ['last_name:contains:ON', 0], // Jones holds the run, but not in this case
    ['first_name:endswith:n', 2],
    ['email:endswith:.o', 0], // .org holds the run, but does not end with it
    ['email:like:%k@%', 1],
    ['an,birthday:gt:1991-06-01', 1],
    ['e,email:ilike:%ex%', 2],
    ['email:ilike:%EXAMPLE%', 2], // a run of 3 or more: the trigram indexes (022)
    ['first_name:ilike:_OFI%', 1],
  ];
  for (const [filter, expected] of EXPECTED) {
    // All matches on one page (fetched), and the first alone (walked unless at most one matches).
    for (const limit of [100, 1]) {
      const { total, rows } = await listContacts(db, owner!.id, parseFilter(filter), { skip: 0, limit });
      t.same([total, rows.length], [expected, Math.min(expected, limit)], `${filter} limit=${limit}`);
    }
  }
});

t.test('the grams serve short runs only, and a count of them names no owner separately', async (t) => {
  const counted = (filter: string, grams = true) =>
    db
      .selectFrom('contacts')
      .select('id')
      .where((eb) => countPredicate(eb, owner!.id, parseFilter(filter), grams))
      .compile().sql;
  const grams = searchGrams.compile(db).sql;
  for (const filter of ['a', 'ann', '4-1', 'email:ilike:%@ex%', 'first_name:ilike:%z%,birthday:gt:1990-01-01']) {
    t.ok(counted(filter).includes(`large_owner and ${grams} &&`), `${filter}: the grams, under the partial index's predicate`);
    t.notOk(counted(filter).includes('"owner_id" ='), `${filter}: no owner test`);
    t.notOk(counted(filter, false).includes(grams), `${filter}: row tests for an owner without grams`);
  }
  for (const filter of ['last_name:contains:an', 'email:endswith:.gr', 'email:ilike:%.gr']) {
    const where = counted(filter).replace('select "id" from "contacts" where ', '');
    t.ok(where.startsWith(`((large_owner and ${grams} && array[`) && where.includes(' like '), `${filter}: the grams, then a row test`);
  }
  for (const filter of [
    'anne',
    '(415',
    'last_name:contains:anne',
    'email:ilike:%a%e%',
    'email:ilike:a%',
    'email:ilike:%a\\%%',
    'birthday:gt:1990-01-01',
  ]) {
    t.notOk(counted(filter).includes(grams), `${filter}: row tests`);
    t.ok(counted(filter).includes('"owner_id" ='), `${filter}: the owner test`);
  }
});

t.test(
  "an ilike without a literal prefix states the partial trigram indexes' predicate for a large owner, which finds its matches",
  async (t) => {
    const counted = (filter: string, large: boolean) =>
      db
        .selectFrom('contacts')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .where((eb) => countPredicate(eb, owner!.id, parseFilter(filter), large));
    for (const filter of ['email:ilike:%xamp%', 'first_name:ilike:_ofi%', 'last_name:ilike:%ones']) {
      t.match(
        counted(filter, true).compile().sql,
        /\(large_owner and lower\("\w+"\) collate "C" like lower\(\$\d+::text\)\)/,
        `${filter}: under the predicate`,
      );
      t.notOk(counted(filter, false).compile().sql.includes('large_owner'), `${filter}: row tests for an ordinary owner`);
    }
    for (const filter of ['email:ilike:ann%', 'email:ilike:%a%n%', 'email:like:%example%', 'last_name:contains:jones']) {
      t.notOk(counted(filter, true).compile().sql.includes('large_owner'), `${filter}: no trigram lookup`);
    }
    // Among 3,000 contacts of the owner, in a transaction rolled back after, the planner reads the
    // partial index, which it may only if it sees the index's predicate implied.
    const explained = db.transaction().execute(async (trx) => {
      await trx
        .insertInto('contacts')
        .values(
          Array.from({ length: 3000 }, (_, i) => ({ owner_id: owner!.id, first_name: 'F', last_name: 'L', email: `n${i}@mail.test` })),
        )
        .execute();
      // As a vacuum would: the planner counts entries still in the GIN pending list as a full read.
      await sql`select gin_clean_pending_list('contacts_large_owner_email_trgm_idx')`.execute(trx);
      await sql`analyze contacts`.execute(trx);
      // The owner's are nearly all the rows here: reading them all would otherwise win.
      await sql`set local enable_seqscan = off`.execute(trx);
      const { sql: text, parameters } = counted('email:ilike:%zqxj%', true).compile();
      const { rows } = await trx.executeQuery<{ 'QUERY PLAN': string }>(CompiledQuery.raw(`explain (costs off) ${text}`, [...parameters]));
      throw Object.assign(new Error('rolled back'), { plan: rows.map((row) => row['QUERY PLAN']).join('\n') });
    });
    const plan = await explained.catch((error: Error & { plan?: string }) => error.plan);
    t.match(plan, /Bitmap Index Scan on contacts_large_owner_email_trgm_idx/);
    const { rows } = await sql<{ def: string }>`select pg_get_indexdef('contacts_large_owner_email_trgm_idx'::regclass) as def`.execute(db);
    t.match(rows[0]!.def, / USING gin \(owner_id, lower\(email\) COLLATE "C" gin_trgm_ops\) WHERE large_owner$/);
  },
);

t.test('scans of contacts are serial', async (t) => {
  const { rows } = await sql<{ options: string[] }>`select reloptions as options from pg_class where oid = 'contacts'::regclass`.execute(
    db,
  );
  t.same(rows[0]!.options, ['parallel_workers=0']);
});

/** Which ways to the page's ids listContacts's statement has, and which one ran (EXPLAIN ANALYZE of what it sends). */
async function pageWays(filter: string, page: PageRequest): Promise<Record<string, boolean>> {
  const statements: CompiledQuery[] = [];
  const compiler = new PostgresQueryCompiler();
  const recording = db.withPlugin({
    transformQuery: ({ node, queryId }) => (statements.push(compiler.compileQuery(node, queryId)), node),
    transformResult: async ({ result }) => result,
  });
  await listContacts(recording, owner!.id, parseFilter(filter), page);
  // The statement sent is the last one compiled (its subqueries were compiled on the way).
  const { sql: text, parameters } = statements.at(-1)!;
  const { rows } = await db.executeQuery<{ 'QUERY PLAN': string }>(
    CompiledQuery.raw(`explain (analyze, costs off, timing off) ${text}`, [...parameters]),
  );
  const lines = rows.map((row) => row['QUERY PLAN']);
  const ways: Record<string, boolean> = {};
  for (const [i, line] of lines.entries()) {
    if (!line.includes('One-Time Filter:')) continue;
    const way = line.includes('(NOT ') ? 'walked' : 'fetched';
    ways[way] = !lines
      .slice(i + 1)
      .find((next) => next.includes('->'))!
      .includes('never executed');
  }
  return ways;
}

t.test('a page of a short run is walked, or fetched by its grams when 3 · total² <= (skip + limit) · contacts', async (t) => {
  // The owner has 4 contacts; `a` is in all 4, `ann` in 1, `zzz` in none.
  const CASES: [string, PageRequest, Record<string, boolean>][] = [
    ['a', { skip: 0, limit: 1 }, { walked: true, fetched: false }],
    ['a', { skip: 5, limit: 6 }, { walked: true, fetched: false }], // 48 > 44
    ['a', { skip: 6, limit: 6 }, { walked: false, fetched: true }], // 48 <= 48
    ['ann', { skip: 0, limit: 1 }, { walked: false, fetched: true }],
    ['zzz', { skip: 0, limit: 1 }, { walked: false, fetched: true }],
    ['first_name:ilike:%A%,birthday:gt:1990-06-01', { skip: 0, limit: 1 }, { walked: true, fetched: false }],
    ['anne', { skip: 0, limit: 1 }, {}], // no short run: the row tests only
    ['', { skip: 0, limit: 1 }, {}],
  ];
  for (const [filter, page, ways] of CASES) t.same(await pageWays(filter, page), ways, `${filter} skip=${page.skip} limit=${page.limit}`);
  // Either way, the same page.
  const ids = async (page: PageRequest) => (await listContacts(db, owner!.id, parseFilter('a'), page)).rows.map((row) => row.id);
  t.same(await ids({ skip: 1, limit: 2 }), (await ids({ skip: 0, limit: 12 })).slice(1, 3));
});
