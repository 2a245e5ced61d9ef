/**
 * The filter SQL compares lower-cased keys (the per-owner indexes' key) and, for case-sensitive
 * operators, the value too. Whatever the case mapping of the database (libc on PostgreSQL, C on
 * PGlite), the answers must be exactly PostgreSQL's own LIKE, ILIKE and =, non-ASCII text included.
 */
import { sql } from 'kysely';
import t from 'tap';
import * as repository from '../../src/contacts/contacts.repository.js';
import { type Condition, parseFilter } from '../../src/contacts/filter.js';
import { buildContactsApp, createUser } from './fixtures.js';

const app = await buildContactsApp(t);
const user = await createUser(app);
const other = await createUser(app);

const NAMES = [
  'Élodie',
  'élodie',
  'ÉLODIE',
  'Ünal',
  'ünal',
  'Straße',
  'STRASSE',
  'Σοφία',
  'ΣΟΦΊΑ',
  'Οδυσσέας',
  'ΟΔΥΣΣΈΑΣ',
  'İlker',
  'ilker',
  'Ǆemal',
  'ǆemal',
  'ﬁona',
  'Kelvin',
  'kelvin',
  'Smith',
  'SMITH',
  'smith',
];
for (const [i, name] of NAMES.entries()) {
  await app.db
    .insertInto('contacts')
    .values(
      [user.id, other.id].map((owner_id) => ({
        owner_id,
        first_name: name,
        last_name: NAMES[(i + 7) % NAMES.length]!,
        email: `${name}.${i}@Ex.com`,
        phone: `+1555000${String(i).padStart(4, '0')}`,
        birthday: '1990-01-01',
      })),
    )
    .execute();
}

/** The owner's ids matching `condition` by PostgreSQL's own operators, in id order. */
async function reference(condition: Condition): Promise<number[]> {
  const where = (() => {
    switch (condition.type) {
      case 'eq':
        return sql`${sql.ref(condition.field)} = ${condition.value}`;
      case 'in':
        return sql`${sql.ref(condition.field)} = any(${condition.values}::text[])`;
      case 'like':
        return condition.caseInsensitive
          ? sql`${sql.ref(condition.field)} ilike ${condition.pattern}`
          : sql`${sql.ref(condition.field)} like ${condition.pattern}`;
      case 'search':
        return sql`(first_name ilike ${condition.pattern} or last_name ilike ${condition.pattern} or email ilike ${condition.pattern}
                    or (${condition.phonePattern}::text is not null and phone ilike ${condition.phonePattern}))`;
      default:
        throw new Error(`no reference for ${condition.type}`);
    }
  })();
  const { rows } = await sql<{ id: number }>`select id from contacts where owner_id = ${user.id} and ${where} order by id`.execute(app.db);
  return rows.map((r) => r.id);
}

const FRAGMENTS = [
  'é',
  'É',
  'ÉLO',
  'élo',
  'ü',
  'Ü',
  'ß',
  'SS',
  'ss',
  'σ',
  'Σ',
  'ς',
  'ΣΣ',
  'ία',
  'ΊΑ',
  'İ',
  'i',
  'I',
  'ǆ',
  'Ǆ',
  'ǅ',
  'ﬁ',
  'fi',
  'K',
  'k',
  'smi',
  'SMI',
  'Smith',
  'ex.',
  'EX.',
];
const expressions: string[] = [];
for (const fragment of FRAGMENTS) {
  expressions.push(fragment);
  for (const field of ['first_name', 'last_name', 'email']) {
    for (const op of ['contains', 'startswith', 'endswith', 'eq']) expressions.push(`${field}:${op}:${fragment}`);
    expressions.push(
      `${field}:like:%${fragment}%`,
      `${field}:like:${fragment}%`,
      `${field}:ilike:%${fragment}%`,
      `${field}:ilike:${fragment}%`,
      `${field}:ilike:%${fragment}`,
    );
  }
}
for (const name of NAMES)
  expressions.push(
    `first_name:eq:${name}`,
    `first_name:ilike:${name}`,
    `first_name:in_:${JSON.stringify([name, name.toUpperCase(), name.toLowerCase()])}`,
  );

t.test('each filter answers exactly as PostgreSQL LIKE, ILIKE and = do', async (t) => {
  let nonEmpty = 0;
  for (const expression of expressions) {
    const [condition] = parseFilter(expression);
    const expected = await reference(condition!);
    const page = await repository.listContacts(app.db, user.id, [condition!], { skip: 0, limit: 1000 });
    const actual = page.rows.map((r) => r.id);
    if (expected.length > 0) nonEmpty++;
    if (page.total !== expected.length || JSON.stringify(actual) !== JSON.stringify(expected)) {
      t.fail(`${expression}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)} (total ${page.total})`);
    }
  }
  t.ok(nonEmpty > expressions.length / 3, `${expressions.length} expressions compared, ${nonEmpty} matched something`);
});
