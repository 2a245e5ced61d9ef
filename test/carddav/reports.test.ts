/**
 * The three REPORTs (docs/carddav.md), with the examples of RFC 6352 §8.6 and §8.7 and RFC 6578
 * §3; the sync token and ctag on the REST sync frontier; XML safety (external entities and entity
 * expansion refused before anything is fetched or expanded); request bodies that are not XML.
 */
import { createHmac } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { as, buildContactsApp, contactBody, createUser } from '../contacts/fixtures.js';
import { TEST_JWT_SECRET } from '../helper.js';
import { card, davAs, davUser, responseHrefs, xmlTag } from './dav-client.js';

const app = await buildContactsApp(t);
const user = await davUser(app);
const call = davAs(app, user);
const rest = as(app, user);
const book = `/dav/addressbooks/${user.id}/contacts/`;
const VCARD = { 'content-type': 'text/vcard' };
const NS = 'xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:carddav"';

/** RFC 6352 §8.6.4's card vcf102. */
const VCF102 =
  'BEGIN:VCARD\r\nVERSION:3.0\r\nNICKNAME:me\r\nUID:34222-232@example.com\r\nFN:Cyrus Daboo\r\nEMAIL:daboo@example.com\r\nEND:VCARD\r\n';
const OTHERS = [
  [
    'vcf103.vcf',
    card('vcf103', 'Bernard Desruisseaux', [
      'NICKNAME:bd',
      'item1.EMAIL:bernard@example.com',
      'item1.X-ABLabel:Work',
      'TEL:+1 555 0100',
      'ORG:Example Inc.;Research',
    ]),
  ],
  [
    'vcf104.vcf',
    card('vcf104', 'Mike Douglass', ['N:Douglass;Mike;;;', 'EMAIL;TYPE=work:mike@example.org', 'EMAIL;TYPE=home:MIKE@HOME.example']),
  ],
] as const;
for (const [name, text] of [['vcf102.vcf', VCF102], ...OTHERS]) {
  const put = await call('PUT', `${book}${name}`, text, VCARD);
  if (put.statusCode !== 201) throw new Error(`PUT ${name}: ${put.statusCode} ${put.body}`);
}

const report = (body: string, headers: Record<string, string> = {}) => call('REPORT', book, body, headers);
const tokenOf = (body: string) => /<D:sync-token>([^<]+)<\/D:sync-token>/.exec(body)?.[1];

t.test('RFC 6352 §8.7.1: addressbook-multiget returns each card asked for, and a 404 response for an href that is none', async (t) => {
  const res = await report(
    `<?xml version="1.0" encoding="utf-8" ?><C:addressbook-multiget ${NS}><D:prop><D:getetag/><C:address-data><C:prop name="VERSION"/><C:prop name="UID"/>` +
      `<C:prop name="NICKNAME"/><C:prop name="EMAIL"/><C:prop name="FN"/></C:address-data></D:prop><D:href>${book}vcf102.vcf</D:href><D:href>${book}vcf1.vcf</D:href>` +
      `<D:href>/dav/addressbooks/${user.id + 1000}/contacts/vcf102.vcf</D:href></C:addressbook-multiget>`,
    { depth: 'infinity' },
  );
  t.equal(res.statusCode, 207);
  const etag = (await call('GET', `${book}vcf102.vcf`)).headers.etag;
  t.match(
    res.body,
    `<D:response><D:href>${book}vcf102.vcf</D:href><D:propstat><D:prop><D:getetag>${xmlTag(etag)}</D:getetag><C:address-data>` +
      'BEGIN:VCARD\r\nVERSION:3.0\r\nNICKNAME:me\r\nUID:34222-232@example.com\r\nFN:Cyrus Daboo\r\nEMAIL:daboo@example.com\r\nEND:VCARD\r\n' +
      '</C:address-data></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>' +
      `<D:response><D:href>${book}vcf1.vcf</D:href><D:status>HTTP/1.1 404 Not Found</D:status></D:response>` +
      `<D:response><D:href>/dav/addressbooks/${user.id + 1000}/contacts/vcf102.vcf</D:href><D:status>HTTP/1.1 404 Not Found</D:status></D:response>`,
  );
});

t.test('a partial address-data keeps BEGIN, END, VERSION and UID, and a grouped property keeps its group', async (t) => {
  const res = await report(
    `<C:addressbook-multiget ${NS}><D:prop><C:address-data><C:prop name="EMAIL"/></C:address-data></D:prop><D:href>${book}vcf103.vcf</D:href></C:addressbook-multiget>`,
  );
  t.match(
    res.body,
    '<C:address-data>BEGIN:VCARD\r\nVERSION:3.0\r\nUID:vcf103\r\nitem1.EMAIL:bernard@example.com\r\nitem1.X-ABLabel:Work\r\nEND:VCARD\r\n</C:address-data>',
  );
});

const query = (filter: string, extra = '') =>
  report(`<C:addressbook-query ${NS}><D:prop><D:getetag/></D:prop><C:filter${extra}>${filter}</C:filter></C:addressbook-query>`, {
    depth: '1',
  });

t.test('RFC 6352 §8.6.4 and §8.6.5: addressbook-query by text-match', async (t) => {
  const rfc = await report(
    `<?xml version="1.0" encoding="utf-8" ?><C:addressbook-query ${NS}><D:prop><D:getetag/><C:address-data><C:prop name="VERSION"/><C:prop name="UID"/>` +
      '<C:prop name="NICKNAME"/><C:prop name="EMAIL"/><C:prop name="FN"/></C:address-data></D:prop><C:filter><C:prop-filter name="NICKNAME">' +
      '<C:text-match collation="i;unicode-casemap" match-type="equals">me</C:text-match></C:prop-filter></C:filter></C:addressbook-query>',
    { depth: '1' },
  );
  t.equal(rfc.statusCode, 207);
  t.strictSame(responseHrefs(rfc.body), [`${book}vcf102.vcf`]);
  t.match(
    rfc.body,
    '<C:address-data>BEGIN:VCARD\r\nVERSION:3.0\r\nNICKNAME:me\r\nUID:34222-232@example.com\r\nFN:Cyrus Daboo\r\nEMAIL:daboo@example.com\r\nEND:VCARD\r\n</C:address-data>',
  );

  const anyof = await query(
    '<C:prop-filter name="FN"><C:text-match collation="i;unicode-casemap" match-type="contains">daboo</C:text-match></C:prop-filter>' +
      '<C:prop-filter name="EMAIL"><C:text-match collation="i;unicode-casemap" match-type="contains">douglass</C:text-match></C:prop-filter>',
    ' test="anyof"',
  );
  t.strictSame(responseHrefs(anyof.body), [`${book}vcf102.vcf`]);
});

t.test('addressbook-query: match types, collations, negation, is-not-defined, allof, structured values, every instance', async (t) => {
  const cases: [string, string, string[]][] = [
    ['<C:prop-filter name="EMAIL"><C:text-match match-type="ends-with">home.example</C:text-match></C:prop-filter>', '', ['vcf104.vcf']],
    [
      '<C:prop-filter name="EMAIL"><C:text-match match-type="ends-with" collation="i;octet">home.example</C:text-match></C:prop-filter>',
      '',
      [],
    ],
    [
      '<C:prop-filter name="EMAIL"><C:text-match match-type="ends-with" collation="i;ascii-casemap">HOME.EXAMPLE</C:text-match></C:prop-filter>',
      '',
      ['vcf104.vcf'],
    ],
    ['<C:prop-filter name="FN"><C:text-match match-type="starts-with">mike</C:text-match></C:prop-filter>', '', ['vcf104.vcf']],
    ['<C:prop-filter name="FN"><C:text-match negate-condition="yes">o</C:text-match></C:prop-filter>', '', ['vcf103.vcf']],
    ['<C:prop-filter name="NICKNAME"><C:is-not-defined/></C:prop-filter>', '', ['vcf104.vcf']],
    ['<C:prop-filter name="N"><C:text-match match-type="equals">Douglass;Mike;;;</C:text-match></C:prop-filter>', '', ['vcf104.vcf']],
    ['<C:prop-filter name="ORG"><C:text-match>example inc.;research</C:text-match></C:prop-filter>', '', ['vcf103.vcf']],
    [
      '<C:prop-filter name="TEL"><C:text-match>555</C:text-match></C:prop-filter><C:prop-filter name="UID"><C:text-match>vcf10</C:text-match></C:prop-filter>',
      ' test="allof"',
      ['vcf103.vcf'],
    ],
    [
      '<C:prop-filter name="EMAIL" test="allof"><C:text-match>mike</C:text-match><C:text-match>home</C:text-match></C:prop-filter>',
      '',
      ['vcf104.vcf'],
    ],
    ['', '', ['vcf102.vcf', 'vcf103.vcf', 'vcf104.vcf']],
  ];
  for (const [filter, extra, expected] of cases) {
    const res = await query(filter, extra);
    t.equal(res.statusCode, 207, filter);
    t.strictSame(
      responseHrefs(res.body),
      expected.map((name) => `${book}${name}`),
      filter || 'no filter: every card',
    );
  }
});

t.test('addressbook-query refusals: 403 supported-filter or supported-collation; a limit cuts with a 507 response', async (t) => {
  const refusals: [string, string][] = [
    [
      '<C:prop-filter name="EMAIL"><C:param-filter name="TYPE"><C:is-not-defined/></C:param-filter></C:prop-filter>',
      '<C:supported-filter><C:param-filter name="TYPE"/></C:supported-filter>',
    ],
    [
      '<C:prop-filter name="ADR"><C:text-match>x</C:text-match></C:prop-filter>',
      '<C:supported-filter><C:prop-filter name="ADR"/></C:supported-filter>',
    ],
    [
      '<C:prop-filter name="FN"><C:text-match match-type="regex">x</C:text-match></C:prop-filter>',
      '<C:supported-filter><C:prop-filter name="FN"/></C:supported-filter>',
    ],
    ['<C:prop-filter name="FN"><C:text-match collation="i;klingon">x</C:text-match></C:prop-filter>', '<C:supported-collation/>'],
  ];
  for (const [filter, condition] of refusals) {
    const res = await query(filter);
    t.equal(res.statusCode, 403, filter);
    t.match(res.body, `${condition}<X:detail>`);
  }
  const limited = await report(
    `<C:addressbook-query ${NS}><D:prop><D:getetag/></D:prop><C:limit><C:nresults>2</C:nresults></C:limit></C:addressbook-query>`,
    { depth: '1' },
  );
  t.equal(limited.statusCode, 207);
  t.strictSame(responseHrefs(limited.body), [`${book}vcf102.vcf`, `${book}vcf103.vcf`, book]);
  t.match(
    limited.body,
    `<D:response><D:href>${book}</D:href><D:status>HTTP/1.1 507 Insufficient Storage</D:status><D:error><D:number-of-matches-within-limits/></D:error></D:response>`,
  );
});

const syncCollection = (token: string, extra = '') =>
  report(
    `<?xml version="1.0" encoding="utf-8" ?><D:sync-collection xmlns:D="DAV:"><D:sync-token>${token}</D:sync-token><D:sync-level>1</D:sync-level>${extra}<D:prop><D:getetag/></D:prop></D:sync-collection>`,
  );

/** The book's sync token once two reads agree: another database's transaction may hold the frontier back for a moment. */
async function settledToken(): Promise<string> {
  let previous = '';
  for (let attempt = 0; attempt < 50; attempt++) {
    const res = await call('PROPFIND', book, '<D:propfind xmlns:D="DAV:"><D:prop><D:sync-token/></D:prop></D:propfind>', { depth: '0' });
    const token = tokenOf(res.body)!;
    if (token === previous) return token;
    previous = token;
  }
  throw new Error('the sync token never settled');
}

t.test("RFC 6578 §3.8: sync-collection from an empty token lists every card and gives the book's token", async (t) => {
  const res = await syncCollection('');
  t.equal(res.statusCode, 207);
  t.strictSame(
    responseHrefs(res.body),
    ['vcf102.vcf', 'vcf103.vcf', 'vcf104.vcf'].map((name) => `${book}${name}`),
  );
  t.match(res.body, /<D:getetag>&quot;[^<]+&quot;<\/D:getetag>/);
  t.match(tokenOf(res.body), /^urn:contacts-service:sync:/);
  t.equal(tokenOf(res.body), await settledToken(), "equal to the book's D:sync-token at that time");
});

t.test(
  'RFC 6578 §3.9: a token gives each card changed since (once, latest state) and each removed one as a 404 without propstat',
  async (t) => {
    const token = await settledToken();
    const nothing = await syncCollection(token);
    t.strictSame(responseHrefs(nothing.body), [], 'nothing changed');
    t.equal(tokenOf(nothing.body), token);

    const created = await rest('POST', '/api/contacts/', contactBody({ first_name: 'Sync', last_name: 'Rest' }));
    await rest('PATCH', `/api/contacts/${created.json().id}`, { first_name: 'Synced' });
    await call('PUT', `${book}vcf105.vcf`, card('vcf105', 'New Card'), VCARD);
    await call('PUT', `${book}vcf103.vcf`, OTHERS[0][1].replace('FN:Bernard', 'FN:Bernie'), VCARD);
    await call('DELETE', `${book}vcf104.vcf`);
    const res = await syncCollection(token);
    t.equal(res.statusCode, 207);
    const restHref = /<D:href>([^<]+)<\/D:href><D:propstat><D:prop><D:getetag>([^<]+)<\/D:getetag>/.exec(res.body);
    t.equal(
      restHref?.[2],
      xmlTag((await rest('GET', `/api/contacts/${created.json().id}`)).headers.etag),
      'the REST contact in its latest state',
    );
    t.strictSame(
      responseHrefs(res.body),
      [restHref![1], `${book}vcf105.vcf`, `${book}vcf103.vcf`, `${book}vcf104.vcf`],
      'in the order the changes were made',
    );
    t.match(res.body, `<D:response><D:href>${book}vcf104.vcf</D:href><D:status>HTTP/1.1 404 Not Found</D:status></D:response>`);
    const next = tokenOf(res.body)!;
    t.not(next, token);
    t.equal(next, await settledToken());
    t.strictSame(responseHrefs((await syncCollection(next)).body), [], 'nothing after the new token');
  },
);

t.test('RFC 6578 §3.10: D:limit cuts the answer with a 507 response and a token to go on from; no change is missed', async (t) => {
  const token = await settledToken();
  for (let i = 0; i < 5; i++) await call('PUT', `${book}paged-${i}.vcf`, card(`paged-${i}`, `Paged ${i}`), VCARD);
  await rest('DELETE', `/api/contacts/${(await rest('GET', '/api/contacts/?limit=1')).json()[0].id}`);
  const seen: string[] = [];
  let next = token;
  let rounds = 0;
  for (;;) {
    const res = await syncCollection(next, '<D:limit><D:nresults>2</D:nresults></D:limit>');
    t.equal(res.statusCode, 207);
    const hrefs = responseHrefs(res.body);
    const truncated = hrefs.at(-1) === book;
    seen.push(...hrefs.filter((href) => href !== book));
    if (truncated)
      t.match(
        res.body,
        `<D:response><D:href>${book}</D:href><D:status>HTTP/1.1 507 Insufficient Storage</D:status><D:error><D:number-of-matches-within-limits/></D:error></D:response>`,
      );
    next = tokenOf(res.body)!;
    rounds++;
    if (!truncated) break;
  }
  t.equal(rounds, 3);
  t.equal(seen.length, 6, 'five created and one removed');
  t.strictSame(
    seen.slice(0, 5),
    [0, 1, 2, 3, 4].map((i) => `${book}paged-${i}.vcf`),
  );
  t.equal(next, await settledToken());
});

t.test('the sync token and ctag change on every write through either face, and on nothing else', async (t) => {
  const before = await settledToken();
  await rest('GET', '/api/contacts/');
  await call('GET', `${book}vcf102.vcf`);
  const stranger = await createUser(app);
  await as(app, stranger)('POST', '/api/contacts/', contactBody());
  t.equal(await settledToken(), before, "reads and another user's writes leave it");
  const tokens = [before];
  const writes: [string, () => Promise<unknown>][] = [
    ['REST create', () => rest('POST', '/api/contacts/', contactBody({ email: 'ctag@example.com' }))],
    [
      'REST patch',
      async () =>
        rest('PATCH', `/api/contacts/${(await rest('GET', '/api/contacts/?query=email:eq:ctag@example.com')).json()[0].id}`, {
          first_name: 'C',
        }),
    ],
    [
      'REST import',
      () =>
        app.inject({
          method: 'POST',
          url: '/api/contacts/import',
          headers: { authorization: `Bearer ${user.token}`, 'content-type': 'text/csv' },
          payload: 'first_name,last_name,email,phone,birthday\nI,M,import@example.com,+14155550123,1990-01-01\n',
        }),
    ],
    ['DAV PUT', () => call('PUT', `${book}ctag.vcf`, card('ctag', 'Ctag Card'), VCARD)],
    ['DAV PUT unchanged', () => call('PUT', `${book}ctag.vcf`, card('ctag', 'Ctag Card'), VCARD)],
    ['DAV DELETE', () => call('DELETE', `${book}ctag.vcf`)],
    [
      'REST delete',
      async () => rest('DELETE', `/api/contacts/${(await rest('GET', '/api/contacts/?query=email:eq:ctag@example.com')).json()[0].id}`),
    ],
  ];
  for (const [label, write] of writes) {
    await write();
    const token = await settledToken();
    t.notOk(tokens.includes(token), `${label} moves it`);
    tokens.push(token);
  }
  const ctag = await call(
    'PROPFIND',
    book,
    '<D:propfind xmlns:D="DAV:" xmlns:CS="http://calendarserver.org/ns/"><D:prop><CS:getctag/></D:prop></D:propfind>',
    { depth: '0' },
  );
  t.match(ctag.body, `<CS:getctag>${tokens.at(-1)}</CS:getctag>`);
});

t.test("sync-collection refusals: a malformed, tampered or another user's token is 403 valid-sync-token; Depth 1 is 400", async (t) => {
  const other = await davUser(app);
  const theirs = tokenOf(
    (
      await davAs(app, other)(
        'REPORT',
        `/dav/addressbooks/${other.id}/contacts/`,
        '<D:sync-collection xmlns:D="DAV:"><D:sync-token/><D:prop/></D:sync-collection>',
      )
    ).body,
  )!;
  const mine = await settledToken();
  for (const token of [
    'nonsense',
    'urn:contacts-service:sync:e30.AAAA',
    theirs,
    `${mine.slice(0, -2)}AA`,
    'http://example.com/ns/sync/1234',
  ]) {
    const res = await syncCollection(token);
    t.equal(res.statusCode, 403, token);
    t.match(res.body, /<D:valid-sync-token\/><X:detail>Invalid sync token<\/X:detail>/);
  }
  const depth = await report('<D:sync-collection xmlns:D="DAV:"><D:sync-token/><D:prop/></D:sync-collection>', { depth: '1' });
  t.equal(depth.statusCode, 400);
});

t.test('a sync token handed out before sync positions is 403 valid-sync-token: the client syncs in full again', async (t) => {
  // Signed as tokens were when they held transaction ids (the key label of that time).
  const key = createHmac('sha256', TEST_JWT_SECRET).update('contacts dav sync token').digest();
  const signed = (claims: Record<string, unknown>) => {
    const payload = Buffer.from(JSON.stringify({ u: user.id, ...claims })).toString('base64url');
    return `urn:contacts-service:sync:${payload}.${createHmac('sha256', key).update(payload).digest().subarray(0, 16).toString('base64url')}`;
  };
  for (const token of [signed({ f: '734' }), signed({ f: '734', a: 12 }), signed({ f: '734', x: '735', i: 3, n: '740' })]) {
    const res = await syncCollection(token);
    t.equal(res.statusCode, 403);
    t.match(res.body, /<D:valid-sync-token\/><X:detail>Sync token from before sync positions: start a full sync<\/X:detail>/);
  }
  const full = await syncCollection('');
  t.equal(full.statusCode, 207, 'an empty token: every card again');
});

t.test(
  'a token is refused only once a deletion it must report is forgotten: one just handed out always works, however long the book was quiet',
  async (t) => {
    let clock = new Date();
    const aged = await buildContactsApp(t, { now: () => clock, env: { SYNC_TOMBSTONE_DAYS: '1' } });
    const owner = await davUser(aged);
    const dav = davAs(aged, owner);
    const url = `/dav/addressbooks/${owner.id}/contacts/`;
    const sync = (token: string) =>
      dav('REPORT', url, `<D:sync-collection xmlns:D="DAV:"><D:sync-token>${token}</D:sync-token><D:prop/></D:sync-collection>`);
    await dav('PUT', `${url}a.vcf`, card('a', 'A'), VCARD);
    const first = tokenOf((await sync('')).body)!;
    clock = new Date(Date.now() + 3 * 86_400_000);
    const quiet = await sync(first);
    t.equal(quiet.statusCode, 207, "nothing changed: the token is the book's");
    const fresh = tokenOf(quiet.body)!;
    await dav('PUT', `${url}b.vcf`, card('b', 'B'), VCARD);
    const after = await sync(fresh);
    t.equal(
      after.statusCode,
      207,
      'the token handed out a moment ago is honoured, though the book was quiet for longer than the retention',
    );
    t.strictSame(responseHrefs(after.body), [`${url}b.vcf`]);

    // The database stamps a deletion with its own clock: the app's goes back to it.
    clock = new Date();
    const beforeDelete = tokenOf(after.body)!;
    await dav('DELETE', `${url}b.vcf`);
    const told = await sync(beforeDelete);
    t.equal(told.statusCode, 207, 'within the retention the deletion is told');
    t.strictSame(responseHrefs(told.body), [`${url}b.vcf`]);
    clock = new Date(Date.now() + 3 * 86_400_000);
    const stale = await sync(beforeDelete);
    t.equal(stale.statusCode, 403, 'its tombstone is purged: the token cannot be answered');
    t.match(
      stale.body,
      '<D:valid-sync-token/><X:detail>Sync token expired: deletions since it was handed out are forgotten; start a full sync</X:detail>',
    );
    const current = tokenOf(told.body)!;
    t.equal((await sync(current)).statusCode, 207, 'a token after the forgotten deletion is still honoured');
  },
);

t.test(
  'RFC 6578 §3.7: a D:limit of 0 is 507 number-of-matches-within-limits while changes wait (never a skipped change), a plain answer when none do',
  async (t) => {
    const zero = '<D:limit><D:nresults>0</D:nresults></D:limit>';
    const first = await syncCollection('', zero);
    t.equal(first.statusCode, 507);
    t.equal(first.headers['content-type'], 'application/xml; charset=utf-8');
    t.match(first.body, '<D:error xmlns:D="DAV:"');
    t.match(
      first.body,
      '<D:number-of-matches-within-limits/><X:detail>The limit of 0 holds none of the changes waiting: ask for at least 1</X:detail></D:error>',
    );
    const token = await settledToken();
    const none = await syncCollection(token, zero);
    t.equal(none.statusCode, 207);
    t.strictSame(responseHrefs(none.body), []);
    t.equal(tokenOf(none.body), token);
    await call('PUT', `${book}limit-zero.vcf`, card('limit-zero', 'Limit Zero'), VCARD);
    t.equal((await syncCollection(token, zero)).statusCode, 507, 'a change waits');
    const one = await syncCollection(token, '<D:limit><D:nresults>1</D:nresults></D:limit>');
    t.strictSame(responseHrefs(one.body), [`${book}limit-zero.vcf`], 'the change is still there for the next request');
  },
);

t.test('XML safety: a DOCTYPE (external entity, billion laughs) is 400 Malformed XML body, with nothing fetched or expanded', async (t) => {
  let fetched = 0;
  const bait = createServer((_request, response) => {
    fetched++;
    response.end('<!ENTITY leaked "LEAKED">');
  });
  await new Promise<void>((resolve) => bait.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise((resolve) => bait.close(resolve)));
  const { port } = bait.address() as AddressInfo;
  const laughs =
    '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">' +
    Array.from({ length: 9 }, (_, i) => `<!ENTITY lol${i + 1} "${`&lol${i === 0 ? '' : i};`.repeat(10)}">`).join('') +
    ']><D:propfind xmlns:D="DAV:"><D:prop><D:displayname>&lol9;</D:displayname></D:prop></D:propfind>';
  const attacks = [
    `<?xml version="1.0"?><!DOCTYPE D:propfind [<!ENTITY xxe SYSTEM "http://127.0.0.1:${port}/xxe">]><D:propfind xmlns:D="DAV:"><D:prop><D:displayname>&xxe;</D:displayname></D:prop></D:propfind>`,
    '<?xml version="1.0"?><!DOCTYPE D:propfind [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><D:propfind xmlns:D="DAV:"><D:prop><D:displayname>&xxe;</D:displayname></D:prop></D:propfind>',
    `<?xml version="1.0"?><!DOCTYPE D:propfind SYSTEM "http://127.0.0.1:${port}/dtd"><D:propfind xmlns:D="DAV:"><D:prop/></D:propfind>`,
    `<?xml version="1.0"?><!DOCTYPE D:propfind [<!ENTITY % remote SYSTEM "http://127.0.0.1:${port}/param"> %remote;]><D:propfind xmlns:D="DAV:"><D:prop/></D:propfind>`,
    laughs,
  ];
  for (const body of attacks) {
    for (const [method, url, headers] of [
      ['PROPFIND', book, { depth: '0' }],
      ['REPORT', book, {}],
      ['PROPPATCH', book, {}],
    ] as const) {
      const res = await call(method, url, body, headers);
      t.equal(res.statusCode, 400, `${method}: ${body.slice(0, 60)}`);
      t.match(res.body, '<X:detail>Malformed XML body</X:detail></D:error>');
      t.notMatch(res.body, /LEAKED|root:|lollol/);
    }
  }
  t.equal(fetched, 0, 'nothing was fetched');
});

t.test(
  'bodies that are not XML: not well-formed or the wrong root is 400 (an unknown report 403), another content type 415, over 1 MiB 413',
  async (t) => {
    const cases: [string, string, Record<string, string>, number][] = [
      ['PROPFIND', '<D:propfind xmlns:D="DAV:"><D:prop>', { depth: '0' }, 400],
      ['PROPFIND', '<D:propfind xmlns:D="DAV:"></D:prop>', { depth: '0' }, 400],
      ['PROPFIND', '<D:propfind xmlns:D="DAV:"><D:prop>&unknown;</D:prop></D:propfind>', { depth: '0' }, 400],
      ['PROPFIND', '<D:propfind xmlns:D="urn:not-dav"/>', { depth: '0' }, 400],
      ['REPORT', '<D:propfind xmlns:D="DAV:"/>', {}, 403],
      ['PROPPATCH', '<D:propfind xmlns:D="DAV:"/>', {}, 400],
      ['PROPFIND', '{"json": true}', { depth: '0', 'content-type': 'application/json' }, 415],
      ['PROPFIND', `<D:propfind xmlns:D="DAV:">${' '.repeat(1024 * 1024)}</D:propfind>`, { depth: '0' }, 413],
    ];
    for (const [method, body, headers, status] of cases) {
      const res = await call(method, book, body, headers);
      t.equal(res.statusCode, status, `${method} ${body.slice(0, 50)}`);
      t.equal(res.headers['content-type'], 'application/xml; charset=utf-8');
      t.match(res.body, /^<\?xml version="1.0" encoding="UTF-8"\?><D:error /);
    }
    const textXml = await call('PROPFIND', book, '<D:propfind xmlns:D="DAV:"><D:prop><D:displayname/></D:prop></D:propfind>', {
      depth: '0',
      'content-type': 'text/xml; charset=utf-8',
    });
    t.equal(textXml.statusCode, 207, 'text/xml is XML too');
  },
);
