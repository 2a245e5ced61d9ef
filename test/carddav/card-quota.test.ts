/**
 * CARDS_MAX_BYTES_PER_USER (docs/limits.md, docs/carddav.md): a card PUT that would take the
 * owner's stored card text past it is 507 with DAV:quota-not-exceeded and stores nothing; a
 * smaller replacement and a delete make room; the owner's total, kept by triggers (migration 032),
 * follows every write of any face.
 */
import { sql } from 'kysely';
import t from 'tap';
import { as, buildContactsApp } from '../contacts/fixtures.js';
import { card, davAs, davUser } from './dav-client.js';

const MAX = 4096;
const app = await buildContactsApp(t, { env: { CARDS_MAX_BYTES_PER_USER: String(MAX) } });
const user = await davUser(app);
const dav = davAs(app, user);
const book = `/dav/addressbooks/${user.id}/contacts/`;
const VCARD = { 'content-type': 'text/vcard; charset=utf-8' };

/** A card of exactly `octets` octets (CRLF line ends, as stored), padded in X-PAD lines of 70 octets at most. */
function sized(uid: string, octets: number): string {
  let pad = octets - Buffer.byteLength(card(uid, `Card ${uid}`));
  const lines: string[] = [];
  while (pad > 0) {
    // A line of n value octets takes n + 8 ('X-PAD:' and CRLF); the last one takes what is left.
    const value = pad <= 70 ? pad - 8 : 60;
    lines.push(`X-PAD:${'x'.repeat(value)}`);
    pad -= value + 8;
  }
  const text = card(uid, `Card ${uid}`, lines);
  if (Buffer.byteLength(text) !== octets) throw new Error(`sized: ${Buffer.byteLength(text)} octets, not ${octets}`);
  return text;
}

const put = (name: string, text: string) => dav('PUT', `${book}${name}`, text, VCARD);

/** The owner's total as the triggers keep it, and as the stored cards add up. */
async function totals(ownerId: number): Promise<{ kept: number; stored: number }> {
  const { rows } = await sql<{ kept: string; stored: string }>`
    select (select coalesce(max(card_octets), 0) from address_books where owner_id = ${ownerId}) as kept,
           (select coalesce(sum(octet_length(card)), 0) from contacts where owner_id = ${ownerId}) as stored`.execute(app.db);
  return { kept: Number(rows[0]!.kept), stored: Number(rows[0]!.stored) };
}

function refusal(used: number, needs: number): string {
  return (
    '<?xml version="1.0" encoding="UTF-8"?><D:error xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:carddav" ' +
    'xmlns:CS="http://calendarserver.org/ns/" xmlns:X="urn:contacts-service:dav"><D:quota-not-exceeded/>' +
    `<X:detail>Card storage limit reached: a user may store at most ${MAX} octets of cards, and ${used} are stored; this card needs ${needs} more</X:detail></D:error>`
  );
}

t.test('PUTs until past the quota: 507 with DAV:quota-not-exceeded, nothing stored', async (t) => {
  for (const name of ['a', 'b', 'c', 'd']) t.equal((await put(`${name}.vcf`, sized(name, 1000))).statusCode, 201, name);
  t.same(await totals(user.id), { kept: 4000, stored: 4000 });
  const refused = await put('e.vcf', sized('e', 1000));
  t.equal(refused.statusCode, 507);
  t.match(refused.headers['content-type'], /^application\/xml/);
  t.equal(refused.body, refusal(4000, 1000));
  t.equal((await dav('GET', `${book}e.vcf`)).statusCode, 404, 'nothing was stored');
  t.same(await totals(user.id), { kept: 4000, stored: 4000 });
});

t.test('a smaller replacement is stored; a larger one only within the quota', async (t) => {
  t.equal((await put('a.vcf', sized('a', 500))).statusCode, 204, 'smaller');
  t.same(await totals(user.id), { kept: 3500, stored: 3500 });
  t.equal((await put('a.vcf', sized('a', 1096))).statusCode, 204, 'exactly up to the quota');
  t.same(await totals(user.id), { kept: 4096, stored: 4096 });
  const grown = await put('a.vcf', sized('a', 1097));
  t.equal(grown.statusCode, 507, 'one octet more');
  t.equal(grown.body, refusal(4096, 1));
  t.equal((await put('a.vcf', sized('a', 1000))).statusCode, 204, 'at the quota, a smaller card still');
});

t.test('a delete makes room, by either face', async (t) => {
  t.equal((await dav('DELETE', `${book}b.vcf`)).statusCode, 204);
  t.same(await totals(user.id), { kept: 3000, stored: 3000 });
  t.equal((await put('e.vcf', sized('e', 1000))).statusCode, 201);
  const rest = as(app, user);
  const [first] = (await rest('GET', '/api/contacts/?limit=1')).json<{ id: number }[]>();
  t.equal((await rest('DELETE', `/api/contacts/${first!.id}`)).statusCode, 200);
  t.same(await totals(user.id), { kept: 3000, stored: 3000 });
});

t.test('a REST write that rewrites a stored card is counted with its new length', async (t) => {
  const rest = as(app, user);
  const [first] = (await rest('GET', '/api/contacts/?limit=1')).json<{ id: number }[]>();
  const patched = await rest('PATCH', `/api/contacts/${first!.id}`, { phone: '+15550100222' });
  t.equal(patched.statusCode, 200);
  const { kept, stored } = await totals(user.id);
  t.equal(kept, stored);
  t.ok(stored > 3000, 'the card grew by its TEL');
});

t.test("another user's cards count apart", async (t) => {
  const other = await davUser(app);
  const res = await davAs(app, other)('PUT', `/dav/addressbooks/${other.id}/contacts/x.vcf`, sized('x', 4000), VCARD);
  t.equal(res.statusCode, 201);
});
