/**
 * Migration 008's per-owner counts: filled from the contacts a live database already holds, then
 * kept exact by every kind of write (a many-row insert or delete, concurrent ones, a user's
 * deletion), so that an unfiltered list's X-Total-Count can read them.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { type Kysely, sql } from 'kysely';
import t from 'tap';
import { openDatabase } from '../../plugins/db.js';
import { migrateToLatest } from '../../plugins/migrate.js';
import { listContacts } from '../../src/contacts/contacts.repository.js';
import type { Database } from '../../src/db/database.js';
import { migrations } from '../../src/db/migrations/index.js';
import { backend, testEnv } from '../helper.js';

const MIGRATION = '008-contact-counts';
const before = Object.fromEntries(Object.entries(migrations).filter(([name]) => name < MIGRATION));

async function emptyDatabase(): Promise<Kysely<Database>> {
  if (backend === 'postgres') return openDatabase<Database>((await testEnv(t)).DATABASE_URL!, '');
  const dir = await mkdtemp(path.join(tmpdir(), 'contacts-counts-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return openDatabase<Database>(null, path.join(dir, 'pgdata'));
}

const db = await emptyDatabase();
t.teardown(() => db.destroy());

let serial = 0;
const contactsOf = (ownerId: number, n: number) =>
  Array.from({ length: n }, () => ({
    owner_id: ownerId,
    first_name: 'Ann',
    last_name: 'Lee',
    email: `c${++serial}@example.com`,
    phone: '+14155550123',
    birthday: '1990-02-28',
  }));

/** The kept counts and the counted ones, owner by owner (owners without contacts count 0 or are absent). */
async function keptAndCounted(): Promise<{ kept: Record<number, number>; counted: Record<number, number> }> {
  const byOwner = async (counts: ReturnType<typeof sql<{ owner_id: number; contacts: number }>>) =>
    Object.fromEntries((await counts.execute(db)).rows.map((row) => [row.owner_id, row.contacts]));
  return {
    kept: await byOwner(sql`select owner_id, sum(contacts)::integer as contacts from contact_counts group by owner_id having sum(contacts) > 0 order by owner_id`),
    counted: await byOwner(sql`select owner_id, count(*)::integer as contacts from contacts group by owner_id order by owner_id`),
  };
}

t.test('counts the contacts a populated database already holds', async (t) => {
  t.same(await migrateToLatest(db, before), Object.keys(before));
  const [alice, bob] = await db
    .insertInto('users')
    .values(['alice', 'bob'].map((name) => ({ username: name, email: `${name}@example.com`, password_hash: 'x' })))
    .returning('id')
    .execute();
  await db.insertInto('contacts').values([...contactsOf(alice!.id, 30), ...contactsOf(bob!.id, 12)]).execute();

  t.same(await migrateToLatest(db, migrations), Object.keys(migrations).filter((name) => name >= MIGRATION));
  const { kept } = await keptAndCounted();
  t.same(kept, { [alice!.id]: 30, [bob!.id]: 12 });
  t.equal((await listContacts(db, alice!.id, [], { skip: 0, limit: 5 })).total, 30, 'the list reads the count');
});

t.test('every kind of write keeps the counts exact', async (t) => {
  const [carol, dave] = await db
    .insertInto('users')
    .values(['carol', 'dave'].map((name) => ({ username: name, email: `${name}@example.com`, password_hash: 'x' })))
    .returning('id')
    .execute();
  t.equal((await listContacts(db, carol!.id, [], { skip: 0, limit: 5 })).total, 0, 'an owner who never had a contact has 0');

  // Two owners in one statement, then one at a time, many at once.
  await db.insertInto('contacts').values([...contactsOf(carol!.id, 7), ...contactsOf(dave!.id, 5)]).execute();
  const inserted = await Promise.all(contactsOf(carol!.id, 40).map((row) => db.insertInto('contacts').values(row).returning('id').executeTakeFirstOrThrow()));
  await Promise.all(inserted.slice(0, 25).map(({ id }) => db.deleteFrom('contacts').where('id', '=', id).execute()));
  await db.deleteFrom('contacts').where('owner_id', '=', dave!.id).where('id', '>', 0).execute();
  await db.deleteFrom('contacts').where('id', '=', -1).execute();
  t.equal((await listContacts(db, carol!.id, [], { skip: 0, limit: 5 })).total, 7 + 40 - 25);
  t.equal((await listContacts(db, dave!.id, [], { skip: 0, limit: 5 })).total, 0);
  const afterWrites = await keptAndCounted();
  t.same(afterWrites.kept, afterWrites.counted);
  if (backend === 'postgres') {
    const shards = await db.selectFrom('contact_counts').select('shard').where('owner_id', '=', carol!.id).execute();
    t.ok(shards.length > 1, `concurrent writes on several connections add to several shards (${shards.length})`);
  }

  await db.deleteFrom('users').where('id', '=', carol!.id).execute();
  t.same(await db.selectFrom('contact_counts').select('contacts').where('owner_id', '=', carol!.id).execute(), [], "a deleted user's count goes with them");
  const afterDeletion = await keptAndCounted();
  t.same(afterDeletion.kept, afterDeletion.counted);
});

t.test('down removes the counts and their triggers', async (t) => {
  await migrations[MIGRATION]!.down!(db);
  const { rows } = await sql<{ name: string }>`select tgname as name from pg_trigger where tgrelid = 'contacts'::regclass and tgname like 'contacts_count_%'`.execute(db);
  t.same(rows, []);
  t.equal((await sql<{ table: string | null }>`select to_regclass('contact_counts')::text as table`.execute(db)).rows[0]!.table, null);
});
