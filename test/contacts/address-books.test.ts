/**
 * Migration 033's address books: filled from the counts (020, 032) and the transaction ids (005) of
 * a live database, a book migrated with contacts and tombstones syncs by positions, and every kind
 * of write keeps the counts exact and moves the owner's position (and no one else's).
 */
import { sql } from 'kysely';
import t from 'tap';
import { migrateToLatest } from '../../plugins/migrate.js';
import { listContacts } from '../../src/contacts/contacts.repository.js';
import { syncContacts } from '../../src/contacts/sync.service.js';
import { migrations } from '../../src/db/migrations/index.js';
import { emptyDatabase, TEST_JWT_SECRET } from '../helper.js';

const MIGRATION = '033-address-books';
const before = Object.fromEntries(Object.entries(migrations).filter(([name]) => name < MIGRATION));
const through = Object.fromEntries(Object.entries(migrations).filter(([name]) => name <= MIGRATION));

const db = await emptyDatabase(t);
t.teardown(() => db.destroy());
const now = new Date();
const deps = { db, config: { jwtSecret: TEST_JWT_SECRET, syncTombstoneDays: 30 }, now: () => now } as unknown as Parameters<
  typeof syncContacts
>[0];

let serial = 0;
const contactsOf = (ownerId: number, n: number, card: string | null = null) =>
  Array.from({ length: n }, () => ({
    owner_id: ownerId,
    first_name: 'Ann',
    last_name: 'Lee',
    email: `c${++serial}@example.com`,
    card,
  }));

/** What the books keep and what the contacts hold, owner by owner (owners with no contact left out). */
async function keptAndCounted() {
  const { rows: kept } = await sql<{ owner_id: number; contacts: number; octets: number }>`
    select owner_id, contacts, card_octets::integer as octets from address_books where contacts > 0 order by owner_id`.execute(db);
  const { rows: counted } = await sql<{ owner_id: number; contacts: number; octets: number }>`
    select owner_id, count(*)::integer as contacts, coalesce(sum(octet_length(card)), 0)::integer as octets
      from contacts group by owner_id order by owner_id`.execute(db);
  return { kept, counted };
}

/** The owner's book position, and the positions of their contacts and tombstones by id. */
async function positionsOf(ownerId: number) {
  const { rows } = await sql<{ book: string }>`select sync_position::text as book from address_books where owner_id = ${ownerId}`.execute(
    db,
  );
  const { rows: changes } = await sql<{ id: number; position: string; deleted: boolean }>`
    select id, change_position::text as position, false as deleted from contacts where owner_id = ${ownerId}
    union all
    select contact_id, change_position::text, true from contact_tombstones where owner_id = ${ownerId}
    order by position`.execute(db);
  return { book: rows[0]?.book ?? null, changes };
}

/** Every page of a sync from `token` (a full one without). */
async function syncAll(ownerId: number, token?: string) {
  const contacts: number[] = [];
  const deleted: number[] = [];
  for (let next = token; ;) {
    const page = await syncContacts(deps, ownerId, next, 2);
    contacts.push(...page.contacts.map((contact) => contact.id));
    deleted.push(...page.deleted);
    next = page.next_token;
    if (!page.has_more) return { contacts, deleted, token: next };
  }
}

let alice = 0;
let bob = 0;

t.test('fills the books of a populated database: counts, and positions in the order of the transactions', async (t) => {
  t.same(await migrateToLatest(db, before), Object.keys(before));
  const { rows } = await sql<{ id: number }>`
    insert into users (username, email, password_hash) values ('alice', 'alice@example.com', 'x'), ('bob', 'bob@example.com', 'x')
    returning id`.execute(db);
  [alice, bob] = rows.map((row) => row.id) as [number, number];
  const ids = (
    await db
      .insertInto('contacts')
      .values(contactsOf(alice, 4, 'x'.repeat(10)))
      .returning('id')
      .execute()
  ).map((r) => r.id);
  await db.insertInto('contacts').values(contactsOf(bob, 2)).execute();
  await db.updateTable('contacts').set({ first_name: 'Later' }).where('id', '=', ids[0]!).execute();
  await db.deleteFrom('contacts').where('id', '=', ids[1]!).execute();
  t.same(await migrateToLatest(db, through), [MIGRATION]);

  const { kept, counted } = await keptAndCounted();
  t.same(kept, counted);
  t.same(
    kept.map((row) => [row.owner_id, row.contacts, row.octets]),
    [
      [alice, 3, 30],
      [bob, 2, 0],
    ],
  );
  // One insert statement is one transaction: its rows in id order, then the update, then the deletion.
  t.strictSame(await positionsOf(alice), {
    book: '4',
    changes: [
      { id: ids[2], position: '1', deleted: false },
      { id: ids[3], position: '2', deleted: false },
      { id: ids[0], position: '3', deleted: false },
      { id: ids[1], position: '4', deleted: true },
    ],
  });
  t.equal((await positionsOf(bob)).book, '2');
});

t.test('a book migrated with contacts and tombstones syncs by positions', async (t) => {
  const full = await syncAll(alice);
  t.equal(full.contacts.length, 3, 'a full sync: every contact');
  const quiet = await syncAll(alice, full.token);
  t.strictSame([quiet.contacts, quiet.deleted], [[], []], 'then nothing');
  const [written] = full.contacts;
  await db.updateTable('contacts').set({ last_name: 'Moved' }).where('id', '=', written!).execute();
  await db.deleteFrom('contacts').where('id', '=', full.contacts[1]!).execute();
  await db.insertInto('contacts').values(contactsOf(bob, 1)).execute();
  const delta = await syncAll(alice, quiet.token);
  t.strictSame([delta.contacts, delta.deleted], [[written], [full.contacts[1]]], "the owner's changes since, not bob's");
  t.equal((await positionsOf(alice)).book, '6');
});

t.test('every kind of write keeps the counts exact and moves only its owner’s position', async (t) => {
  const bobBefore = (await positionsOf(bob)).book;
  const inserted = await db
    .insertInto('contacts')
    .values(contactsOf(alice, 30, 'é'))
    .returning('id')
    .execute();
  await Promise.all(inserted.slice(0, 10).map(({ id }) => db.deleteFrom('contacts').where('id', '=', id).execute()));
  await db.updateTable('contacts').set({ card: 'longer card' }).where('owner_id', '=', alice).where('card', '=', 'é').execute();
  t.equal((await positionsOf(alice)).book, String(6 + 30 + 10 + 20));
  t.equal((await positionsOf(bob)).book, bobBefore, "bob's position stays");
  const { kept, counted } = await keptAndCounted();
  t.same(kept, counted);
  t.equal((await listContacts(db, alice, [], { skip: 0, limit: 5 })).total, 2 + 20, 'the unfiltered total is the book’s');

  const before = (await positionsOf(alice)).book;
  await db.updateTable('contacts').set({ large_owner: true }).where('owner_id', '=', alice).execute();
  t.equal((await positionsOf(alice)).book, before, 'marking a large owner’s contacts is no change');
  await db.insertInto('large_owners').values({ owner_id: alice }).execute();
  const [marked] = await db.insertInto('contacts').values(contactsOf(alice, 1)).returning('large_owner').execute();
  t.equal(marked!.large_owner, true, 'a large owner’s new contact is marked');

  await t.rejects(sql`update contacts set owner_id = ${bob} where owner_id = ${alice}`.execute(db), /a contact cannot change owner/);
  await db.deleteFrom('users').where('id', '=', alice).execute();
  t.same(await db.selectFrom('address_books').select('owner_id').where('owner_id', '=', alice).execute(), [], "a deleted user's book goes");
  const after = await keptAndCounted();
  t.same(after.kept, after.counted);
});

t.test('down brings back the transaction ids and the count shards', async (t) => {
  await db.transaction().execute((trx) => migrations[MIGRATION]!.down!(trx));
  const { rows } = await sql<{ n: number }>`select sum(contacts)::integer as n from contact_counts where owner_id = ${bob}`.execute(db);
  t.equal(rows[0]!.n, 3);
  await db.insertInto('contacts').values(contactsOf(bob, 1)).execute();
  const counted = await sql<{ n: number }>`select sum(contacts)::integer as n from contact_counts where owner_id = ${bob}`.execute(db);
  t.equal(counted.rows[0]!.n, 4);
});
