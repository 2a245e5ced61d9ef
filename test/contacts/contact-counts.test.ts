/**
 * Migration 008's per-owner counts, kept since 020 in one row per database session's shard: filled
 * from the contacts a live database already holds, then kept exact by every kind of write (a
 * many-row insert or delete, concurrent ones, a user's deletion), so that an unfiltered list's
 * X-Total-Count can read them.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import t from 'tap';
import { migrateToLatest } from '../../plugins/migrate.js';
import { listContacts } from '../../src/contacts/contacts.repository.js';
import { migrations } from '../../src/db/migrations/index.js';
import { backend, emptyDatabase } from '../helper.js';

const MIGRATION = '008-contact-counts';
const before = Object.fromEntries(Object.entries(migrations).filter(([name]) => name < MIGRATION));

const db = await emptyDatabase(t);
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
    kept: await byOwner(
      sql`select owner_id, sum(contacts)::integer as contacts from contact_counts group by owner_id having sum(contacts) > 0 order by owner_id`,
    ),
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
  await db
    .insertInto('contacts')
    .values([...contactsOf(alice!.id, 30), ...contactsOf(bob!.id, 12)])
    .execute();

  t.same(
    await migrateToLatest(db, migrations),
    Object.keys(migrations).filter((name) => name >= MIGRATION),
  );
  const { kept } = await keptAndCounted();
  t.same(kept, { [alice!.id]: 30, [bob!.id]: 12 });
  t.equal((await listContacts(db, alice!.id, [], { skip: 0, limit: 5 })).total, 30);
  const tampered = await db
    .transaction()
    .execute(async (trx) => {
      await sql`insert into contact_counts (owner_id, shard, contacts) values (${alice!.id}, -1, 1000)`.execute(trx);
      const total = (await listContacts(trx, alice!.id, [], { skip: 0, limit: 5 })).total;
      throw Object.assign(new Error('rolled back'), { total });
    })
    .catch((error: Error & { total?: number }) => error.total);
  t.equal(tampered, 1030, 'the unfiltered total is read from the counts, not counted');
});

t.test('every kind of write keeps the counts exact', async (t) => {
  const [carol, dave] = await db
    .insertInto('users')
    .values(['carol', 'dave'].map((name) => ({ username: name, email: `${name}@example.com`, password_hash: 'x' })))
    .returning('id')
    .execute();
  t.equal((await listContacts(db, carol!.id, [], { skip: 0, limit: 5 })).total, 0, 'an owner who never had a contact has 0');

  // Two owners in one statement, then one at a time, many at once.
  await db
    .insertInto('contacts')
    .values([...contactsOf(carol!.id, 7), ...contactsOf(dave!.id, 5)])
    .execute();
  const inserted = await Promise.all(
    contactsOf(carol!.id, 40).map((row) => db.insertInto('contacts').values(row).returning('id').executeTakeFirstOrThrow()),
  );
  await Promise.all(inserted.slice(0, 25).map(({ id }) => db.deleteFrom('contacts').where('id', '=', id).execute()));
  await db.deleteFrom('contacts').where('owner_id', '=', dave!.id).where('id', '>', 0).execute();
  await db.deleteFrom('contacts').where('id', '=', -1).execute();
  t.equal((await listContacts(db, carol!.id, [], { skip: 0, limit: 5 })).total, 7 + 40 - 25);
  t.equal((await listContacts(db, dave!.id, [], { skip: 0, limit: 5 })).total, 0);
  const afterWrites = await keptAndCounted();
  t.same(afterWrites.kept, afterWrites.counted);
  const grace = await db
    .insertInto('users')
    .values({ username: 'grace', email: 'grace@example.com', password_hash: 'x' })
    .returning('id')
    .executeTakeFirstOrThrow();
  const inPlace = await db.connection().execute(async (session) => {
    for (const row of contactsOf(grace.id, 3)) await session.insertInto('contacts').values(row).execute();
    await session.deleteFrom('contacts').where('email', '=', `c${serial}@example.com`).execute();
    const { rows } = await sql<{ shard: string }>`select current_setting('contacts.count_shard') as shard`.execute(session);
    const counts = await session.selectFrom('contact_counts').select(['shard', 'contacts']).where('owner_id', '=', grace.id).execute();
    return { shard: Number(rows[0]!.shard), counts };
  });
  t.same(inPlace.counts, [{ shard: inPlace.shard, contacts: 2 }], "one session's writes change its shard's row in place");

  await db.deleteFrom('users').where('id', '=', carol!.id).execute();
  t.same(
    await db.selectFrom('contact_counts').select('contacts').where('owner_id', '=', carol!.id).execute(),
    [],
    "a deleted user's count goes with them",
  );
  const afterDeletion = await keptAndCounted();
  t.same(afterDeletion.kept, afterDeletion.counted);
});

t.test(
  'no write waits on another transaction that changed the same count',
  { skip: backend === 'embedded' && 'PGlite has one connection' },
  async (t) => {
    const [erin] = await db
      .insertInto('users')
      .values({ username: 'erin', email: 'erin@example.com', password_hash: 'x' })
      .returning('id')
      .execute();
    await db.insertInto('contacts').values(contactsOf(erin!.id, 1)).execute();
    const create = await db.transaction().execute(async (trx) => {
      // Like an import between two of its statements: its change to erin's count is not committed.
      await trx.insertInto('contacts').values(contactsOf(erin!.id, 3)).execute();
      const beside = db.insertInto('contacts').values(contactsOf(erin!.id, 1)).execute();
      const waited = await Promise.race([beside.then(() => false), sleep(2000, true, { ref: false })]);
      t.equal(waited, false, 'a create beside the open transaction commits at once');
      return { beside }; // (a create that waits finishes once this commits)
    });
    await create.beside;
    t.equal((await listContacts(db, erin!.id, [], { skip: 0, limit: 5 })).total, 5);
  },
);

t.test('a contact cannot change owner, and truncating contacts empties the counts', async (t) => {
  const [frank] = await db
    .insertInto('users')
    .values({ username: 'frank', email: 'frank@example.com', password_hash: 'x' })
    .returning('id')
    .execute();
  await t.rejects(
    sql`update contacts set owner_id = ${frank!.id} where id = (select min(id) from contacts)`.execute(db),
    /a contact cannot change owner/,
  );
  await sql`update contacts set owner_id = owner_id`.execute(db);
  await sql`truncate contacts cascade`.execute(db);
  t.same(await db.selectFrom('contact_counts').selectAll().execute(), []);
});

t.test('down removes the counts and their triggers', async (t) => {
  await migrations[MIGRATION]!.down!(db);
  const { rows } = await sql<{ name: string }>`
    select tgname as name from pg_trigger where tgname in ('contacts_count_insert', 'contacts_count_delete', 'contacts_count_truncate', 'contacts_keep_owner', 'users_drop_contact_counts')`.execute(
    db,
  );
  t.same(rows, []);
  t.equal((await sql<{ table: string | null }>`select to_regclass('contact_counts')::text as table`.execute(db)).rows[0]!.table, null);
});
