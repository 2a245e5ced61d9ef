/**
 * Migration 032: the stored card octets each owner holds, filled from the cards a database already
 * holds, kept exact by every write of `card`, and removed by down.
 */
import { sql } from 'kysely';
import t from 'tap';
import { migrateToLatest } from '../../plugins/migrate.js';
import { migrations } from '../../src/db/migrations/index.js';
import { emptyDatabase } from '../helper.js';

const MIGRATION = '032-card-octets';
const before = Object.fromEntries(Object.entries(migrations).filter(([name]) => name < MIGRATION));
// Up to 032: 033 replaced its counts with the address books (test/contacts/address-books.test.ts).
const upTo = Object.fromEntries(Object.entries(migrations).filter(([name]) => name <= MIGRATION));

const db = await emptyDatabase(t);
t.teardown(() => db.destroy());

let serial = 0;
/** Inserts a contact of `ownerId` whose stored card is `card` (null: a REST contact). */
async function insert(ownerId: number, card: string | null): Promise<number> {
  const { rows } = await sql<{ id: number }>`
    insert into contacts (owner_id, first_name, last_name, email, card)
    values (${ownerId}, 'Ann', 'Lee', ${`c${++serial}@example.com`}, ${card}) returning id`.execute(db);
  return rows[0]!.id;
}

/** Kept and stored octets, owner by owner (owners with none left out). */
async function keptAndStored(): Promise<{ kept: Record<number, number>; stored: Record<number, number> }> {
  const byOwner = async (query: ReturnType<typeof sql<{ owner_id: number; octets: string }>>) =>
    Object.fromEntries((await query.execute(db)).rows.map((row) => [row.owner_id, Number(row.octets)]));
  return {
    kept: await byOwner(
      sql`select owner_id, sum(card_octets) as octets from contact_counts group by owner_id having sum(card_octets) <> 0 order by owner_id`,
    ),
    stored: await byOwner(
      sql`select owner_id, sum(octet_length(card)) as octets from contacts where card is not null group by owner_id order by owner_id`,
    ),
  };
}

let alice = 0;
let bob = 0;

t.test('fills the octets of the cards a database already holds', async (t) => {
  t.same(await migrateToLatest(db, before), Object.keys(before));
  const { rows } = await sql<{ id: number }>`
    insert into users (username, email, password_hash) values ('alice', 'alice@example.com', 'x'), ('bob', 'bob@example.com', 'x')
    returning id`.execute(db);
  [alice, bob] = rows.map((row) => row.id) as [number, number];
  await insert(alice, 'é'.repeat(100)); // 200 octets, 100 characters
  await insert(alice, 'x'.repeat(50));
  await insert(alice, null);
  await insert(bob, null);
  t.same(await migrateToLatest(db, upTo), [MIGRATION]);
  t.same(await keptAndStored(), { kept: { [alice]: 250 }, stored: { [alice]: 250 } });
});

t.test('inserts, updates of the card and deletes keep them exact', async (t) => {
  const id = await insert(bob, 'y'.repeat(300));
  await sql`update contacts set card = ${'z'.repeat(120)} where id = ${id}`.execute(db);
  await sql`update contacts set phone = '+14155550123' where owner_id = ${bob}`.execute(db);
  t.same(await keptAndStored(), { kept: { [alice]: 250, [bob]: 120 }, stored: { [alice]: 250, [bob]: 120 } });
  await sql`update contacts set card = null where id = ${id}`.execute(db);
  await sql`delete from contacts where owner_id = ${alice} and octet_length(card) = 50`.execute(db);
  t.same(await keptAndStored(), { kept: { [alice]: 200 }, stored: { [alice]: 200 } });
  await sql`delete from users where id = ${alice}`.execute(db);
  const { rows } = await sql<{ n: number }>`select count(*)::integer as n from contact_counts where owner_id = ${alice}`.execute(db);
  t.equal(rows[0]!.n, 0, "a deleted user's counts are gone");
});

t.test('down removes the column and its trigger; counts still follow', async (t) => {
  await db.transaction().execute((trx) => migrations[MIGRATION]!.down!(trx));
  const { rows } = await sql<{ n: number }>`
    select count(*)::integer as n from information_schema.columns where table_name = 'contact_counts' and column_name = 'card_octets'`.execute(
    db,
  );
  t.equal(rows[0]!.n, 0);
  const id = await insert(bob, 'w');
  await sql`update contacts set card = 'ww' where id = ${id}`.execute(db);
  await sql`delete from contacts where id = ${id}`.execute(db);
  const counted = await sql<{ n: number }>`select sum(contacts)::integer as n from contact_counts where owner_id = ${bob}`.execute(db);
  t.equal(counted.rows[0]!.n, 2, "bob's two contacts");
});
