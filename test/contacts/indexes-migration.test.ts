/**
 * Migration 003 on a database that already holds contacts (as a live one would): it applies
 * outside a transaction, leaves only valid per-owner indexes, rebuilds an index an interrupted
 * CONCURRENTLY build left INVALID, can run again, and can be undone.
 */
import { type Kysely, sql } from 'kysely';
import t from 'tap';
import { migrateToLatest } from '../../plugins/migrate.js';
import { parseFilter } from '../../src/contacts/filter.js';
import { filterPredicate } from '../../src/contacts/filter-sql.js';
import type { Database } from '../../src/db/database.js';
import { migrations } from '../../src/db/migrations/index.js';
import { emptyDatabase } from '../helper.js';

const MIGRATION = '003-owner-scoped-indexes';
const before = Object.fromEntries(Object.entries(migrations).filter(([name]) => name < MIGRATION));
const through = Object.fromEntries(Object.entries(migrations).filter(([name]) => name <= MIGRATION));

/** The contacts indexes: name → valid. */
async function indexes(db: Kysely<Database>): Promise<Record<string, boolean>> {
  const { rows } = await sql<{ name: string; valid: boolean }>`
    select c.relname as name, i.indisvalid as valid
      from pg_index i join pg_class c on c.oid = i.indexrelid
     where i.indrelid = 'contacts'::regclass order by 1`.execute(db);
  return Object.fromEntries(rows.map((r) => [r.name, r.valid]));
}

const TEXT = ['email', 'first_name', 'last_name', 'phone'];
const LATEST = [
  'contacts_owner_birthday_id_idx',
  'contacts_owner_created_at_id_idx',
  'contacts_owner_email_key',
  ...TEXT.flatMap((c) => [`contacts_owner_${c}_lower_idx`, `contacts_owner_${c}_trgm_idx`]),
  'contacts_owner_id_idx',
  'contacts_owner_upcoming_idx',
  'contacts_owner_updated_at_id_idx',
  'contacts_pkey',
].sort();
const PREVIOUS = [
  ...TEXT.flatMap((c) => [`contacts_${c}_trgm_idx`, `contacts_owner_${c}_idx`]),
  'contacts_owner_birthday_idx',
  'contacts_owner_birthday_key_idx',
  'contacts_owner_email_key',
  'contacts_owner_id_idx',
  'contacts_pkey',
].sort();

const db = await emptyDatabase(t);
t.teardown(() => db.destroy());

t.test('applies to a populated database and leaves valid per-owner indexes', async (t) => {
  t.same(await migrateToLatest(db, before), Object.keys(before));
  const [owner, other] = await db
    .insertInto('users')
    .values(['a', 'b'].map((name) => ({ username: name, email: `${name}@example.com`, password_hash: 'x' })))
    .returning('id')
    .execute();
  await db
    .insertInto('contacts')
    .values(
      Array.from({ length: 200 }, (_, i) => ({
        owner_id: (i % 2 === 0 ? owner : other)!.id,
        first_name: `First${i}`,
        last_name: i % 3 === 0 ? 'Smith' : 'Jones',
        email: `c${i}@example.com`,
        phone: `+1555${String(i).padStart(7, '0')}`,
        birthday: '1990-02-28',
      })),
    )
    .execute();
  // An index of 003's name that a failed CONCURRENTLY build left behind: INVALID, and not 003's definition.
  await sql`create unique index concurrently contacts_owner_upcoming_idx on contacts (last_name)`.execute(db).then(
    () => t.fail('the duplicate last names should have failed the build'),
    () => {},
  );
  t.equal((await indexes(db)).contacts_owner_upcoming_idx, false, 'the failed build left an INVALID index');

  t.same(await migrateToLatest(db, through), [MIGRATION]);
  const latest = await indexes(db);
  t.same(Object.keys(latest).sort(), LATEST);
  t.ok(Object.values(latest).every(Boolean), 'every index is valid');
  const { rows } = await sql<{ def: string }>`select pg_get_indexdef('contacts_owner_upcoming_idx'::regclass) as def`.execute(db);
  t.match(
    rows[0]!.def,
    /^CREATE INDEX contacts_owner_upcoming_idx ON (public\.)?contacts USING btree \(owner_id, birthday_key, last_name, first_name, id\)$/,
    "rebuilt to 003's definition",
  );

  // The service's predicate, not listContacts: that reads tables of later migrations (contact_counts).
  const { total } = await db
    .selectFrom('contacts')
    .where('owner_id', '=', owner!.id)
    .where((eb) => filterPredicate(eb, parseFilter('last_name:ilike:SMI%')))
    .select((eb) => eb.fn.countAll<number>().as('total'))
    .executeTakeFirstOrThrow();
  t.equal(Number(total), 34, "the owner's Smiths, not the other owner's");
});

t.test('runs again without change, and down restores the previous indexes', async (t) => {
  const migration = migrations[MIGRATION]!;
  await migration.up(db);
  t.same(Object.keys(await indexes(db)).sort(), LATEST, 'a second run changes nothing');
  await migration.down!(db);
  t.same(Object.keys(await indexes(db)).sort(), PREVIOUS);
  await migration.up(db);
  t.same(Object.keys(await indexes(db)).sort(), LATEST);
});
