/**
 * CardDAV answers written batch by batch (docs/limits.md, "CardDAV"): a multiget across batch
 * boundaries (500 cards, 256 KiB of text) answers every href in its order, 404s in between; at most
 * 10,000 hrefs; multiget and PUT in per-user buckets; streamed answers in flight per user (429)
 * and per instance (503), given back when the client is gone. The memory of 8 concurrent
 * multigets of a 50 MiB book is printed by `npm run bench:carddav-bounds`.
 */
import t from 'tap';
import { buildContactsApp } from '../contacts/fixtures.js';
import { card, davAs, davUser, responseHrefs } from './dav-client.js';

const VCARD = { 'content-type': 'text/vcard' };
const NS = 'xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:carddav"';
const multigetOf = (hrefs: string[], prop = '<D:getetag/>') =>
  `<C:addressbook-multiget ${NS}><D:prop>${prop}</D:prop>${hrefs.map((href) => `<D:href>${href}</D:href>`).join('')}</C:addressbook-multiget>`;
const detailOf = (body: string) => /<X:detail>(.*)<\/X:detail>/.exec(body)?.[1];

t.test('a multiget across batches answers each href in its order, a missing one 404 where it stands', async (t) => {
  const app = await buildContactsApp(t);
  const user = await davUser(app);
  const call = davAs(app, user);
  const book = `/dav/addressbooks/${user.id}/contacts/`;
  // 3 cards of 200 KiB (three batches by octets), then 520 small ones (two batches by count).
  const big = ['big0', 'big1', 'big2'];
  for (const name of big) {
    const put = await call('PUT', `${book}${name}.vcf`, card(name, name, [`NOTE:${'n'.repeat(200 * 1024)}`]), VCARD);
    t.equal(put.statusCode, 201);
  }
  const csv = Array.from({ length: 520 }, (_, i) => `S${i},Small,s${i}@example.com,+1415555${String(i).padStart(4, '0')},1990-01-01`);
  const imported = await app.inject({
    method: 'POST',
    url: '/api/contacts/import',
    headers: { authorization: `Bearer ${user.token}`, 'content-type': 'text/csv' },
    payload: `first_name,last_name,email,phone,birthday\n${csv.join('\n')}\n`,
  });
  t.equal(imported.statusCode, 200, imported.body);
  const listing = await call('PROPFIND', book, `<D:propfind ${NS}><D:prop><C:address-data/></D:prop></D:propfind>`, { depth: '1' });
  t.equal(listing.statusCode, 207);
  const listed = responseHrefs(listing.body);
  t.equal(listed.length, 1 + 3 + 520, 'the book and every card, across batches');
  const small = listed.slice(4);
  const requested = [
    `${book}none-first.vcf`,
    ...big.map((name) => `${book}${name}.vcf`),
    `${book}none-between.vcf`,
    ...small,
    `${book}none-last.vcf`,
  ];
  const res = await call('REPORT', book, multigetOf(requested, '<D:getetag/><C:address-data/>'));
  t.equal(res.statusCode, 207);
  t.strictSame(responseHrefs(res.body), requested, 'every href once, in the order asked');
  t.equal(res.body.match(/<D:status>HTTP\/1.1 404 Not Found<\/D:status><\/D:response>/g)?.length, 3, 'three bare 404s');
  t.equal(res.body.match(/n{204800}/g)?.length, 3, 'each large card whole');
  t.ok(res.body.endsWith('</D:response></D:multistatus>'));

  const sync = await call('REPORT', book, `<D:sync-collection ${NS}><D:sync-token/><D:prop><D:getetag/></D:prop></D:sync-collection>`);
  t.equal(responseHrefs(sync.body).length, 523);
  t.match(sync.body, /<\/D:response><D:sync-token>urn:contacts-service:sync:[^<]+<\/D:sync-token><\/D:multistatus>$/);
  const query = `<C:addressbook-query ${NS}><D:prop><D:getetag/></D:prop><C:filter><C:prop-filter name="FN"><C:text-match match-type="starts-with">S5</C:text-match></C:prop-filter></C:filter><C:limit><C:nresults>5</C:nresults></C:limit></C:addressbook-query>`;
  const queried = await call('REPORT', book, query, { depth: '1' });
  t.strictSame(
    responseHrefs(queried.body),
    [...[5, 50, 51, 52, 53].map((i) => small[i]!), book],
    'the first 5 matches in id order, then the 507',
  );
  t.match(queried.body, /<D:number-of-matches-within-limits\/><\/D:error><\/D:response><\/D:multistatus>$/);
});

t.test('a multiget names at most 10,000 hrefs', async (t) => {
  const app = await buildContactsApp(t);
  const user = await davUser(app);
  const call = davAs(app, user);
  const book = `/dav/addressbooks/${user.id}/contacts/`;
  const hrefs = (n: number) => Array.from({ length: n }, (_, i) => `${book}${i}.vcf`);
  const over = await call('REPORT', book, multigetOf(hrefs(10_001)));
  t.equal(over.statusCode, 400);
  t.equal(detailOf(over.body), 'The multiget names 10001 hrefs: at most 10000');
  const at = await call('REPORT', book, multigetOf(hrefs(10_000)));
  t.equal(at.statusCode, 207);
  t.equal(responseHrefs(at.body).length, 10_000);
});

t.test('multiget and PUT count in per-user buckets: 429 D:error with Retry-After past them', async (t) => {
  const app = await buildContactsApp(t, { env: { RATE_LIMIT_MULTIGET_PER_MIN: '2', RATE_LIMIT_CARD_PUT_PER_MIN: '2' } });
  const user = await davUser(app);
  const call = davAs(app, user);
  const book = `/dav/addressbooks/${user.id}/contacts/`;
  for (let i = 0; i < 2; i++) t.equal((await call('PUT', `${book}p${i}.vcf`, card(`p${i}`, 'P'), VCARD)).statusCode, 201);
  const put = await call('PUT', `${book}p2.vcf`, card('p2', 'P'), VCARD);
  t.equal(put.statusCode, 429);
  t.match(put.headers['retry-after'], /^\d+$/);
  t.match(detailOf(put.body), /^Rate limit exceeded, retry in \d+ seconds$/);
  for (let i = 0; i < 2; i++) t.equal((await call('REPORT', book, multigetOf([`${book}p0.vcf`]))).statusCode, 207);
  const multiget = await call('REPORT', book, multigetOf([`${book}p0.vcf`]));
  t.equal(multiget.statusCode, 429);
  t.equal(multiget.headers['x-ratelimit-remaining'], '0');
  const otherUser = await davUser(app);
  const otherBook = `/dav/addressbooks/${otherUser.id}/contacts/`;
  const other = await davAs(app, otherUser)('REPORT', otherBook, multigetOf([`${otherBook}p0.vcf`]));
  t.equal(other.statusCode, 207, 'another user has a bucket of their own');
});

t.test('streamed answers in flight: past the user’s share 429, past the instance’s 503; a client gone gives its slot back', async (t) => {
  const app = await buildContactsApp(t, { env: { DAV_STREAMS_PER_USER: '1', DAV_STREAMS_PER_INSTANCE: '2' } });
  const users = [await davUser(app), await davUser(app), await davUser(app)];
  const books = users.map((user) => `/dav/addressbooks/${user.id}/contacts/`);
  // 30 cards of 200 KiB: 6 MB, more than the sockets' buffers hold while nobody reads.
  for (const [i, user] of users.slice(0, 2).entries()) {
    for (let c = 0; c < 30; c++)
      await davAs(app, user)('PUT', `${books[i]}c${c}.vcf`, card(`c${c}`, 'C', [`NOTE:${'n'.repeat(200 * 1024)}`]), VCARD);
  }
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  const base = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  const listing = `<D:propfind ${NS}><D:prop><C:address-data/></D:prop></D:propfind>`;
  const send = (i: number, signal?: AbortSignal) =>
    fetch(`${base}${books[i]}`, {
      method: 'PROPFIND',
      headers: { authorization: users[i]!.basic, depth: '1', 'content-type': 'application/xml' },
      body: listing,
      ...(signal ? { signal } : {}),
    });
  const first = new AbortController();
  const held = await send(0, first.signal);
  t.equal(held.status, 207, 'the first answer has begun; nobody reads it');
  const second = await send(0);
  t.equal(second.status, 429);
  t.equal(second.headers.get('retry-after'), '5');
  t.equal(detailOf(await second.text()), 'Too many reads in progress: at most 1 at once per user; retry when one has finished');
  const other = await send(1);
  t.equal(other.status, 207, "another user's answer takes the instance's second slot");
  const third = await send(2);
  t.equal(third.status, 503);
  t.equal(detailOf(await third.text()), 'Too many reads in progress on this instance; try again later');
  await other.text();
  first.abort();
  await held.text().catch(() => undefined);
  // The server sees the closed socket a moment later.
  for (let tries = 0; ; tries++) {
    const again = await send(0);
    const body = await again.text();
    if (again.status === 207 || tries === 50) {
      t.equal(again.status, 207, 'the slot came back when its client went');
      t.ok(body.endsWith('</D:multistatus>'));
      break;
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
});
