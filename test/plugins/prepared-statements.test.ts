/** Statements sent by name and planned once per connection, and the ones built once (plugins/db.ts). */
import { type Kysely, sql } from 'kysely';
import t from 'tap';
import { prepared, preparedStatement } from '../../plugins/db.js';
import type { Database } from '../../src/db/database.js';
import { backend, emptyDatabase } from '../helper.js';

/** A sum of two numbers and a label: values in three places, one of them twice. */
const sumOf = (db: Kysely<Database>, a: number, b: number, label: string) =>
  db.selectNoFrom([
    sql<number>`${a}::integer + ${b}::integer + ${a}::integer`.as('sum'),
    sql<string>`${label}::text || ${'!'}::text`.as('label'),
  ]);

t.test(
  'a statement marked prepared goes to PostgreSQL by name, parsed once per connection',
  { skip: backend === 'embedded' && 'PGlite has no named statements' },
  async (t) => {
    const db = await emptyDatabase(t);
    t.teardown(() => db.destroy());
    await db.connection().execute(async (connection) => {
      const first = await connection.executeQuery(prepared(sumOf(connection, 1, 2, 'a')));
      const second = await connection.executeQuery(prepared(sumOf(connection, 10, 20, 'b')));
      const unmarked = connection.selectNoFrom(sql<number>`${5}::integer * 2`.as('sum')).compile();
      t.same((await connection.executeQuery(unmarked)).rows, [{ sum: 10 }]);
      t.same(
        [...first.rows, ...second.rows],
        [
          { sum: 4, label: 'a!' },
          { sum: 40, label: 'b!' },
        ],
      );
      const { rows } = await sql<{ name: string; statement: string }>`select name, statement from pg_prepared_statements`.execute(
        connection,
      );
      t.same(
        rows.map(({ statement }) => statement),
        [sumOf(connection, 0, 0, '').compile().sql],
        'one statement, for both calls; the unmarked one is not kept',
      );
      t.match(rows[0]!.name, /^prepared_\d+$/);
    });
  },
);

t.test('a statement built once binds each call’s values where the builder put them', async (t) => {
  const db = await emptyDatabase(t);
  t.teardown(() => db.destroy());
  let builds = 0;
  const sumStatement = preparedStatement(['a', 'b', 'label'], (db: Kysely<Database>, { a, b, label }) => {
    builds++;
    return sumOf(db, a, b, label);
  });
  for (const [a, b, label] of [
    [1, 2, 'x'],
    [7, -3, 'y'],
  ] as const) {
    const bound = sumStatement(db, { a, b, label });
    const built = sumOf(db, a, b, label).compile();
    t.same({ sql: bound.sql, parameters: bound.parameters }, { sql: built.sql, parameters: built.parameters });
    t.same((await db.executeQuery(bound)).rows, [{ sum: 2 * a + b, label: `${label}!` }]);
  }
  t.equal(builds, 1);
});
