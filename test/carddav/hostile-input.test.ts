/**
 * /dav hostile input (docs/carddav.md, "Bounds"): NUL and control characters in paths, bodies and
 * credentials, oversized UIDs, names and hrefs, malformed XML, filters and property lists past their
 * bounds, on every method. Each answer is its exact status; an error is a `D:error` with its
 * `X:detail`, never a 500; a 207 is XML the service's own parser reads back.
 */
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { parseXml } from '../../src/carddav/xml.js';
import { buildContactsApp } from '../contacts/fixtures.js';
import { basicAuth, card, davAs, davUser, responseHrefs } from './dav-client.js';

const app = await buildContactsApp(t);
const user = await davUser(app);
const call = davAs(app, user);
const book = `/dav/addressbooks/${user.id}/contacts/`;
const VCARD = { 'content-type': 'text/vcard' };
const NS = 'xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:carddav"';
const put = await call('PUT', `${book}one.vcf`, card('one', 'One Card'), VCARD);
if (put.statusCode !== 201) throw new Error(`PUT: ${put.statusCode} ${put.body}`);

const MALFORMED = 'Malformed XML body';
const CONTROL_PATH = 'Invalid path: a segment holds a control character';
const propfind = (props: string) => `<D:propfind xmlns:D="DAV:"><D:prop>${props}</D:prop></D:propfind>`;
const multiget = (hrefs: string[]) =>
  `<C:addressbook-multiget ${NS}><D:prop><D:getetag/></D:prop>${hrefs.map((href) => `<D:href>${href}</D:href>`).join('')}</C:addressbook-multiget>`;
const query = (filter: string) =>
  `<C:addressbook-query ${NS}><D:prop><D:getetag/></D:prop><C:filter>${filter}</C:filter></C:addressbook-query>`;
const sync = (token: string) => `<D:sync-collection xmlns:D="DAV:"><D:sync-token>${token}</D:sync-token><D:prop/></D:sync-collection>`;
const proppatch = (props: string) => `<D:propertyupdate xmlns:D="DAV:"><D:set><D:prop>${props}</D:prop></D:set></D:propertyupdate>`;
const textMatch = (value: string, attributes = '') =>
  `<C:prop-filter name="FN"><C:text-match${attributes}>${value}</C:text-match></C:prop-filter>`;
const manyNames = (n: number) => Array.from({ length: n }, (_, i) => `<D:p${i}/>`).join('');

interface Case {
  name: string;
  method: string;
  url: string;
  body?: string;
  headers?: Record<string, string>;
  status: number;
  /** The exact X:detail of a D:error; a 207 gives none. */
  detail?: string;
  /** For a D:error: the condition element it holds (a name: empty; else as written). */
  condition?: string;
  /** For a 207: what the body holds. */
  holds?: string;
}

const cases: Case[] = [
  // A name that would be a path (own book only, but a client or an export could follow it).
  ...[
    ['PUT', `${book}..%2F..%2Fx.vcf`],
    ['GET', `${book}..%2F..%2Fx.vcf`],
    ['PUT', `${book}..%5C..%5Cx.vcf`],
    ['DELETE', `${book}a%2Fb.vcf`],
    ['PROPFIND', `/dav/addressbooks/${user.id}%2Fcontacts/`],
  ].map(([method, url]): Case => ({
    name: `an encoded separator, ${method} ${url}`,
    method: method!,
    url: url!,
    ...(method === 'PUT' ? { body: card('separator', 'Separator'), headers: VCARD } : { headers: { depth: '0' } }),
    status: 400,
    detail: 'Invalid path: a segment holds an encoded slash or backslash',
  })),
  // NUL and control characters in path segments, on every method.
  ...['GET', 'HEAD', 'DELETE', 'PROPFIND', 'PROPPATCH', 'REPORT', 'MKCOL', 'OPTIONS', 'COPY', 'TRACE', 'SEARCH'].map((method): Case => ({
    name: `NUL in a card name, ${method}`,
    method,
    url: `${book}a%00b.vcf`,
    headers: { depth: '0' },
    status: 400,
    detail: CONTROL_PATH,
  })),
  {
    name: 'NUL in a card name, PUT',
    method: 'PUT',
    url: `${book}a%00b.vcf`,
    body: card('nul-name', 'Nul Name'),
    headers: VCARD,
    status: 400,
    detail: CONTROL_PATH,
  },
  {
    name: 'a control character in the user segment',
    method: 'PROPFIND',
    url: `/dav/principals/${user.id}%01/`,
    headers: { depth: '0' },
    status: 400,
    detail: CONTROL_PATH,
  },
  {
    name: 'DEL in the book segment',
    method: 'REPORT',
    url: `/dav/addressbooks/${user.id}/contacts%7F/`,
    body: sync(''),
    status: 400,
    detail: CONTROL_PATH,
  },
  { name: 'a broken percent-encoding', method: 'GET', url: `${book}%E0%A4%A.vcf`, status: 400, detail: 'Malformed URL' },
  {
    name: 'a broken percent-encoding in the user segment',
    method: 'PROPFIND',
    url: '/dav/principals/%FF%/',
    headers: { depth: '0' },
    status: 400,
    detail: 'Malformed URL',
  },
  {
    name: 'a card name over 255 octets',
    method: 'PUT',
    url: `${book}${'n'.repeat(256)}.vcf`,
    body: card('long-name', 'Long Name'),
    headers: VCARD,
    status: 404,
    detail: 'Not Found',
  },
  // NUL in bodies.
  {
    name: 'NUL in a card',
    method: 'PUT',
    url: `${book}nul.vcf`,
    body: card('nul', 'Nul\u0000Card'),
    headers: VCARD,
    status: 403,
    condition: 'C:valid-address-data',
    detail: 'Not one well-formed vCard: it holds a NUL character',
  },
  {
    name: 'NUL in the UID',
    method: 'PUT',
    url: `${book}nul-uid.vcf`,
    body: card('nul\u0000uid', 'Nul Uid'),
    headers: VCARD,
    status: 403,
    condition: 'C:valid-address-data',
    detail: 'Not one well-formed vCard: it holds a NUL character',
  },
  {
    name: 'a raw NUL in PROPFIND XML',
    method: 'PROPFIND',
    url: book,
    body: propfind('\u0000'),
    headers: { depth: '0' },
    status: 400,
    detail: MALFORMED,
  },
  {
    name: 'a NUL character reference in a multiget href',
    method: 'REPORT',
    url: book,
    body: multiget([`${book}&#0;.vcf`]),
    status: 400,
    detail: MALFORMED,
  },
  {
    name: 'a control character in a sync token',
    method: 'REPORT',
    url: book,
    body: sync('urn:contacts-service:sync:&#1;'),
    status: 400,
    detail: MALFORMED,
  },
  {
    name: 'a control character in an attribute',
    method: 'REPORT',
    url: book,
    body: query(textMatch('a', ' match-type="&#2;"')),
    headers: { depth: '1' },
    status: 400,
    detail: MALFORMED,
  },
  {
    name: 'a control character in PROPPATCH',
    method: 'PROPPATCH',
    url: book,
    body: proppatch('<D:displayname>\u0003</D:displayname>'),
    status: 400,
    detail: MALFORMED,
  },
  {
    name: 'a percent-encoded NUL in a multiget href',
    method: 'REPORT',
    url: book,
    body: multiget([`${book}a%00b.vcf`]),
    status: 207,
    holds: `<D:response><D:href>${book}a%00b.vcf</D:href><D:status>HTTP/1.1 404 Not Found</D:status></D:response>`,
  },
  // Credentials.
  {
    name: 'NUL in the Basic user name',
    method: 'PROPFIND',
    url: book,
    headers: { authorization: basicAuth(`${user.username}\u0000x`, user.appPassword), depth: '0' },
    status: 401,
    detail: 'Not authenticated',
  },
  {
    name: 'NUL in the Basic password',
    method: 'GET',
    url: `${book}one.vcf`,
    headers: { authorization: basicAuth(user.username, `${user.appPassword}\u0000`) },
    status: 401,
    detail: 'Not authenticated',
  },
  {
    name: 'a Basic user name of 100,000 characters',
    method: 'DELETE',
    url: `${book}one.vcf`,
    headers: { authorization: basicAuth('u'.repeat(100_000), 'x') },
    status: 401,
    detail: 'Not authenticated',
  },
  // Oversized values.
  {
    name: 'a UID of 5,000 random characters',
    method: 'PUT',
    url: `${book}long-uid.vcf`,
    body: card(randomBytes(2500).toString('hex'), 'Long Uid'),
    headers: VCARD,
    status: 403,
    condition: 'C:valid-address-data',
    detail: 'The UID is longer than 1024 octets',
  },
  {
    name: 'a property name of 100,000 characters',
    method: 'PROPFIND',
    url: book,
    body: propfind(`<D:${'a'.repeat(100_000)}/>`),
    headers: { depth: '1' },
    status: 400,
    detail: 'The property names and namespaces of the request hold 100004 characters: at most 4096',
  },
  {
    name: 'a namespace of 100,000 characters',
    method: 'REPORT',
    url: book,
    body: `<D:sync-collection xmlns:D="DAV:"><D:sync-token/><D:prop><x:y xmlns:x="${'n'.repeat(100_000)}"/></D:prop></D:sync-collection>`,
    status: 400,
    detail: 'The property names and namespaces of the request hold 100001 characters: at most 4096',
  },
  {
    name: '101 property names in PROPFIND',
    method: 'PROPFIND',
    url: book,
    body: propfind(manyNames(101)),
    headers: { depth: '1' },
    status: 400,
    detail: 'The request names 101 properties: at most 100',
  },
  {
    name: '100 property names in PROPFIND (the bound)',
    method: 'PROPFIND',
    url: book,
    body: propfind(manyNames(100)),
    headers: { depth: '0' },
    status: 207,
    holds: '<D:p99/>',
  },
  {
    name: '20,000 property names in PROPPATCH (over its 128 KiB of body)',
    method: 'PROPPATCH',
    url: book,
    body: proppatch(manyNames(20_000)),
    status: 413,
    detail: 'A PROPPATCH body is at most 131072 bytes',
  },
  {
    name: '2,000 property names in PROPPATCH',
    method: 'PROPPATCH',
    url: book,
    body: proppatch(manyNames(2_000)),
    status: 400,
    detail: 'The request names 2000 properties: at most 100',
  },
  {
    name: 'an element with 65 attributes',
    method: 'PROPFIND',
    url: book,
    body: `<D:propfind xmlns:D="DAV:" ${Array.from({ length: 64 }, (_, i) => `a${i}=""`).join(' ')}/>`,
    headers: { depth: '0' },
    status: 413,
    detail: 'An XML element holds more than 64 attributes',
  },
  {
    name: 'a REPORT of 20,001 elements',
    method: 'REPORT',
    url: book,
    body: `<D:sync-collection xmlns:D="DAV:">${'<D:x/>'.repeat(20_000)}</D:sync-collection>`,
    status: 413,
    detail: 'The XML body holds more than 20000 elements',
  },
  {
    name: 'an undeclared prefix',
    method: 'PROPFIND',
    url: book,
    body: '<D:propfind xmlns:D="DAV:"><D:prop><Q:x/></D:prop></D:propfind>',
    headers: { depth: '0' },
    status: 400,
    detail: MALFORMED,
  },
  {
    name: 'an undeclared prefix named as an object property',
    method: 'PROPFIND',
    url: book,
    body: '<constructor:propfind/>',
    headers: { depth: '0' },
    status: 400,
    detail: MALFORMED,
  },
  {
    name: 'an attribute with an undeclared prefix',
    method: 'PROPFIND',
    url: book,
    body: '<D:propfind xmlns:D="DAV:" Q:a="1"/>',
    headers: { depth: '0' },
    status: 400,
    detail: MALFORMED,
  },
  {
    name: 'a prefix declared on a sibling is out of scope',
    method: 'PROPFIND',
    url: book,
    body: '<D:propfind xmlns:D="DAV:"><D:prop><Q:a xmlns:Q="urn:q"/><Q:b/></D:prop></D:propfind>',
    headers: { depth: '0' },
    status: 400,
    detail: MALFORMED,
  },
  {
    name: "a prefix redeclared on a child names the child's namespace there only",
    method: 'PROPFIND',
    url: book,
    body: '<D:propfind xmlns:D="DAV:"><D:prop><D:getetag xmlns:D="urn:other"/><D:displayname/></D:prop></D:propfind>',
    headers: { depth: '0' },
    status: 207,
    holds:
      '<D:prop><D:displayname>Contacts</D:displayname></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat><D:propstat><D:prop><N0:getetag xmlns:N0="urn:other"/></D:prop><D:status>HTTP/1.1 404 Not Found</D:status>',
  },
  {
    name: 'a PROPFIND body over 128 KiB',
    method: 'PROPFIND',
    url: book,
    body: propfind(`<!-- ${'x'.repeat(128 * 1024)} -->`),
    headers: { depth: '0' },
    status: 413,
    detail: 'A PROPFIND body is at most 131072 bytes',
  },
  {
    name: '101 vCard properties in address-data',
    method: 'REPORT',
    url: book,
    body: `<C:addressbook-multiget ${NS}><D:prop><C:address-data>${'<C:prop name="FN"/>'.repeat(101)}</C:address-data></D:prop><D:href>${book}one.vcf</D:href></C:addressbook-multiget>`,
    status: 400,
    detail: 'address-data names 101 vCard properties: at most 100',
  },
  {
    name: 'a multiget href of 5,000 characters',
    method: 'REPORT',
    url: book,
    body: multiget([`${book}${'h'.repeat(5000)}`]),
    status: 400,
    detail: `An href holds ${book.length + 5000} characters: at most 4096`,
  },
  {
    name: '33 prop-filters',
    method: 'REPORT',
    url: book,
    body: query(textMatch('a').repeat(33)),
    headers: { depth: '1' },
    status: 403,
    condition: 'C:supported-filter',
    detail: 'The filter holds 33 prop-filters: at most 32',
  },
  {
    name: '65 text-matches',
    method: 'REPORT',
    url: book,
    body: query(`<C:prop-filter name="FN">${'<C:text-match>a</C:text-match>'.repeat(65)}</C:prop-filter>`),
    headers: { depth: '1' },
    status: 403,
    condition: 'C:supported-filter',
    detail: 'The filter holds 65 text-matches: at most 64',
  },
  {
    name: 'a text-match of 1,025 characters',
    method: 'REPORT',
    url: book,
    body: query(textMatch('t'.repeat(1025))),
    headers: { depth: '1' },
    status: 403,
    condition: 'C:supported-filter',
    detail: 'A text-match holds 1025 characters: at most 1024',
  },
  {
    name: 'a match-type of 100,000 characters',
    method: 'REPORT',
    url: book,
    body: query(textMatch('a', ` match-type="${'m'.repeat(100_000)}"`)),
    headers: { depth: '1' },
    status: 403,
    condition: '<C:supported-filter><C:prop-filter name="FN"/></C:supported-filter>',
    detail: `match-type '${'m'.repeat(64)}…' is not supported`,
  },
  {
    name: 'a prop-filter name of 100,000 characters',
    method: 'REPORT',
    url: book,
    body: query(`<C:prop-filter name="${'p'.repeat(100_000)}"/>`),
    headers: { depth: '1' },
    status: 403,
    condition: `<C:supported-filter><C:prop-filter name="${'p'.repeat(64)}…"/></C:supported-filter>`,
    detail: `prop-filter on '${'P'.repeat(64)}…' is not supported`,
  },
  {
    name: 'a sync token of 500,000 characters',
    method: 'REPORT',
    url: book,
    body: sync(`urn:contacts-service:sync:${'t'.repeat(500_000)}`),
    status: 403,
    condition: 'D:valid-sync-token',
    detail: 'Invalid sync token',
  },
  {
    name: 'a Depth of 5,000 characters',
    method: 'PROPFIND',
    url: book,
    headers: { depth: 'd'.repeat(5000) },
    status: 400,
    detail: `Invalid Depth header '${'d'.repeat(64)}…'`,
  },
  {
    name: 'a content type of 5,000 characters',
    method: 'PUT',
    url: `${book}type.vcf`,
    body: card('type', 'Type'),
    headers: { 'content-type': `text/${'v'.repeat(5000)}` },
    status: 415,
    detail: `Unsupported Media Type: text/${'v'.repeat(59)}…`,
  },
  // Malformed XML.
  {
    name: 'a root in no namespace',
    method: 'PROPFIND',
    url: book,
    body: '<propfind xmlns=""><prop/></propfind>',
    headers: { depth: '0' },
    status: 400,
    detail: 'Malformed XML body: the root element must be propfind',
  },
  {
    name: 'a prefix bound to the empty namespace',
    method: 'PROPFIND',
    url: book,
    body: '<D:propfind xmlns:D=""><D:prop/></D:propfind>',
    headers: { depth: '0' },
    status: 400,
    detail: MALFORMED,
  },
  {
    name: 'a control character in an element name',
    method: 'REPORT',
    url: book,
    body: '<D:sync-collection xmlns:D="DAV:"><D:a\u0001/></D:sync-collection>',
    status: 400,
    detail: MALFORMED,
  },
  {
    name: 'an unknown root for REPORT',
    method: 'REPORT',
    url: book,
    body: '<D:x xmlns:D="DAV:"/>',
    status: 403,
    condition: 'D:supported-report',
    detail: 'The report x is not supported here',
  },
  {
    name: 'XML that stops',
    method: 'PROPPATCH',
    url: book,
    body: '<D:propertyupdate xmlns:D="DAV:"><D:set>',
    status: 400,
    detail: MALFORMED,
  },
  {
    name: 'a property in no namespace',
    method: 'PROPFIND',
    url: book,
    body: propfind('<x xmlns=""/>'),
    headers: { depth: '0' },
    status: 207,
    holds: '<D:prop><x/></D:prop><D:status>HTTP/1.1 404 Not Found</D:status>',
  },
  {
    name: 'a PROPPATCH of a property in no namespace',
    method: 'PROPPATCH',
    url: book,
    body: proppatch('<x xmlns="">v</x>'),
    status: 207,
    holds: '<D:prop><x/></D:prop><D:status>HTTP/1.1 200 OK</D:status>',
  },
  // Methods.
  {
    name: 'MKCOL with a body',
    method: 'MKCOL',
    url: `${book}sub/`,
    body: '<D:mkcol xmlns:D="DAV:"/>',
    status: 403,
    condition: 'C:addressbook-collection-location-ok',
    detail: 'No collection can be created here: every user has one address book, fixed',
  },
  { name: 'TRACE on the book', method: 'TRACE', url: book, status: 405, detail: 'Method Not Allowed' },
  { name: 'SEARCH on a card', method: 'SEARCH', url: `${book}one.vcf`, status: 405, detail: 'Method Not Allowed' },
  { name: 'PURGE on a missing card', method: 'PURGE', url: `${book}none.vcf`, status: 404, detail: 'Not Found' },
  {
    name: 'PROPFIND with a JSON body',
    method: 'PROPFIND',
    url: book,
    body: '{}',
    headers: { depth: '0', 'content-type': 'application/json' },
    status: 415,
    detail: 'Unsupported Media Type: application/json',
  },
];

t.test('every hostile request is its exact 4xx D:error (or a well-formed 207), never a 500', async (t) => {
  for (const c of cases) {
    const res = await call(c.method, c.url, c.body, c.headers);
    t.equal(res.statusCode, c.status, `${c.name}: status`);
    if (c.status === 207) {
      await t.resolves(parseXml(res.body), `${c.name}: the multistatus is well-formed XML`);
      t.ok(res.body.includes(c.holds!), `${c.name}: the multistatus holds ${c.holds}`);
      continue;
    }
    t.equal(res.headers['content-type'], 'application/xml; charset=utf-8', `${c.name}: content type`);
    if (c.method === 'HEAD') continue;
    const condition = c.condition === undefined ? '' : c.condition.startsWith('<') ? c.condition : `<${c.condition}/>`;
    t.ok(
      res.body.endsWith(`${condition}<X:detail>${c.detail!.replaceAll("'", '&apos;')}</X:detail></D:error>`) &&
        res.body.includes('<D:error xmlns:D="DAV:"'),
      `${c.name}: a D:error with '${c.detail}' (got ${res.body.slice(0, 400)})`,
    );
  }
});

t.test('a multiget answers each distinct href once, however often it is repeated', async (t) => {
  const res = await call('REPORT', book, multiget(Array.from({ length: 5000 }, () => `${book}one.vcf`)));
  t.equal(res.statusCode, 207);
  t.strictSame(responseHrefs(res.body), [`${book}one.vcf`]);
});

t.test('nothing the hostile requests sent was stored', async (t) => {
  const listing = await call('PROPFIND', book, undefined, { depth: '1' });
  t.strictSame(responseHrefs(listing.body), [book, `${book}one.vcf`]);
});
