/**
 * CardDAV paths and discovery (docs/carddav.md): the well-known redirect, OPTIONS, the principal,
 * home and book with their properties, PROPFIND depths, another user's paths as 404, PROPPATCH
 * refused per property, and 405 with Allow for every method a resource does not list.
 */
import t from 'tap';
import { buildContactsApp } from '../contacts/fixtures.js';
import { card, davAs, davUser, responseHrefs, xmlTag } from './dav-client.js';

const app = await buildContactsApp(t);
const user = await davUser(app);
const other = await davUser(app);
const call = davAs(app, user);
const book = `/dav/addressbooks/${user.id}/contacts/`;
const XML = 'application/xml; charset=utf-8';

const propfind = (props: string, ns = '') =>
  `<?xml version="1.0" encoding="utf-8"?><d:propfind xmlns:d="DAV:"${ns}><d:prop>${props}</d:prop></d:propfind>`;

const put = await call('PUT', `${book}one.vcf`, card('one', 'One Card'), { 'content-type': 'text/vcard' });
if (put.statusCode !== 201) throw new Error(`PUT: ${put.statusCode} ${put.body}`);

t.test('/.well-known/carddav redirects to /dav/ for GET, HEAD and PROPFIND, with or without credentials', async (t) => {
  for (const method of ['GET', 'HEAD', 'PROPFIND']) {
    for (const headers of [{}, { authorization: user.basic }]) {
      const res = await app.inject({ method: method as 'GET', url: '/.well-known/carddav', headers });
      t.equal(res.statusCode, 301, method);
      t.equal(res.headers.location, '/dav/');
    }
  }
  const xml = await app.inject({
    method: 'PROPFIND' as 'GET',
    url: '/.well-known/carddav',
    headers: { 'content-type': 'application/xml' },
    payload: propfind('<d:current-user-principal/>'),
  });
  t.equal(xml.statusCode, 301, 'a PROPFIND body is taken');
});

t.test('OPTIONS answers anywhere under /dav without credentials: DAV classes and the methods of the resource', async (t) => {
  const cases: [string, string][] = [
    ['/dav/', 'OPTIONS, PROPFIND, REPORT'],
    [`/dav/principals/${user.id}/`, 'OPTIONS, PROPFIND, REPORT'],
    [`/dav/addressbooks/${user.id}/`, 'OPTIONS, PROPFIND, REPORT'],
    [book, 'OPTIONS, PROPFIND, REPORT'],
    [`${book}one.vcf`, 'OPTIONS, GET, HEAD, PUT, DELETE, PROPFIND, REPORT, COPY, MOVE'],
    [`${book}missing.vcf`, 'OPTIONS, GET, HEAD, PUT, DELETE, PROPFIND, REPORT, COPY, MOVE'],
    ['/dav/nowhere/at/all', 'OPTIONS, PROPFIND'],
  ];
  for (const [url, allow] of cases) {
    const res = await app.inject({ method: 'OPTIONS', url });
    t.equal(res.statusCode, 200, url);
    t.equal(res.headers.dav, '1, 3, access-control, addressbook');
    t.equal(res.headers.allow, allow, url);
    t.equal(res.body, '');
  }
});

t.test('PROPFIND /dav/ names the current user principal', async (t) => {
  const res = await call('PROPFIND', '/dav/', propfind('<d:current-user-principal/>'), { depth: '0' });
  t.equal(res.statusCode, 207);
  t.equal(res.headers['content-type'], XML);
  t.match(
    res.body,
    `<D:response><D:href>/dav/</D:href><D:propstat><D:prop><D:current-user-principal><D:href>/dav/principals/${user.id}/</D:href></D:current-user-principal></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>`,
  );
});

t.test('the principal: a principal collection named by the username, with its URL and the address-book home', async (t) => {
  const res = await call(
    'PROPFIND',
    `/dav/principals/${user.id}/`,
    propfind('<d:resourcetype/><d:displayname/><d:principal-URL/><c:addressbook-home-set/>', ' xmlns:c="urn:ietf:params:xml:ns:carddav"'),
    { depth: '0' },
  );
  t.equal(res.statusCode, 207);
  t.match(
    res.body,
    `<D:prop><D:resourcetype><D:collection/><D:principal/></D:resourcetype><D:displayname>${user.username}</D:displayname>` +
      `<D:principal-URL><D:href>/dav/principals/${user.id}/</D:href></D:principal-URL>` +
      `<C:addressbook-home-set><D:href>/dav/addressbooks/${user.id}/</D:href></C:addressbook-home-set></D:prop><D:status>HTTP/1.1 200 OK</D:status>`,
  );
});

t.test('the home holds exactly the one book (Depth 1), which has every property clients read', async (t) => {
  const home = await call('PROPFIND', `/dav/addressbooks/${user.id}/`, propfind('<d:resourcetype/>'), { depth: '1' });
  t.equal(home.statusCode, 207);
  t.strictSame(responseHrefs(home.body), [`/dav/addressbooks/${user.id}/`, book]);
  t.match(
    home.body,
    `<D:href>${book}</D:href><D:propstat><D:prop><D:resourcetype><D:collection/><C:addressbook/></D:resourcetype></D:prop>`,
  );

  const props =
    '<d:resourcetype/><d:displayname/><cs:getctag/><d:sync-token/><c:supported-address-data/><c:max-resource-size/><c:supported-collation-set/>' +
    '<d:supported-report-set/><d:current-user-privilege-set/><d:owner/>';
  const res = await call(
    'PROPFIND',
    book,
    propfind(props, ' xmlns:c="urn:ietf:params:xml:ns:carddav" xmlns:cs="http://calendarserver.org/ns/"'),
    { depth: '0' },
  );
  t.equal(res.statusCode, 207);
  const token = /<D:sync-token>([^<]+)<\/D:sync-token>/.exec(res.body)?.[1];
  t.match(token, /^urn:contacts-service:sync:/, 'the sync token is an absolute URI');
  t.equal(
    res.body,
    '<?xml version="1.0" encoding="UTF-8"?><D:multistatus xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:carddav" xmlns:CS="http://calendarserver.org/ns/" xmlns:X="urn:contacts-service:dav">' +
      `<D:response><D:href>${book}</D:href><D:propstat><D:prop>` +
      '<D:resourcetype><D:collection/><C:addressbook/></D:resourcetype><D:displayname>Contacts</D:displayname>' +
      `<CS:getctag>${token}</CS:getctag><D:sync-token>${token}</D:sync-token>` +
      '<C:supported-address-data><C:address-data-type content-type="text/vcard" version="3.0"/><C:address-data-type content-type="text/vcard" version="4.0"/></C:supported-address-data>' +
      '<C:max-resource-size>262144</C:max-resource-size>' +
      '<C:supported-collation-set><C:supported-collation>i;ascii-casemap</C:supported-collation><C:supported-collation>i;octet</C:supported-collation><C:supported-collation>i;unicode-casemap</C:supported-collation></C:supported-collation-set>' +
      '<D:supported-report-set><D:supported-report><D:report><C:addressbook-multiget/></D:report></D:supported-report><D:supported-report><D:report><C:addressbook-query/></D:report></D:supported-report><D:supported-report><D:report><D:sync-collection/></D:report></D:supported-report>' +
      '<D:supported-report><D:report><D:acl-principal-prop-set/></D:report></D:supported-report><D:supported-report><D:report><D:principal-match/></D:report></D:supported-report>' +
      '<D:supported-report><D:report><D:principal-property-search/></D:report></D:supported-report><D:supported-report><D:report><D:principal-search-property-set/></D:report></D:supported-report></D:supported-report-set>' +
      '<D:current-user-privilege-set><D:privilege><D:read/></D:privilege><D:privilege><D:write/></D:privilege><D:privilege><D:write-content/></D:privilege><D:privilege><D:bind/></D:privilege><D:privilege><D:unbind/></D:privilege></D:current-user-privilege-set>' +
      `<D:owner><D:href>/dav/principals/${user.id}/</D:href></D:owner>` +
      '</D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response></D:multistatus>',
  );
});

t.test('allprop (or an empty body) leaves out the C:, CS: and sync properties', async (t) => {
  for (const body of [undefined, '<d:propfind xmlns:d="DAV:"><d:allprop/></d:propfind>']) {
    const res = await call('PROPFIND', book, body, { depth: '0' });
    t.equal(res.statusCode, 207);
    t.match(res.body, '<D:resourcetype><D:collection/><C:addressbook/></D:resourcetype><D:displayname>Contacts</D:displayname>');
    t.notMatch(res.body, /getctag|sync-token|supported-address-data|max-resource-size/);
  }
});

t.test('propname lists the names without values', async (t) => {
  const res = await call('PROPFIND', `${book}one.vcf`, '<d:propfind xmlns:d="DAV:"><d:propname/></d:propfind>', { depth: '0' });
  t.equal(res.statusCode, 207);
  t.match(res.body, '<D:prop><D:getetag/><D:getcontenttype/><D:getcontentlength/><D:getlastmodified/><D:resourcetype/></D:prop>');
});

t.test('Depth 1 on the book lists the book and every card with its tag, type, length and date; a missing property is 404', async (t) => {
  const res = await call(
    'PROPFIND',
    book,
    propfind('<d:getetag/><d:getcontenttype/><d:getcontentlength/><d:getlastmodified/><d:resourcetype/><d:nonsense/>'),
    { depth: '1' },
  );
  t.equal(res.statusCode, 207);
  t.strictSame(responseHrefs(res.body), [book, `${book}one.vcf`]);
  const octets = Buffer.byteLength(card('one', 'One Card'));
  t.match(
    res.body,
    new RegExp(
      `<D:href>${book}one.vcf</D:href><D:propstat><D:prop><D:getetag>${xmlTag(put.headers.etag)}</D:getetag><D:getcontenttype>text/vcard; charset=utf-8</D:getcontenttype>` +
        `<D:getcontentlength>${octets}</D:getcontentlength><D:getlastmodified>\\w{3}, \\d{2} \\w{3} \\d{4} \\d{2}:\\d{2}:\\d{2} GMT</D:getlastmodified><D:resourcetype/></D:prop>` +
        '<D:status>HTTP/1.1 200 OK</D:status></D:propstat><D:propstat><D:prop><D:nonsense/></D:prop><D:status>HTTP/1.1 404 Not Found</D:status></D:propstat>',
    ),
  );
});

t.test('Depth infinity, or no Depth, is 403 propfind-finite-depth; another Depth is 400', async (t) => {
  for (const headers of [{ depth: 'infinity' }, {}] as Record<string, string>[]) {
    const res = await call('PROPFIND', book, propfind('<d:getetag/>'), headers);
    t.equal(res.statusCode, 403);
    t.equal(res.headers['content-type'], XML);
    t.match(res.body, '<D:error xmlns:D="DAV:"');
    t.match(res.body, /<D:propfind-finite-depth\/><X:detail>[^<]+<\/X:detail><\/D:error>$/);
  }
  t.equal((await call('PROPFIND', book, undefined, { depth: '2' })).statusCode, 400);
});

t.test('a collection without its trailing slash is served as if it had one', async (t) => {
  const res = await call('PROPFIND', book.slice(0, -1), propfind('<d:resourcetype/>'), { depth: '0' });
  t.equal(res.statusCode, 207);
  t.strictSame(responseHrefs(res.body), [book]);
});

t.test("another user's paths, and unknown ones, are 404 for every method, like missing ones", async (t) => {
  const theirs = [
    `/dav/principals/${other.id}/`,
    `/dav/addressbooks/${other.id}/`,
    `/dav/addressbooks/${other.id}/contacts/`,
    `/dav/addressbooks/${other.id}/contacts/one.vcf`,
    '/dav/principals/',
    '/dav/addressbooks/',
    `/dav/addressbooks/${other.id}/contacts/one.vcf/extra`,
    '/dav/something',
  ];
  await davAs(app, other)('PUT', `/dav/addressbooks/${other.id}/contacts/one.vcf`, card('theirs', 'Their Card'), {
    'content-type': 'text/vcard',
  });
  for (const url of theirs) {
    for (const method of ['PROPFIND', 'GET', 'DELETE', 'REPORT', 'PROPPATCH', 'MKCOL']) {
      const res = await call(method, url, undefined, { depth: '0' });
      t.equal(res.statusCode, 404, `${method} ${url}`);
      t.match(res.body, '<X:detail>Not Found</X:detail>');
    }
  }
  const mine = await call('GET', `${book}missing.vcf`);
  const theirsCard = await call('GET', `/dav/addressbooks/${other.id}/contacts/one.vcf`);
  t.equal(mine.body, theirsCard.body, 'the same answer as a missing card of my own');
});

t.test(
  'PROPPATCH on the principal or home: each property 403 cannot-modify-protected-property; on the book a protected one fails it all',
  async (t) => {
    const update =
      '<d:propertyupdate xmlns:d="DAV:"><d:set><d:prop><d:displayname>Renamed</d:displayname></d:prop></d:set><d:remove><d:prop><d:owner/></d:prop></d:remove></d:propertyupdate>';
    for (const url of [`/dav/principals/${user.id}/`, `/dav/addressbooks/${user.id}/`]) {
      const res = await call('PROPPATCH', url, update);
      t.equal(res.statusCode, 207, url);
      t.match(
        res.body,
        `<D:response><D:href>${url}</D:href><D:propstat><D:prop><D:displayname/><D:owner/></D:prop><D:status>HTTP/1.1 403 Forbidden</D:status>` +
          '<D:error><D:cannot-modify-protected-property/></D:error></D:propstat></D:response>',
      );
    }
    const res = await call('PROPPATCH', book, update);
    t.equal(res.statusCode, 207);
    t.match(
      res.body,
      `<D:response><D:href>${book}</D:href><D:propstat><D:prop><D:owner/></D:prop><D:status>HTTP/1.1 403 Forbidden</D:status>` +
        '<D:error><D:cannot-modify-protected-property/></D:error></D:propstat>' +
        '<D:propstat><D:prop><D:displayname/></D:prop><D:status>HTTP/1.1 424 Failed Dependency</D:status></D:propstat></D:response>',
    );
    const after = await call('PROPFIND', book, propfind('<d:displayname/>'), { depth: '0' });
    t.match(after.body, '<D:displayname>Contacts</D:displayname>');
  },
);

t.test('a method the resource does not list is 405 with Allow, and changes nothing', async (t) => {
  const cases: [string, string, string][] = [
    ['MKCOL', book, 'book'],
    ['LOCK', `${book}one.vcf`, 'card'],
    ['UNLOCK', `${book}one.vcf`, 'card'],
    ['POST', book, 'book'],
    ['DELETE', book, 'book'],
    ['PUT', book, 'book'],
    ['GET', book, 'book'],
    ['GET', '/dav/', 'root'],
    ['PROPPATCH', `${book}one.vcf`, 'card'],
    ['PROPPATCH', '/dav/', 'root'],
  ];
  const allow: Record<string, string> = {
    other: 'OPTIONS, PROPFIND',
    root: 'OPTIONS, PROPFIND, REPORT',
    book: 'OPTIONS, PROPFIND, REPORT',
    card: 'OPTIONS, GET, HEAD, PUT, DELETE, PROPFIND, REPORT, COPY, MOVE',
  };
  for (const [method, url, kind] of cases) {
    const res = await call(
      method,
      url,
      method === 'PUT' ? card('x', 'X') : undefined,
      method === 'PUT' ? { 'content-type': 'text/vcard' } : {},
    );
    t.equal(res.statusCode, 405, `${method} ${url}`);
    t.equal(res.headers.allow, allow[kind]);
    t.match(res.body, '<X:detail>Method Not Allowed</X:detail>');
  }
  t.equal((await call('GET', `${book}one.vcf`)).statusCode, 200, 'the card is still there');
});

t.test(
  'RFC 9110: 405 names a resource that exists, for every method the server parses; a missing card is 404 for a method it does not list',
  async (t) => {
    for (const method of ['TRACE', 'SEARCH', 'PURGE', 'MKCALENDAR', 'LINK', 'PATCH']) {
      const existing = await call(method, `${book}one.vcf`);
      t.equal(existing.statusCode, 405, `${method} on a card`);
      t.equal(existing.headers.allow, 'OPTIONS, GET, HEAD, PUT, DELETE, PROPFIND, REPORT, COPY, MOVE');
      t.match(existing.body, '<X:detail>Method Not Allowed</X:detail>');
      const onBook = await call(method, book);
      t.equal(onBook.statusCode, 405, `${method} on the book`);
      t.equal(onBook.headers.allow, 'OPTIONS, PROPFIND, REPORT');
      const missing = await call(method, `${book}missing.vcf`);
      t.equal(missing.statusCode, 404, `${method} on a missing card`);
      t.equal(missing.headers.allow, undefined);
      t.match(missing.body, '<X:detail>Not Found</X:detail>');
    }
    for (const method of ['PROPPATCH', 'REPORT', 'LOCK']) {
      t.equal((await call(method, `${book}missing.vcf`, undefined, { depth: '0' })).statusCode, 404, `${method} on a missing card`);
    }
    const mkcol = await call('MKCOL', `${book}missing.vcf`);
    t.equal(mkcol.statusCode, 403, "MKCOL of an unmapped URL in the caller's own space is 403: no collection can be made there");
  },
);

t.test('/.well-known/carddav belongs to the DAV face: OPTIONS lists its methods, any other method is 405 D:error with Allow', async (t) => {
  const options = await app.inject({ method: 'OPTIONS', url: '/.well-known/carddav' });
  t.equal(options.statusCode, 200);
  t.equal(options.headers.allow, 'OPTIONS, GET, HEAD, PROPFIND');
  for (const method of ['POST', 'PUT', 'DELETE', 'PATCH', 'MKCOL', 'REPORT', 'TRACE', 'SEARCH']) {
    const res = await app.inject({ method: method as 'GET', url: '/.well-known/carddav' });
    t.equal(res.statusCode, 405, method);
    t.equal(res.headers.allow, 'OPTIONS, GET, HEAD, PROPFIND');
    t.equal(res.headers['content-type'], XML);
    t.match(res.body, '<X:detail>Method Not Allowed</X:detail></D:error>');
  }
  const elsewhere = await app.inject({ method: 'GET', url: '/.well-known/carddav-not' });
  t.equal(elsewhere.statusCode, 404, 'another well-known name is no DAV path: the REST 404');
  t.equal(elsewhere.headers['content-type'], 'application/json; charset=utf-8');
});

t.test('with CORS on, OPTIONS under /dav is still WebDAV discovery; elsewhere a non-preflight OPTIONS stays unrouted', async (t) => {
  const cors = await buildContactsApp(t, { env: { CORS_ORIGINS: 'https://app.example' } });
  const dav = await cors.inject({ method: 'OPTIONS', url: '/dav/' });
  t.equal(dav.statusCode, 200);
  t.equal(dav.headers.dav, '1, 3, access-control, addressbook');
  const api = await cors.inject({ method: 'OPTIONS', url: '/api/contacts/' });
  t.equal(api.statusCode, 404);
  const preflight = await cors.inject({
    method: 'OPTIONS',
    url: '/api/contacts/',
    headers: { origin: 'https://app.example', 'access-control-request-method': 'GET' },
  });
  t.equal(preflight.statusCode, 204);
});
