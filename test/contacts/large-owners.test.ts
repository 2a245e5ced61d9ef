/**
 * Large owners (src/contacts/large-owners.ts, migrations 018 and 019), with LARGE_OWNER_CONTACTS=5:
 * an owner whose import takes it past the threshold is promoted in the background, answers every
 * search as before, and keeps every contact's sync position; its later contacts are marked as
 * they are inserted. An ordinary owner's contacts stay out of the grams.
 */
import { sql } from 'kysely';
import t from 'tap';
import { ownersToPromote } from '../../src/contacts/large-owners.js';
import { as, buildContactsApp, type Caller, createContacts, createUser } from './fixtures.js';

const THRESHOLD = 5;
const app = await buildContactsApp(t, { env: { LARGE_OWNER_CONTACTS: String(THRESHOLD) } });

const header = 'first_name,last_name,email,phone,birthday\r\n';
const csv = (rows: string[]) => header + rows.map((row) => `${row}\r\n`).join('');
const FIRST = [
  'Ann Jones,ann@example.com,+14155550123',
  'Zoë Ünal,zoe@mail.org,+442071234567',
  'Ian K,ian.k@example.com,+19998887777',
  'Sofia Lee,sofia@x.gr,+302101234567',
  'Anna Ono,anna@example.com,+14155550999',
];
/** Two more that hold none of the runs searched below, so every answer stays the same. */
const MORE = ['Qu Xy,qx@qx.qq,+18005550000', 'Xy Qu,xq@qx.qq,+18005550001'];
const rows = (entries: string[]) => entries.map((entry) => entry.replace(' ', ',') + ',1990-01-01');
const SEARCHES = [
  'a',
  'AN',
  'nj',
  'ex',
  '4-1',
  'first_name:ilike:%AN%',
  'last_name:contains:on',
  'email:endswith:.o',
  'email:endswith:.gr',
  'e,email:ilike:%ex%',
  'anna',
];

async function importing(call: Caller, entries: string[]): Promise<void> {
  const res = await call('POST', '/api/contacts/import', csv(rows(entries)), { 'content-type': 'text/csv' });
  if (res.statusCode !== 200 || res.json<{ created: number }>().created !== entries.length)
    throw new Error(`import: ${res.statusCode} ${res.body}`);
}

/** Each search's X-Total-Count and ids, at limit 100 and at limit 1. */
async function answers(call: Caller): Promise<unknown[]> {
  const found = [];
  for (const query of SEARCHES) {
    for (const limit of [100, 1]) {
      const res = await call('GET', `/api/contacts/?query=${encodeURIComponent(query)}&limit=${limit}`);
      found.push([query, limit, res.headers['x-total-count'], res.json<{ id: number }[]>().map((contact) => contact.id)]);
    }
  }
  return found;
}

const state = async (ownerId: number) => {
  const owner = await app.db.selectFrom('large_owners').select('ready').where('owner_id', '=', ownerId).executeTakeFirst();
  const { rows: marks } = await sql<{ marked: number; unmarked: number }>`
    select count(*) filter (where large_owner)::integer as marked, count(*) filter (where not large_owner)::integer as unmarked
      from contacts where owner_id = ${ownerId}`.execute(app.db);
  return { ready: owner?.ready ?? null, ...marks[0]! };
};
const positions = async (ownerId: number) =>
  (
    await sql<{
      id: number;
      change_position: string;
    }>`select id, change_position::text from contacts where owner_id = ${ownerId} order by id`.execute(app.db)
  ).rows;

t.test('an import past the threshold promotes the owner: the same answers, the same sync positions, every contact marked', async (t) => {
  const user = await createUser(app);
  const call = as(app, user);
  await importing(call, FIRST);
  await app.largeOwners.settled();
  t.same(await state(user.id), { ready: null, marked: 0, unmarked: 5 }, 'at the threshold: an ordinary owner');
  const before = await answers(call);

  await importing(call, MORE);
  const positionsBefore = await positions(user.id);
  await app.largeOwners.settled();
  t.same(await state(user.id), { ready: true, marked: 7, unmarked: 0 }, 'past it: promoted');
  t.same(await positions(user.id), positionsBefore, 'marking moved no sync position');
  t.same(await answers(call), before, 'the same answers through the grams');

  // Later contacts are marked by the insert trigger and found through the grams at once.
  const [created] = await createContacts(call, [
    { first_name: 'Qa', last_name: 'Zz', email: 'qa@qx.qq', phone: '+18005550002', birthday: '1990-01-01' },
  ]);
  t.same(await state(user.id), { ready: true, marked: 8, unmarked: 0 });
  const res = await call('GET', `/api/contacts/?query=qa&limit=100`);
  t.same([res.headers['x-total-count'], res.json<{ id: number }[]>().map((contact) => contact.id)], ['1', [created!.id]]);
});

t.test('an ordinary owner is left alone, and start-up finds every owner past the threshold', async (t) => {
  const small = await createUser(app);
  await importing(as(app, small), FIRST.slice(0, 3));
  const big = await createUser(app);
  // Written past the service, as a bulk load would: only start-up's scan finds this owner.
  await app.db
    .insertInto('contacts')
    .values(
      Array.from({ length: THRESHOLD + 1 }, (_, i) => ({ owner_id: big.id, first_name: 'B', last_name: 'C', email: `b${i}@example.com` })),
    )
    .execute();
  await app.largeOwners.settled();
  t.same(await state(small.id), { ready: null, marked: 0, unmarked: 3 });
  t.same(await ownersToPromote(app.db, THRESHOLD), [big.id]);
});
