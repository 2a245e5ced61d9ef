/**
 * Rules of docs/carddav.md no other test covered: Last-Modified and Content-Length of GET and HEAD,
 * a card as stored without a version asked for, percent-encoded hrefs, text XML cannot hold as
 * U+FFFD, addressbook-query at Depth 0, sync-level infinite, and a REST write keeping a BDAY's form.
 */
import t from 'tap';
import { as, buildContactsApp } from '../contacts/fixtures.js';
import { card, davAs, davUser, responseHrefs } from './dav-client.js';

const NOW = new Date('2026-06-10T12:00:00.000Z');
const app = await buildContactsApp(t, { now: () => NOW });
const user = await davUser(app);
const call = davAs(app, user);
const rest = as(app, user);
const book = `/dav/addressbooks/${user.id}/contacts/`;
const VCARD = { 'content-type': 'text/vcard' };
const NS = 'xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:carddav"';
const TEXT = card('rules', 'Rule Card', ['NOTE:non\uFFFEcharacter']);
const put = await call('PUT', `${book}rules.vcf`, TEXT, VCARD);
if (put.statusCode !== 201) throw new Error(`PUT: ${put.statusCode} ${put.body}`);

t.test('GET and HEAD carry Last-Modified (the write time) and HEAD the Content-Length GET would send', async (t) => {
  const got = await call('GET', `${book}rules.vcf`);
  t.equal(got.headers['last-modified'], NOW.toUTCString());
  const head = await call('HEAD', `${book}rules.vcf`);
  t.equal(head.headers['last-modified'], NOW.toUTCString());
  t.equal(head.headers['content-length'], String(Buffer.byteLength(TEXT)));
  t.equal(head.body, '');
});

t.test('without a version in Accept or C:address-data, a card comes in the version it is stored in', async (t) => {
  const got = await call('GET', `${book}rules.vcf`, undefined, { accept: 'text/vcard' });
  t.equal(got.statusCode, 200);
  t.match(got.body, 'VERSION:3.0\r\n');
  const res = await call(
    'REPORT',
    book,
    `<C:addressbook-multiget ${NS}><D:prop><C:address-data content-type="text/vcard"/></D:prop><D:href>${book}rules.vcf</D:href></C:addressbook-multiget>`,
  );
  t.equal(res.statusCode, 207);
  t.match(res.body, '<C:address-data>BEGIN:VCARD\r\nVERSION:3.0\r\n');
});

t.test('hrefs are absolute and percent-encoded: a card named with a blank and a non-ASCII letter', async (t) => {
  const created = await call('PUT', `${book}${encodeURIComponent('Zoë card.vcf')}`, card('zoe-space', 'Zoe Space'), VCARD);
  t.equal(created.statusCode, 201);
  const listing = await call('PROPFIND', book, '<D:propfind xmlns:D="DAV:"><D:prop><D:getetag/></D:prop></D:propfind>', { depth: '1' });
  t.ok(responseHrefs(listing.body).includes(`${book}Zo%C3%AB%20card.vcf`));
  t.equal((await call('DELETE', `${book}Zo%C3%AB%20card.vcf`)).statusCode, 204);
});

t.test('text XML cannot hold is written as U+FFFD in address-data; GET serves the card as stored', async (t) => {
  const res = await call(
    'REPORT',
    book,
    `<C:addressbook-multiget ${NS}><D:prop><C:address-data/></D:prop><D:href>${book}rules.vcf</D:href></C:addressbook-multiget>`,
  );
  t.match(res.body, 'NOTE:non\uFFFDcharacter\r\n');
  t.match((await call('GET', `${book}rules.vcf`)).body, 'NOTE:non\uFFFEcharacter\r\n');
});

t.test('addressbook-query at Depth 0 matches nothing (as in SabreDAV); at Depth 1 the same filter matches', async (t) => {
  const body = `<C:addressbook-query ${NS}><D:prop><D:getetag/></D:prop><C:filter><C:prop-filter name="FN"><C:text-match>rule</C:text-match></C:prop-filter></C:filter></C:addressbook-query>`;
  const zero = await call('REPORT', book, body, { depth: '0' });
  t.equal(zero.statusCode, 207);
  t.strictSame(responseHrefs(zero.body), []);
  t.strictSame(responseHrefs((await call('REPORT', book, body, { depth: '1' })).body), [`${book}rules.vcf`]);
});

t.test('sync-collection takes sync-level infinite like 1', async (t) => {
  const res = await call(
    'REPORT',
    book,
    '<D:sync-collection xmlns:D="DAV:"><D:sync-token/><D:sync-level>infinite</D:sync-level><D:prop><D:getetag/></D:prop></D:sync-collection>',
  );
  t.equal(res.statusCode, 207);
  t.strictSame(responseHrefs(res.body), [`${book}rules.vcf`]);
});

t.test('a REST write of the birthday replaces the BDAY it was read from in its old form (dashed or not)', async (t) => {
  for (const [name, bday, expected] of [
    ['dashed', 'BDAY:1980-02-03', 'BDAY:1981-04-05'],
    ['basic', 'BDAY:19800203', 'BDAY:19810405'],
  ] as const) {
    await call('PUT', `${book}${name}.vcf`, card(name, `Bday ${name}`, [bday, 'NOTE:after']), VCARD);
    const etag = (await call('GET', `${book}${name}.vcf`)).headers.etag;
    const contact = (await rest('GET', '/api/contacts/?limit=1000'))
      .json<Record<string, any>[]>()
      .find((c) => c.birthday === '1980-02-03' && c.last_name === name);
    t.ok(contact, name);
    const patched = await rest('PATCH', `/api/contacts/${contact!.id}`, { birthday: '1981-04-05' });
    t.equal(patched.statusCode, 200);
    t.not(patched.headers.etag, etag);
    t.match((await call('GET', `${book}${name}.vcf`)).body, `${expected}\r\nNOTE:after\r\n`, name);
  }
});
