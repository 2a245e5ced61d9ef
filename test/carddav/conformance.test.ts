/**
 * Conformance to the letter of RFC 6352, RFC 4918, RFC 3253, RFC 3744 and RFC 6350 (docs/carddav.md,
 * "Protocol surface"): each test states the RFC text it checks and asserts the exact status and
 * `D:error` body the RFC names.
 */
import t from 'tap';
import { as, buildContactsApp, contactBody } from '../contacts/fixtures.js';
import { card, davAs, davUser, responseHrefs } from './dav-client.js';

const app = await buildContactsApp(t);
const user = await davUser(app);
const call = davAs(app, user);
const rest = as(app, user);
const book = `/dav/addressbooks/${user.id}/contacts/`;
const VCARD = { 'content-type': 'text/vcard; charset=utf-8' };
const NS = 'xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:carddav"';
const ROOT =
  '<?xml version="1.0" encoding="UTF-8"?><D:error xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:carddav" xmlns:CS="http://calendarserver.org/ns/" xmlns:X="urn:contacts-service:dav">';

/** The exact `D:error` body holding `condition` (an element as written) and the detail sentence. */
const errorBody = (condition: string, detail: string) => `${ROOT}${condition}<X:detail>${detail}</X:detail></D:error>`;

t.test('RFC 6352 §6.3.2.1: a card PUT with another media type names CARDDAV:supported-address-data in DAV:error', async (t) => {
  for (const type of ['text/xml', 'text/calendar']) {
    const res = await call('PUT', `${book}typed.vcf`, card('typed', 'Typed'), { 'content-type': type });
    t.equal(res.statusCode, 415, type);
    t.equal(res.headers['content-type'], 'application/xml; charset=utf-8');
    t.equal(res.body, errorBody('<C:supported-address-data/>', `Unsupported Media Type: ${type}`));
  }
  t.equal((await call('GET', `${book}typed.vcf`)).statusCode, 404, 'nothing stored');
});

t.test('RFC 6350 §6.7.6: UID has cardinality *1, so a card with two is 403 CARDDAV:valid-address-data (3.0 and 4.0)', async (t) => {
  for (const version of ['3.0', '4.0']) {
    const text = ['BEGIN:VCARD', `VERSION:${version}`, 'UID:first', 'UID:second', 'FN:Two Uids', 'END:VCARD', ''].join('\r\n');
    const res = await call('PUT', `${book}two-uids.vcf`, text, VCARD);
    t.equal(res.statusCode, 403, version);
    t.equal(res.body, errorBody('<C:valid-address-data/>', 'Not one well-formed vCard: it holds more than one UID'));
  }
  t.equal((await call('GET', `${book}two-uids.vcf`)).statusCode, 404, 'nothing stored');
});

t.test('RFC 6350 §3.2: a card with bare LF (or CR) line ends is stored repaired to CRLF; the PUT answer has no strong ETag', async (t) => {
  const lines = [
    'BEGIN:VCARD',
    'VERSION:4.0',
    'UID:bare-lf',
    'FN:Bare Line Feeds',
    'NOTE:a long note folded over two',
    '  lines',
    'END:VCARD',
    '',
  ];
  for (const [name, eol] of [
    ['lf', '\n'],
    ['cr', '\r'],
  ] as const) {
    const text = lines.map((line) => line.replace('bare-lf', `bare-${name}`)).join(eol);
    const put = await call('PUT', `${book}bare-${name}.vcf`, text, VCARD);
    t.equal(put.statusCode, 201, name);
    t.equal(put.headers.etag, undefined, 'RFC 6352 §6.3.2.3: no strong ETag for octets not stored as sent');
    const got = await call('GET', `${book}bare-${name}.vcf`);
    t.equal(got.body, text.replaceAll(eol, '\r\n'), 'GET serves the repaired octets');
    t.match(got.headers.etag, /^"/, 'GET carries the strong ETag of what it serves');
  }
  const crlf = await call('PUT', `${book}bare-lf.vcf`, lines.join('\r\n'), VCARD);
  t.equal(crlf.statusCode, 204);
  t.equal(crlf.headers.etag, (await call('GET', `${book}bare-lf.vcf`)).headers.etag, 'a card stored as sent has its ETag in the answer');
});

t.test('RFC 6350 §3.3: a control character in a value is 403 CARDDAV:valid-address-data (only tab is allowed)', async (t) => {
  for (const [label, line, property] of [
    ['BEL in NOTE', 'NOTE:bell\u0007here', 'NOTE'],
    ['ESC in a parameter', 'EMAIL;TYPE=w\u001Bork:esc@example.com', 'EMAIL'],
    ['DEL in X-NOTE', 'X-NOTE:del\u007F', 'X-NOTE'],
  ] as const) {
    const res = await call('PUT', `${book}control.vcf`, card('control', 'Control', [line]), VCARD);
    t.equal(res.statusCode, 403, label);
    t.equal(res.body, errorBody('<C:valid-address-data/>', `Not one well-formed vCard: ${property} holds a control character`));
  }
  t.equal((await call('PUT', `${book}control.vcf`, card('control', 'Control', ['NOTE:a\ttab']), VCARD)).statusCode, 201, 'tab is WSP');
});

t.test(
  'RFC 4918 §9.3.1: an (extended) MKCOL of a second book is 403, as creation is not allowed there; RFC 6352 §6.3.1 names the precondition',
  async (t) => {
    const mkcol =
      '<D:mkcol xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:carddav"><D:set><D:prop><D:resourcetype><D:collection/><C:addressbook/></D:resourcetype>' +
      '<D:displayname>Second</D:displayname></D:prop></D:set></D:mkcol>';
    const forbidden = errorBody(
      '<C:addressbook-collection-location-ok/>',
      'No collection can be created here: every user has one address book, fixed',
    );
    for (const url of [`/dav/addressbooks/${user.id}/second/`, `${book}inner/`]) {
      const res = await call('MKCOL', url, mkcol);
      t.equal(res.statusCode, 403, url);
      t.equal(res.body, forbidden);
      const plain = await call('MKCOL', url);
      t.equal(plain.statusCode, 403, `${url}: a plain MKCOL too`);
      t.equal(plain.body, forbidden);
    }
    const existing = await call('MKCOL', book, mkcol);
    t.equal(existing.statusCode, 405, 'RFC 4918 §9.3.1: MKCOL of a mapped URL is 405');
    t.equal(existing.headers.allow, 'OPTIONS, PROPFIND, REPORT');
    const home = await call('PROPFIND', `/dav/addressbooks/${user.id}/`, undefined, { depth: '1' });
    t.notMatch(home.body, 'second', 'nothing was created');
  },
);

t.test('RFC 6352 §10.3.1 (§8.6): CARDDAV:supported-filter names the prop-filter or param-filter it does not support', async (t) => {
  const query = (filter: string) =>
    call('REPORT', book, `<C:addressbook-query ${NS}><D:prop><D:getetag/></D:prop><C:filter>${filter}</C:filter></C:addressbook-query>`, {
      depth: '1',
    });
  for (const [filter, named, detail] of [
    [
      '<C:prop-filter name="ADR"><C:text-match>x</C:text-match></C:prop-filter>',
      '<C:prop-filter name="ADR"/>',
      "prop-filter on 'ADR' is not supported",
    ],
    [
      '<C:prop-filter name="EMAIL"><C:param-filter name="TYPE"><C:is-not-defined/></C:param-filter></C:prop-filter>',
      '<C:param-filter name="TYPE"/>',
      'param-filter is not supported in a prop-filter',
    ],
    [
      '<C:prop-filter name="FN"><C:text-match match-type="regex">x</C:text-match></C:prop-filter>',
      '<C:prop-filter name="FN"/>',
      'match-type &apos;regex&apos; is not supported',
    ],
  ] as const) {
    const res = await query(filter);
    t.equal(res.statusCode, 403, named);
    t.equal(res.body, errorBody(`<C:supported-filter>${named}</C:supported-filter>`, detail.replaceAll("'", '&apos;')));
  }
});

t.test('RFC 3253 §3.6: a REPORT the resource does not support is 403 DAV:supported-report', async (t) => {
  for (const [body, name] of [
    ['<D:expand-property xmlns:D="DAV:"><D:property name="owner"/></D:expand-property>', 'expand-property'],
    ['<X:whatever xmlns:X="urn:example:reports"/>', 'whatever'],
  ] as const) {
    const res = await call('REPORT', book, body);
    t.equal(res.statusCode, 403, name);
    t.equal(res.body, errorBody('<D:supported-report/>', `The report ${name} is not supported here`));
  }
});

t.test(
  'RFC 6352 §8.6, §8.7, §10.4: address-data of a type or version the server cannot produce is 403 CARDDAV:supported-address-data',
  async (t) => {
    await call('PUT', `${book}produced.vcf`, card('produced', 'Produced'), VCARD);
    const prop = (attributes: string) => `<D:prop><D:getetag/><C:address-data ${attributes}/></D:prop>`;
    for (const [attributes, detail] of [
      ['content-type="text/vcards"', 'address-data of type text/vcards cannot be produced: only text/vcard'],
      ['content-type="text/vcard" version="2.0"', 'address-data of vCard version 2.0 cannot be produced: only 3.0 or 4.0'],
      [
        'content-type="application/vcard+json" version="4.0"',
        'address-data of type application/vcard+json cannot be produced: only text/vcard',
      ],
    ] as const) {
      for (const body of [
        `<C:addressbook-query ${NS}>${prop(attributes)}</C:addressbook-query>`,
        `<C:addressbook-multiget ${NS}>${prop(attributes)}<D:href>${book}produced.vcf</D:href></C:addressbook-multiget>`,
      ]) {
        const res = await call('REPORT', book, body, { depth: '1' });
        t.equal(res.statusCode, 403, `${attributes} ${body.slice(0, 22)}`);
        t.equal(res.body, errorBody('<C:supported-address-data/>', detail));
      }
    }
  },
);

t.test(
  'RFC 6352 §3: a card answers addressbook-query and addressbook-multiget, and advertises them in DAV:supported-report-set',
  async (t) => {
    const put = await call('PUT', `${book}reported.vcf`, card('reported', 'Reported Card', ['EMAIL:reported@example.com']), VCARD);
    const etag = String(put.headers.etag).replaceAll('"', '&quot;');
    const url = `${book}reported.vcf`;
    const query = (text: string) =>
      `<C:addressbook-query ${NS}><D:prop><D:getetag/></D:prop><C:filter><C:prop-filter name="FN"><C:text-match>${text}</C:text-match></C:prop-filter></C:filter></C:addressbook-query>`;
    const ok = (href: string) =>
      `<D:response><D:href>${href}</D:href><D:propstat><D:prop><D:getetag>${etag}</D:getetag></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>`;
    for (const depth of ['0', '1']) {
      const matching = await call('REPORT', url, query('reported'), { depth });
      t.equal(matching.statusCode, 207, `query, Depth ${depth}`);
      t.ok(matching.body.endsWith(`${ok(url)}</D:multistatus>`), 'the card when it matches');
      const other = await call('REPORT', url, query('nobody'), { depth });
      t.equal(other.statusCode, 207);
      t.notMatch(other.body, '<D:response>', 'nothing when it does not');
    }
    const multiget = await call(
      'REPORT',
      url,
      `<C:addressbook-multiget ${NS}><D:prop><D:getetag/></D:prop><D:href>${url}</D:href></C:addressbook-multiget>`,
    );
    t.equal(multiget.statusCode, 207);
    t.ok(multiget.body.endsWith(`${ok(url)}</D:multistatus>`));
    const sync = await call('REPORT', url, '<D:sync-collection xmlns:D="DAV:"><D:sync-token/><D:prop/></D:sync-collection>');
    t.equal(sync.statusCode, 403, 'sync-collection is the book’s');
    t.equal(sync.body, errorBody('<D:supported-report/>', 'The report sync-collection is not supported here'));
    const missing = await call('REPORT', `${book}absent.vcf`, query('x'), { depth: '0' });
    t.equal(missing.statusCode, 404);
    const set = await call('PROPFIND', url, '<D:propfind xmlns:D="DAV:"><D:prop><D:supported-report-set/></D:prop></D:propfind>', {
      depth: '0',
    });
    t.equal(set.statusCode, 207);
    t.match(
      set.body,
      '<D:prop><D:supported-report-set><D:supported-report><D:report><C:addressbook-multiget/></D:report></D:supported-report>' +
        '<D:supported-report><D:report><C:addressbook-query/></D:report></D:supported-report></D:supported-report-set></D:prop><D:status>HTTP/1.1 200 OK</D:status>',
    );
    const options = await call('OPTIONS', url);
    t.equal(options.headers.allow, 'OPTIONS, GET, HEAD, PUT, DELETE, PROPFIND, REPORT, COPY, MOVE');
  },
);

t.test(
  'RFC 4918 §9.9: MOVE within the book renames the card; the contact keeps its id; sync reports the old name gone and the new one',
  async (t) => {
    const sync = (token: string) =>
      call(
        'REPORT',
        book,
        `<D:sync-collection xmlns:D="DAV:"><D:sync-token>${token}</D:sync-token><D:prop><D:getetag/></D:prop></D:sync-collection>`,
      );
    const tokenOf = (body: string) => /<D:sync-token>([^<]+)<\/D:sync-token>/.exec(body)![1]!;
    const put = await call('PUT', `${book}5.vcf`, card('move-five', 'Move Five', ['EMAIL:move.five@example.com']), VCARD);
    t.equal(put.statusCode, 201);
    const contact = (await rest('GET', '/api/contacts/?limit=1000'))
      .json<Record<string, any>[]>()
      .find((c) => c.email === 'move.five@example.com')!;
    const restToken = (await rest('GET', '/api/contacts/sync?limit=1000')).json<{ next_token: string }>().next_token;
    const davToken = tokenOf((await sync('')).body);

    const moved = await call('MOVE', `${book}5.vcf`, undefined, { destination: `http://localhost:80${book}move1.vcf` });
    t.equal(moved.statusCode, 201, 'RFC 4918 §9.9.4: 201 when a new resource was created at the destination');
    t.equal(moved.headers.etag, put.headers.etag, 'the card is the same: its ETag stays');
    t.equal((await call('GET', `${book}5.vcf`)).statusCode, 404, 'the source is gone');
    const got = await call('GET', `${book}move1.vcf`);
    t.equal(got.statusCode, 200);
    t.equal(got.body, card('move-five', 'Move Five', ['EMAIL:move.five@example.com']));
    const after = await rest('GET', `/api/contacts/${contact.id}`);
    t.equal(after.statusCode, 200, 'the contact keeps its id');
    t.strictSame(after.json(), contact, 'REST sees no change');

    const davDelta = await sync(davToken);
    t.equal(davDelta.statusCode, 207);
    t.strictSame(responseHrefs(davDelta.body), [`${book}move1.vcf`, `${book}5.vcf`], 'the new name added, the old one removed');
    t.match(davDelta.body, `<D:response><D:href>${book}5.vcf</D:href><D:status>HTTP/1.1 404 Not Found</D:status></D:response>`);
    const restDelta = (await rest('GET', `/api/contacts/sync?token=${encodeURIComponent(restToken)}`)).json<{
      deleted: number[];
      contacts: Record<string, any>[];
    }>();
    t.strictSame(restDelta.deleted, [], 'REST sync reports no deletion');
    t.strictSame(
      restDelta.contacts.find((c) => c.id === contact.id),
      contact,
      'the contact again at most, unchanged',
    );

    // Overwrite: F onto an existing card is 412 (RFC 4918 §9.9.4, §10.6); T replaces it (204).
    await call('PUT', `${book}other.vcf`, card('move-other', 'Move Other'), VCARD);
    const refused = await call('MOVE', `${book}move1.vcf`, undefined, { destination: `${book}other.vcf`, overwrite: 'F' });
    t.equal(refused.statusCode, 412);
    t.equal(refused.body, errorBody('', 'Precondition Failed: the destination exists and Overwrite is F'));
    t.equal((await call('GET', `${book}move1.vcf`)).statusCode, 200, 'nothing moved');
    const token2 = tokenOf((await sync('')).body);
    const replaced = await call('MOVE', `${book}move1.vcf`, undefined, { destination: `${book}other.vcf`, overwrite: 'T' });
    t.equal(replaced.statusCode, 204, 'RFC 4918 §9.9.4: 204 when an existing resource was overwritten');
    t.match((await call('GET', `${book}other.vcf`)).body, 'UID:move-five');
    t.equal((await rest('GET', `/api/contacts/${contact.id}`)).statusCode, 200);
    const delta2 = await sync(token2);
    t.strictSame(responseHrefs(delta2.body), [`${book}other.vcf`, `${book}move1.vcf`], 'other.vcf holds the moved card; move1.vcf is gone');

    // COPY within the one book would hold the UID twice: RFC 6352 §6.3.2.1 CARDDAV:no-uid-conflict.
    const copied = await call('COPY', `${book}other.vcf`, undefined, { destination: `${book}copy.vcf` });
    t.equal(copied.statusCode, 409);
    t.equal(
      copied.body,
      errorBody(
        `<C:no-uid-conflict><D:href>${book}other.vcf</D:href></C:no-uid-conflict>`,
        'A card of this address book already has this UID: the card being copied',
      ),
    );
    t.equal((await call('GET', `${book}copy.vcf`)).statusCode, 404);

    for (const [method, url, headers, status, detail] of [
      ['MOVE', '/dav/', { destination: '/dav/x/' }, 403, 'Collections cannot be copied or moved'],
      ['COPY', '/dav/', { destination: '/dav/x/' }, 403, 'Collections cannot be copied or moved'],
      ['MOVE', book, { destination: `/dav/addressbooks/${user.id}/other/` }, 403, 'Collections cannot be copied or moved'],
      ['MOVE', `${book}other.vcf`, {}, 400, 'COPY and MOVE need a Destination header'],
      [
        'MOVE',
        `${book}other.vcf`,
        { destination: `/dav/addressbooks/${user.id + 1}/contacts/x.vcf` },
        403,
        'A card can only be copied or moved to a card of its own address book',
      ],
      ['MOVE', `${book}other.vcf`, { destination: `${book}other.vcf` }, 403, 'The source and the destination are the same card'],
      ['MOVE', `${book}other.vcf`, { destination: 'https://elsewhere.example/dav/x.vcf' }, 502, 'The Destination is on another server'],
      [
        'MOVE',
        `${book}other.vcf`,
        { destination: `${book}y.vcf`, overwrite: 'maybe' },
        400,
        'Invalid Overwrite header &apos;maybe&apos;: T or F',
      ],
      ['MOVE', `${book}absent.vcf`, { destination: `${book}y.vcf` }, 404, 'Not Found'],
    ] as const) {
      const res = await call(method, url, undefined, headers);
      t.equal(res.statusCode, status, `${method} ${url} ${JSON.stringify(headers)}`);
      t.equal(res.body, errorBody('', detail));
    }
  },
);

t.test(
  'RFC 4918 §9.2: PROPPATCH stores dead properties on the book and PROPFIND returns them; DAV:displayname is settable (§15.2)',
  async (t) => {
    const propfind = (props: string) =>
      call('PROPFIND', book, `<D:propfind xmlns:D="DAV:" xmlns:A="http://apple.com/ns/ical/">${props}</D:propfind>`, { depth: '0' });
    const patch = (body: string) =>
      call(
        'PROPPATCH',
        book,
        `<D:propertyupdate xmlns:D="DAV:" xmlns:A="http://apple.com/ns/ical/" xmlns:Z="urn:example:z">${body}</D:propertyupdate>`,
      );
    const set = await patch(
      '<D:set><D:prop><D:displayname>Family</D:displayname><A:calendar-color>#FF2968FF</A:calendar-color>' +
        '<Z:nested kind="a"><Z:item>one</Z:item><Z:item>two</Z:item></Z:nested></D:prop></D:set><D:remove><D:prop><Z:absent/></D:prop></D:remove>',
    );
    t.equal(set.statusCode, 207);
    t.match(
      set.body,
      `<D:response><D:href>${book}</D:href><D:propstat><D:prop><D:displayname/><N1:calendar-color xmlns:N1="http://apple.com/ns/ical/"/>` +
        '<N2:nested xmlns:N2="urn:example:z"/><N3:absent xmlns:N3="urn:example:z"/></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>',
      'every instruction 200, removing an absent property too (§14.23)',
    );
    const read = await propfind('<D:prop><D:displayname/><A:calendar-color/><Z:nested xmlns:Z="urn:example:z"/></D:prop>');
    t.match(
      read.body,
      '<D:prop><D:displayname>Family</D:displayname><N1:calendar-color xmlns:N1="http://apple.com/ns/ical/">#FF2968FF</N1:calendar-color>' +
        '<N2:nested xmlns:N2="urn:example:z" kind="a"><N0:item xmlns:N0="urn:example:z">one</N0:item><N1:item xmlns:N1="urn:example:z">two</N1:item></N2:nested>' +
        '</D:prop><D:status>HTTP/1.1 200 OK</D:status>',
    );
    t.match((await call('PROPFIND', book, undefined, { depth: '0' })).body, '#FF2968FF', 'allprop returns dead properties (§9.1)');

    // Protected properties stay 403; the whole PROPPATCH fails (424 for the rest) and nothing changes.
    for (const protectedName of [
      '<D:resourcetype/>',
      '<D:getetag/>',
      '<D:sync-token/>',
      '<C:supported-address-data xmlns:C="urn:ietf:params:xml:ns:carddav"/>',
    ]) {
      const refused = await patch(`<D:set><D:prop>${protectedName}<D:displayname>Other</D:displayname></D:prop></D:set>`);
      t.equal(refused.statusCode, 207);
      t.match(
        refused.body,
        '<D:status>HTTP/1.1 403 Forbidden</D:status><D:error><D:cannot-modify-protected-property/></D:error></D:propstat>',
        protectedName,
      );
      t.match(
        refused.body,
        '<D:propstat><D:prop><D:displayname/></D:prop><D:status>HTTP/1.1 424 Failed Dependency</D:status></D:propstat>',
      );
    }
    t.match((await propfind('<D:prop><D:displayname/></D:prop>')).body, '<D:displayname>Family</D:displayname>', 'nothing changed');

    // Bounded per book: 32 properties and 16 KiB; past either, the sets are 507 and nothing is stored.
    const many = Array.from({ length: 30 }, (_, i) => `<Z:p${i}>v</Z:p${i}>`).join('');
    const tooMany = await patch(`<D:set><D:prop>${many}</D:prop></D:set>`);
    t.match(tooMany.body, '<D:status>HTTP/1.1 507 Insufficient Storage</D:status>', '3 + 30 properties are over 32');
    const tooBig = await patch(`<D:set><D:prop><Z:big>${'b'.repeat(16 * 1024)}</Z:big></D:prop></D:set>`);
    t.match(tooBig.body, '<D:prop><N0:big xmlns:N0="urn:example:z"/></D:prop><D:status>HTTP/1.1 507 Insufficient Storage</D:status>');
    t.notMatch((await propfind('<D:prop><Z:p0 xmlns:Z="urn:example:z"/></D:prop>')).body, '>v<', 'nothing stored');

    const removed = await patch('<D:remove><D:prop><D:displayname/><A:calendar-color/></D:prop></D:remove>');
    t.match(removed.body, '<D:status>HTTP/1.1 200 OK</D:status>');
    const after = await propfind('<D:prop><D:displayname/><A:calendar-color/></D:prop>');
    t.match(after.body, '<D:displayname>Contacts</D:displayname>', 'the displayname falls back to Contacts');
    t.match(
      after.body,
      '<D:prop><N0:calendar-color xmlns:N0="http://apple.com/ns/ical/"/></D:prop><D:status>HTTP/1.1 404 Not Found</D:status>',
    );
  },
);

t.test(
  'RFC 3744 (RFC 6352 §3): a read-only ACL — DAV:acl, supported-privilege-set, acl-restrictions, principal-collection-set; ACL is 403',
  async (t) => {
    const principal = `/dav/principals/${user.id}/`;
    const res = await call(
      'PROPFIND',
      book,
      '<D:propfind xmlns:D="DAV:"><D:prop><D:acl/><D:acl-restrictions/><D:principal-collection-set/><D:supported-privilege-set/></D:prop></D:propfind>',
      { depth: '0' },
    );
    t.equal(res.statusCode, 207);
    t.match(
      res.body,
      `<D:prop><D:acl><D:ace><D:principal><D:href>${principal}</D:href></D:principal><D:grant><D:privilege><D:read/></D:privilege>` +
        '<D:privilege><D:write/></D:privilege><D:privilege><D:write-content/></D:privilege><D:privilege><D:bind/></D:privilege>' +
        '<D:privilege><D:unbind/></D:privilege></D:grant><D:protected/></D:ace></D:acl>' +
        '<D:acl-restrictions><D:grant-only/><D:no-invert/></D:acl-restrictions>' +
        `<D:principal-collection-set><D:href>${principal}</D:href></D:principal-collection-set>` +
        '<D:supported-privilege-set><D:supported-privilege><D:privilege><D:all/></D:privilege><D:abstract/><D:description xml:lang="en">Any operation</D:description>',
    );
    t.match(
      res.body,
      '<D:supported-privilege><D:privilege><D:write-acl/></D:privilege><D:description xml:lang="en">Change the ACL</D:description></D:supported-privilege>',
    );

    const acl = await call(
      'ACL',
      book,
      `<D:acl xmlns:D="DAV:"><D:ace><D:principal><D:all/></D:principal><D:grant><D:privilege><D:read/></D:privilege></D:grant></D:ace></D:acl>`,
    );
    t.equal(acl.statusCode, 403, 'RFC 3744 §8.1.1: every ACE is protected');
    t.equal(acl.body, errorBody('<D:no-protected-ace-conflict/>', 'The ACL of this book cannot be changed: its one ACE is protected'));
    t.equal((await call('ACL', `${book}absent.vcf`)).statusCode, 404);
  },
);

t.test('RFC 3744 §9: the four principal reports, over the one principal the user can see', async (t) => {
  const principal = `/dav/principals/${user.id}/`;
  const displayname = `<D:response><D:href>${principal}</D:href><D:propstat><D:prop><D:displayname>${user.username}</D:displayname></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>`;
  const prop = '<D:prop><D:displayname/></D:prop>';
  const propSet = await call('REPORT', book, `<D:acl-principal-prop-set xmlns:D="DAV:">${prop}</D:acl-principal-prop-set>`, { depth: '0' });
  t.equal(propSet.statusCode, 207);
  t.ok(propSet.body.endsWith(`>${displayname}</D:multistatus>`), 'acl-principal-prop-set (§9.2)');
  const match = await call('REPORT', principal, `<D:principal-match xmlns:D="DAV:"><D:self/>${prop}</D:principal-match>`, { depth: '0' });
  t.ok(match.body.endsWith(`>${displayname}</D:multistatus>`), 'principal-match (§9.3)');
  const search = (text: string) =>
    call(
      'REPORT',
      principal,
      `<D:principal-property-search xmlns:D="DAV:"><D:property-search><D:prop><D:displayname/></D:prop><D:match>${text}</D:match></D:property-search>${prop}</D:principal-property-search>`,
      { depth: '0' },
    );
  t.ok(
    (await search(user.username.slice(2, 6).toUpperCase())).body.endsWith(`>${displayname}</D:multistatus>`),
    'principal-property-search (§9.4)',
  );
  t.notMatch((await search('nobody-by-this-name')).body, '<D:response>');
  const searchable = await call('REPORT', principal, '<D:principal-search-property-set xmlns:D="DAV:"/>', { depth: '0' });
  t.equal(searchable.statusCode, 200, '§9.5 answers 200 with its own document');
  t.match(
    searchable.body,
    '<D:principal-search-property-set xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:carddav" xmlns:CS="http://calendarserver.org/ns/" xmlns:X="urn:contacts-service:dav">' +
      '<D:principal-search-property><D:prop><D:displayname/></D:prop><D:description xml:lang="en">Display name</D:description></D:principal-search-property></D:principal-search-property-set>',
  );
  const reports = await call('PROPFIND', principal, '<D:propfind xmlns:D="DAV:"><D:prop><D:supported-report-set/></D:prop></D:propfind>', {
    depth: '0',
  });
  t.match(reports.body, '<D:supported-report><D:report><D:principal-property-search/></D:report></D:supported-report>');
  const deep = await call('REPORT', principal, '<D:principal-search-property-set xmlns:D="DAV:"/>', { depth: '1' });
  t.equal(deep.statusCode, 400);
});

t.test('RFC 6352 §5.1.1: a card asked for in the other vCard version is converted, 3.0 to 4.0 and back', async (t) => {
  const v3 = [
    'BEGIN:VCARD',
    'VERSION:3.0',
    'UID:conv-3',
    'FN:Jane Doe',
    'N:Doe;Jane',
    'item1.TEL;TYPE=CELL,VOICE,PREF:+1 555 010 0199',
    'TEL;TYPE=WORK:ext. 12',
    'EMAIL;TYPE=INTERNET,WORK:jane@example.com',
    'ADR;TYPE=HOME:;;1 Main St\\, Apt 2;Springfield',
    'BDAY:1985-04-12',
    'PHOTO;ENCODING=b;TYPE=JPEG:/9j/4AAQSkZJRg==',
    'NOTE:a\\, b\\; c',
    'END:VCARD',
    '',
  ].join('\r\n');
  const as4 = [
    'BEGIN:VCARD',
    'VERSION:4.0',
    'UID:conv-3',
    'FN:Jane Doe',
    'N:Doe;Jane;;;',
    'item1.TEL;TYPE=cell,voice;PREF=1;VALUE=uri:tel:+1-555-010-0199',
    'TEL;TYPE=work:ext. 12',
    'EMAIL;TYPE=work:jane@example.com',
    'ADR;TYPE=home:;;1 Main St\\, Apt 2;Springfield;;;',
    'BDAY:19850412',
    'PHOTO:data:image/jpeg;base64,/9j/4AAQSkZJRg==',
    'NOTE:a\\, b\\; c',
    'END:VCARD',
    '',
  ].join('\r\n');
  const v4 = [
    'BEGIN:VCARD',
    'VERSION:4.0',
    'UID:conv-4',
    'FN:John Roe',
    'N:Roe;John;;;',
    'TEL;VALUE=uri;TYPE=cell;PREF=1:tel:+1-555-010-0100',
    'EMAIL;TYPE=home:john@example.com',
    'BDAY:19700102',
    'LOGO:data:image/png;base64,iVBORw0KGgo=',
    'PHOTO:https://example.com/john.jpg',
    'END:VCARD',
    '',
  ].join('\r\n');
  const as3 = [
    'BEGIN:VCARD',
    'VERSION:3.0',
    'UID:conv-4',
    'FN:John Roe',
    'N:Roe;John;;;',
    'TEL;TYPE=CELL,PREF:+1-555-010-0100',
    'EMAIL;TYPE=HOME:john@example.com',
    'BDAY:1970-01-02',
    'LOGO;ENCODING=b;TYPE=PNG:iVBORw0KGgo=',
    'PHOTO;VALUE=uri:https://example.com/john.jpg',
    'END:VCARD',
    '',
  ].join('\r\n');
  t.equal((await call('PUT', `${book}conv-3.vcf`, v3, VCARD)).statusCode, 201);
  t.equal((await call('PUT', `${book}conv-4.vcf`, v4, VCARD)).statusCode, 201);
  const multiget = (version: string, name: string) =>
    call(
      'REPORT',
      book,
      `<C:addressbook-multiget ${NS}><D:prop><C:address-data content-type="text/vcard" version="${version}"/></D:prop><D:href>${book}${name}</D:href></C:addressbook-multiget>`,
    );
  const dataOf = (body: string) => /<C:address-data>([^<]*)<\/C:address-data>/.exec(body)?.[1];
  t.equal(dataOf((await multiget('4.0', 'conv-3.vcf')).body), as4, 'a 3.0 card asked for in 4.0');
  t.equal(dataOf((await multiget('3.0', 'conv-4.vcf')).body), as3, 'a 4.0 card asked for in 3.0');
  t.equal(dataOf((await multiget('3.0', 'conv-3.vcf')).body), v3, 'a card in the version asked for is as stored');
  const query = await call(
    'REPORT',
    book,
    `<C:addressbook-query ${NS}><D:prop><C:address-data version="3.0"/></D:prop><C:filter><C:prop-filter name="UID"><C:text-match match-type="equals">conv-4</C:text-match></C:prop-filter></C:filter></C:addressbook-query>`,
    { depth: '1' },
  );
  t.equal(dataOf(query.body), as3, 'addressbook-query converts too');

  const get4 = await call('GET', `${book}conv-3.vcf`, undefined, { accept: 'text/vcard; version=4.0' });
  t.equal(get4.statusCode, 200);
  t.equal(get4.body, as4, 'GET with Accept: text/vcard; version=4.0');
  t.equal(get4.headers.vary, 'Accept');
  const get3 = await call('GET', `${book}conv-4.vcf`, undefined, { accept: 'text/vcard;version=3.0' });
  t.equal(get3.body, as3);
  const either = await call('GET', `${book}conv-4.vcf`, undefined, { accept: 'text/vcard;version=3.0, text/vcard;version=4.0' });
  t.equal(either.body, v4, 'a card in an accepted version is as stored');
  t.equal((await call('GET', `${book}conv-4.vcf`)).body, v4, 'without Accept, as stored');
  const set = await call('PROPFIND', book, `<D:propfind ${NS}><D:prop><C:supported-address-data/></D:prop></D:propfind>`, { depth: '0' });
  t.match(
    set.body,
    '<C:supported-address-data><C:address-data-type content-type="text/vcard" version="3.0"/><C:address-data-type content-type="text/vcard" version="4.0"/></C:supported-address-data>',
  );
});

t.test(
  'RFC 4918 §9.9: MOVE of a contact made over REST (its card named {uuid}.vcf) renames it; sync reports the derived name gone',
  async (t) => {
    const created = await rest('POST', '/api/contacts/', contactBody({ first_name: 'Rest', last_name: 'Moved' }));
    t.equal(created.statusCode, 201);
    const listing = await call('PROPFIND', book, '<D:propfind xmlns:D="DAV:"><D:prop><D:getetag/></D:prop></D:propfind>', { depth: '1' });
    const derived = responseHrefs(listing.body).find((href) =>
      listing.body.includes(`${href}</D:href><D:propstat><D:prop><D:getetag>${String(created.headers.etag).replaceAll('"', '&quot;')}`),
    )!;
    t.match(derived, /\/[0-9a-f-]{36}\.vcf$/);
    const token = /<D:sync-token>([^<]+)<\/D:sync-token>/.exec(
      (await call('REPORT', book, '<D:sync-collection xmlns:D="DAV:"><D:sync-token/><D:prop/></D:sync-collection>')).body,
    )![1]!;
    const moved = await call('MOVE', derived, undefined, { destination: `${book}rest-moved.vcf` });
    t.equal(moved.statusCode, 201);
    t.equal(moved.headers.etag, created.headers.etag);
    t.match((await call('GET', `${book}rest-moved.vcf`)).body, 'FN:Rest Moved');
    t.equal((await call('GET', derived)).statusCode, 404);
    t.equal((await rest('GET', `/api/contacts/${created.json().id}`)).headers.etag, created.headers.etag, 'REST sees the same contact');
    const delta = await call(
      'REPORT',
      book,
      `<D:sync-collection xmlns:D="DAV:"><D:sync-token>${token}</D:sync-token><D:prop/></D:sync-collection>`,
    );
    t.strictSame(responseHrefs(delta.body), [`${book}rest-moved.vcf`, derived]);
  },
);

t.test('two MOVEs of one card at once: one moves it (201), the other finds no source (404)', async (t) => {
  await call('PUT', `${book}racing.vcf`, card('racing', 'Racing Card'), VCARD);
  const outcomes = await Promise.all(
    ['race-a.vcf', 'race-b.vcf'].map((name) => call('MOVE', `${book}racing.vcf`, undefined, { destination: `${book}${name}` })),
  );
  t.strictSame(outcomes.map((res) => res.statusCode).sort(), [201, 404]);
  const found = await Promise.all(
    ['racing.vcf', 'race-a.vcf', 'race-b.vcf'].map(async (name) => (await call('GET', `${book}${name}`)).statusCode),
  );
  t.strictSame(found.sort(), [200, 404, 404], 'the card is at exactly one name');
});
