/**
 * Cards (docs/carddav.md): GET serves a stored card octet for octet, PUT creates and replaces under
 * If-Match / If-None-Match, DELETE, the mapping to the REST fields, every refusal with its
 * precondition element in the documented order, one ETag for both faces, and read-your-writes
 * across faces through the cache.
 */
import t from 'tap';
import { as, buildContactsApp, contactBody } from '../contacts/fixtures.js';
import { card, davAs, davUser, xmlTag } from './dav-client.js';

const NOW = new Date('2026-06-10T12:00:00.000Z');
const app = await buildContactsApp(t, { now: () => NOW });
const user = await davUser(app);
const call = davAs(app, user);
const rest = as(app, user);
const book = `/dav/addressbooks/${user.id}/contacts/`;
const VCARD = { 'content-type': 'text/vcard; charset=utf-8' };

/** The contact a card became, through REST. */
async function contactOf(name: string): Promise<Record<string, any>> {
  const list = await rest('GET', `/api/contacts/?limit=1000`);
  const etag = (await call('GET', `${book}${name}`)).headers.etag;
  const found = list.json<Record<string, any>[]>().find((contact) => contactTag(contact) === etag);
  if (!found) throw new Error(`no contact for ${name}`);
  return found;
}

function contactTag(contact: Record<string, any>): string {
  return `"${Date.parse(contact.updated_at).toString(36)}-${contact.id.toString(36)}"`;
}

function conditionOf(body: string): string | undefined {
  return /<D:error [^>]*><(?!X:detail)([A-Z]+:[a-z-]+)(?:\/>|>)/.exec(body)?.[1];
}

const detailOf = (body: string) => /<X:detail>([^<]*)<\/X:detail>/.exec(body)?.[1];

t.test('a card PUT by a client comes back octet for octet: folding, order and version as sent', async (t) => {
  const text = [
    'BEGIN:VCARD',
    'VERSION:4.0',
    'PRODID:-//Example//Phone 1.0//EN',
    'UID:urn:uuid:4fbe8971-0bc3-424c-9c26-36c3e1eff6b1',
    'FN:Zoë Ünïcode',
    'N:Ünïcode;Zoë;;;',
    'item1.EMAIL;TYPE=work;PREF=1:zoe@example.com',
    'item1.X-ABLabel:_$!<Work>!$_',
    'ADR;TYPE=home:;;1 Main St;Springfield;;12345;USA',
    'PHOTO:data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJ',
    '  RU5ErkJggg==',
    'NOTE;LANGUAGE=en:Line one\\nline two\\, with a comma\\; and a semicolon',
    'X-CUSTOM;X-PARAM="quoted:value":custom',
    'END:VCARD',
    '',
  ].join('\r\n');
  const put = await call('PUT', `${book}zoe.vcf`, text, VCARD);
  t.equal(put.statusCode, 201);
  t.equal(put.body, '');
  t.match(put.headers.etag, /^"[0-9a-z]+-[0-9a-z]+"$/);
  const got = await call('GET', `${book}zoe.vcf`);
  t.equal(got.statusCode, 200);
  t.equal(got.headers['content-type'], 'text/vcard; charset=utf-8');
  t.equal(got.headers.etag, put.headers.etag);
  t.equal(got.rawPayload.toString('utf8'), text, 'the same octets');
  const head = await call('HEAD', `${book}zoe.vcf`);
  t.equal(head.statusCode, 200);
  t.equal(head.headers.etag, put.headers.etag);
  t.equal(head.body, '');
  const notModified = await call('GET', `${book}zoe.vcf`, undefined, { 'if-none-match': put.headers.etag as string });
  t.equal(notModified.statusCode, 304);
  t.equal(notModified.headers.etag, put.headers.etag);

  const contact = await contactOf('zoe.vcf');
  t.match(contact, {
    first_name: 'Zoë',
    last_name: 'Ünïcode',
    email: 'zoe@example.com',
    phone: null,
    birthday: null,
    additional_data: null,
  });
  const viaRest = await rest('GET', `/api/contacts/${contact.id}`);
  t.equal(viaRest.headers.etag, put.headers.etag, 'getetag equals the REST ETag');
});

t.test('the mapping: N else FN split at its last blank; the first usable EMAIL, TEL (tel: URI) and BDAY; X-ADDITIONAL-DATA', async (t) => {
  const cases: [string, string[], Record<string, unknown>][] = [
    ['fn-only', ['FN:Mary Ann  Smith-Jones'], { first_name: 'Mary Ann', last_name: 'Smith-Jones' }],
    ['one-word', ['FN:Cher'], { first_name: 'Cher', last_name: '' }],
    ['n-wins', ['FN:Display Name', 'N:Family;Given;Middle;;'], { first_name: 'Given', last_name: 'Family' }],
    ['escaped', ['FN:x', 'N:O\\;Brien;Sean\\, Jr.;;;'], { first_name: 'Sean, Jr.', last_name: 'O;Brien' }],
    [
      'fields',
      [
        'FN:Field Test',
        'EMAIL:not an address',
        'EMAIL;TYPE=home:field.test@example.com',
        'EMAIL:second@example.com',
        'TEL;TYPE=cell:555',
        'TEL;VALUE=uri:tel:+1-415-555-0199',
        'BDAY:--0415',
        'BDAY:19850704',
        'X-ADDITIONAL-DATA:{"company":"Acme"\\, "n":1}',
      ],
      { email: 'field.test@example.com', phone: '+14155550199', birthday: '1985-07-04', additional_data: { company: 'Acme', n: 1 } },
    ],
    [
      'future-bday',
      ['FN:Future', 'BDAY:2030-01-01', 'BDAY:1899-12-31', 'X-ADDITIONAL-DATA:[1]'],
      { birthday: null, additional_data: null, email: null, phone: null },
    ],
  ];
  for (const [name, lines, expected] of cases) {
    const put = await call('PUT', `${book}${name}.vcf`, card(`uid-${name}`, '', []).replace('FN:\r\n', `${lines.join('\r\n')}\r\n`), VCARD);
    t.equal(put.statusCode, 201, name);
    t.match(await contactOf(`${name}.vcf`), expected, name);
  }
});

t.test(
  'vCard 3.0 TEL: TEL;TYPE=CELL:+1 555 … maps to the E.164 phone, a REST write replaces it in place, and a new TEL in a 3.0 card is 3.0',
  async (t) => {
    const put = await call(
      'PUT',
      `${book}v3-tel.vcf`,
      card('v3-tel', 'Three Tel', ['TEL;TYPE=CELL:+1 555 010 0199', 'TEL;TYPE=HOME:+1 555 010 0100']),
      VCARD,
    );
    t.equal(put.statusCode, 201);
    const contact = await contactOf('v3-tel.vcf');
    t.equal(contact.phone, '+15550100199', 'the first usable TEL, separators dropped');
    const patched = await rest('PATCH', `/api/contacts/${contact.id}`, { phone: '+15550100222' });
    t.equal(patched.statusCode, 200);
    const after = (await call('GET', `${book}v3-tel.vcf`)).body;
    t.match(after, 'VERSION:3.0\r\n');
    t.match(after, 'TEL;TYPE=CELL:+15550100222\r\nTEL;TYPE=HOME:+1 555 010 0100\r\n', 'replaced in place, its TYPE kept, no tel: URI');
    t.equal((await contactOf('v3-tel.vcf')).phone, '+15550100222', 'and read back the same');

    await call('PUT', `${book}v3-none.vcf`, card('v3-none', 'Three None'), VCARD);
    const bare = await contactOf('v3-none.vcf');
    t.equal(bare.phone, null);
    await rest('PATCH', `/api/contacts/${bare.id}`, { phone: '+15550100333' });
    const added = (await call('GET', `${book}v3-none.vcf`)).body;
    t.match(added, 'TEL:+15550100333\r\nEND:VCARD', 'a 3.0 phone-number value');
    t.notMatch(added, 'VALUE=uri', 'no 4.0 URI value in a 3.0 card');
    t.equal((await contactOf('v3-none.vcf')).phone, '+15550100333');
  },
);

t.test('a duplicate e-mail is no refusal: the card is stored whole, its contact gets the first free address or null', async (t) => {
  await rest('POST', '/api/contacts/', contactBody({ email: 'taken@example.com' }));
  const put = await call('PUT', `${book}dup.vcf`, card('dup', 'Dup Licate', ['EMAIL:TAKEN@example.com', 'EMAIL:free@example.com']), VCARD);
  t.equal(put.statusCode, 201);
  t.match(await contactOf('dup.vcf'), { email: 'free@example.com' });
  const put2 = await call('PUT', `${book}dup2.vcf`, card('dup2', 'Dup Again', ['EMAIL:taken@example.com']), VCARD);
  t.equal(put2.statusCode, 201);
  const contact = await contactOf('dup2.vcf');
  t.equal(contact.email, null);
  t.match((await call('GET', `${book}dup2.vcf`)).body, 'EMAIL:taken@example.com', 'the card keeps it');
  const restWrite = await rest('PATCH', `/api/contacts/${contact.id}`, { email: 'Free@Example.com' });
  t.equal(restWrite.statusCode, 409, 'the REST rule stays exact, whichever face stored the other');
  t.strictSame(restWrite.json(), { detail: 'Contact with this email already exists' });
});

t.test(
  'PUT preconditions: If-None-Match * only creates, If-Match only replaces a current tag; 201, 204, a new ETag every time',
  async (t) => {
    const url = `${book}cond.vcf`;
    const first = await call('PUT', url, card('cond', 'Cond One'), { ...VCARD, 'if-none-match': '*' });
    t.equal(first.statusCode, 201);
    const again = await call('PUT', url, card('cond', 'Cond Two'), { ...VCARD, 'if-none-match': '*' });
    t.equal(again.statusCode, 412);
    t.equal(detailOf(again.body), 'Precondition Failed: the contact has changed');
    const missing = await call('PUT', `${book}nothing-here.vcf`, card('nothing', 'No One'), {
      ...VCARD,
      'if-match': first.headers.etag as string,
    });
    t.equal(missing.statusCode, 412, 'If-Match on a missing card');
    t.equal((await call('GET', `${book}nothing-here.vcf`)).statusCode, 404, 'nothing created');
    const replaced = await call('PUT', url, card('cond', 'Cond Two'), { ...VCARD, 'if-match': first.headers.etag as string });
    t.equal(replaced.statusCode, 204);
    t.equal(replaced.body, '');
    t.not(replaced.headers.etag, first.headers.etag);
    const stale = await call('PUT', url, card('cond', 'Cond Three'), { ...VCARD, 'if-match': first.headers.etag as string });
    t.equal(stale.statusCode, 412);
    const unchanged = await call('PUT', url, card('cond', 'Cond Two'), VCARD);
    t.equal(unchanged.statusCode, 204, 'without conditions it replaces');
    t.not(unchanged.headers.etag, replaced.headers.etag, 'a PUT that changes nothing is still a write');
    t.equal((await call('GET', url)).body, card('cond', 'Cond Two'));
    const star = await call('PUT', url, card('cond', 'Cond Four'), { ...VCARD, 'if-match': '*' });
    t.equal(star.statusCode, 204);
    const staleInvalid = await call('PUT', url, 'not a card', { ...VCARD, 'if-match': first.headers.etag as string });
    t.equal(staleInvalid.statusCode, 412, 'preconditions come before the content (412 before 403)');
  },
);

/** A JSON object nesting `depth` levels: `{"a":{"a":…{}}}`. */
const nested = (depth: number) => `${'{"a":'.repeat(depth - 1)}{}${'}'.repeat(depth - 1)}`;

t.test(
  'X-ADDITIONAL-DATA 31 levels deep (in a REST body of 32, the bound) is stored, and a REST client can send the contact back',
  async (t) => {
    t.equal(
      (await call('PUT', `${book}deep31.vcf`, card('deep31', 'Deep Enough', [`X-ADDITIONAL-DATA:${nested(31)}`]), VCARD)).statusCode,
      201,
    );
    const contact = await contactOf('deep31.vcf');
    t.same(contact.additional_data, JSON.parse(nested(31)));
    const { id, created_at: _created, updated_at: _updated, ...fields } = contact;
    const back = await rest('PUT', `/api/contacts/${id}`, {
      ...fields,
      email: 'deep@example.com',
      phone: '+14155550100',
      birthday: '1990-01-01',
    });
    t.equal(back.statusCode, 200, back.body);
  },
);

t.test('refusals of PUT, each with its precondition element and an X:detail', async (t) => {
  await call('PUT', `${book}holder.vcf`, card('held-uid', 'Holder'), VCARD);
  const big = card('big', 'Big', [`NOTE:${'x'.repeat(262_144)}`]);
  const cases: [string, string, Record<string, string>, number, string | undefined, string | RegExp][] = [
    ['empty', '', VCARD, 403, 'C:valid-address-data', /^Not one well-formed vCard/],
    ['garbage', 'hello world', VCARD, 403, 'C:valid-address-data', /^Not one well-formed vCard/],
    [
      'two cards',
      card('a', 'A') + card('b', 'B'),
      VCARD,
      403,
      'C:valid-address-data',
      'Not one well-formed vCard: the body holds more than one vCard',
    ],
    [
      'truncated',
      'BEGIN:VCARD\r\nVERSION:3.0\r\nUID:t\r\nFN:T\r\n',
      VCARD,
      403,
      'C:valid-address-data',
      'Not one well-formed vCard: the card has no END:VCARD at its end',
    ],
    ['no uid', 'BEGIN:VCARD\r\nVERSION:3.0\r\nFN:No Uid\r\nEND:VCARD\r\n', VCARD, 403, 'C:valid-address-data', 'The vCard has no UID'],
    [
      'no name',
      'BEGIN:VCARD\r\nVERSION:3.0\r\nUID:noname\r\nFN:\r\nN:;;;;\r\nEND:VCARD\r\n',
      VCARD,
      403,
      'C:valid-address-data',
      'The vCard has no name (FN or N)',
    ],
    [
      'version',
      'BEGIN:VCARD\r\nVERSION:2.1\r\nUID:v21\r\nFN:Old\r\nEND:VCARD\r\n',
      VCARD,
      403,
      'C:supported-address-data',
      'vCard version 2.1 is not supported (3.0 or 4.0)',
    ],
    [
      'long name',
      card('long', 'x', [`N:Short;${'G'.repeat(51)};;;`]),
      VCARD,
      403,
      'C:valid-address-data',
      'first_name must NOT have more than 50 characters',
    ],
    [
      'additional data 32 levels deep',
      card('deep32', 'Deep', [`X-ADDITIONAL-DATA:${nested(32)}`]),
      VCARD,
      403,
      'C:valid-address-data',
      'X-ADDITIONAL-DATA must not nest more than 32 levels deep',
    ],
    [
      'additional data 8,000 levels deep',
      card('deep8000', 'Deep', [`X-ADDITIONAL-DATA:${nested(8_000)}`]),
      VCARD,
      403,
      'C:valid-address-data',
      'X-ADDITIONAL-DATA must not nest more than 32 levels deep',
    ],
    [
      'additional data 40,000 levels deep',
      card('deep40k', 'Deep', [`X-ADDITIONAL-DATA:${nested(40_000)}`]),
      VCARD,
      403,
      'C:valid-address-data',
      /^X-ADDITIONAL-DATA /,
    ],
    [
      'additional data with an unpaired surrogate',
      card('surrogate', 'Surrogate', ['X-ADDITIONAL-DATA:{"a b":"\\ud800"}']),
      VCARD,
      403,
      'C:valid-address-data',
      'X-ADDITIONAL-DATA must not contain unpaired UTF-16 surrogates',
    ],
    ['big', big, VCARD, 403, 'C:max-resource-size', 'The card is larger than 262144 octets'],
    ['not utf-8', '', VCARD, 403, 'C:valid-address-data', 'Not one well-formed vCard: the body is not UTF-8'],
    [
      'json',
      card('json', 'Json'),
      { 'content-type': 'application/json' },
      415,
      'C:supported-address-data',
      'Unsupported Media Type: application/json',
    ],
    ['no type', card('none', 'None'), {}, 415, 'C:supported-address-data', 'Unsupported Media Type: none'],
    ['x-vcard', card('xv', 'X Vcard'), { 'content-type': 'text/x-vcard' }, 201, undefined, ''],
    ['uid taken', card('held-uid', 'Second Holder'), VCARD, 409, 'C:no-uid-conflict', 'A card of this address book already has this UID'],
  ];
  for (const [label, body, headers, status, condition, detail] of cases) {
    const payload = label === 'not utf-8' ? Buffer.from([0x42, 0xff, 0xfe]) : body;
    const res = await app.inject({
      method: 'PUT',
      url: `${book}refused-${label.replace(/ /g, '-')}.vcf`,
      headers: { authorization: user.basic, ...headers },
      payload,
    });
    t.equal(res.statusCode, status, label);
    if (status === 201) continue;
    t.equal(res.headers['content-type'], 'application/xml; charset=utf-8');
    t.equal(conditionOf(res.body), condition, `${label}: ${condition}`);
    t.match(detailOf(res.body), detail);
    t.equal((await call('GET', `${book}refused-${label.replace(/ /g, '-')}.vcf`)).statusCode, 404, `${label}: nothing stored`);
  }
  const taken = await call('PUT', `${book}second-holder.vcf`, card('held-uid', 'Second'), VCARD);
  t.match(
    taken.body,
    `<C:no-uid-conflict><D:href>${book}holder.vcf</D:href></C:no-uid-conflict>`,
    'the conflict names the card holding the UID',
  );
  const changed = await call('PUT', `${book}holder.vcf`, card('another-uid', 'Holder'), VCARD);
  t.equal(changed.statusCode, 409, 'a PUT may not change the UID of a card');
  t.match(changed.body, `<C:no-uid-conflict><D:href>${book}holder.vcf</D:href></C:no-uid-conflict>`);
  const huge = await call('PUT', `${book}huge.vcf`, 'x'.repeat(1024 * 1024 + 1), VCARD);
  t.equal(huge.statusCode, 413, 'a body over 1 MiB is 413 before it is read');
  t.match(huge.body, '<X:detail>Request body is too large</X:detail>');
});

t.test('a contact created over REST is the card {uuid}.vcf with UID urn:uuid:{uuid}, in the export form', async (t) => {
  const created = await rest(
    'POST',
    '/api/contacts/',
    contactBody({ first_name: 'Rest', last_name: 'Made', email: 'rest.made@example.com', additional_data: { a: 'b' } }),
  );
  const contact = created.json();
  const listing = await call('PROPFIND', book, '<d:propfind xmlns:d="DAV:"><d:prop><d:getetag/></d:prop></d:propfind>', { depth: '1' });
  const href = new RegExp(
    `<D:href>(${book}([0-9a-f-]{36})\\.vcf)</D:href><D:propstat><D:prop><D:getetag>${xmlTag(created.headers.etag)}</D:getetag>`,
  ).exec(listing.body);
  t.ok(href, 'listed with the REST ETag');
  const [, url, uuid] = href!;
  const got = await call('GET', url!);
  t.equal(got.headers.etag, created.headers.etag);
  t.equal(
    got.body,
    [
      'BEGIN:VCARD',
      'VERSION:4.0',
      `UID:urn:uuid:${uuid}`,
      'FN:Rest Made',
      'N:Made;Rest;;;',
      'EMAIL:rest.made@example.com',
      'TEL;VALUE=uri:tel:+14155550123',
      'BDAY:19900517',
      `REV:${NOW.toISOString().slice(0, 19).replace(/[-:]/g, '')}Z`,
      'X-ADDITIONAL-DATA:{"a":"b"}',
      'END:VCARD',
      '',
    ].join('\r\n'),
  );
  // A client puts it back edited: the same card, now stored as sent; the UID may not change.
  const edited = got.body.replace('END:VCARD', 'NOTE:edited on a phone\r\nEND:VCARD');
  const put = await call('PUT', url!, edited, { ...VCARD, 'if-match': got.headers.etag as string });
  t.equal(put.statusCode, 204);
  t.equal((await call('GET', url!)).body, edited);
  const viaRest = await rest('GET', `/api/contacts/${contact.id}`);
  t.equal(viaRest.headers.etag, put.headers.etag, 'both faces see the one write');
  const patched = await rest('PATCH', `/api/contacts/${contact.id}`, { first_name: 'Restful' });
  const after = await call('GET', url!);
  t.equal(after.headers.etag, patched.headers.etag);
  t.match(after.body, 'FN:Restful Made\r\nN:Made;Restful;;;\r\n');
  t.match(after.body, 'NOTE:edited on a phone', "the client's property stays");
});

t.test('DELETE: 204, then 404 on both faces; a stale If-Match is 412 and deletes nothing', async (t) => {
  const put = await call('PUT', `${book}gone.vcf`, card('gone', 'Soon Gone'), VCARD);
  const contact = await contactOf('gone.vcf');
  await rest('PATCH', `/api/contacts/${contact.id}`, { last_name: 'Changed' });
  const stale = await call('DELETE', `${book}gone.vcf`, undefined, { 'if-match': put.headers.etag as string });
  t.equal(stale.statusCode, 412);
  t.equal((await call('GET', `${book}gone.vcf`)).statusCode, 200);
  const deleted = await call('DELETE', `${book}gone.vcf`);
  t.equal(deleted.statusCode, 204);
  t.equal(deleted.body, '');
  t.equal((await call('GET', `${book}gone.vcf`)).statusCode, 404);
  t.equal((await rest('GET', `/api/contacts/${contact.id}`)).statusCode, 404, 'a DAV delete is a REST delete');
  t.equal((await call('DELETE', `${book}gone.vcf`)).statusCode, 404);
  const viaRest = await rest('POST', '/api/contacts/', contactBody());
  const name = (await call('PROPFIND', book, undefined, { depth: '1' })).body.match(
    new RegExp(`${book}([^<]+)</D:href><D:propstat><D:prop><D:getetag>${xmlTag(viaRest.headers.etag)}`),
  );
  t.ok(name);
  t.equal((await rest('DELETE', `/api/contacts/${viaRest.json().id}`)).statusCode, 200);
  t.equal((await call('GET', `${book}${name![1]}`)).statusCode, 404, 'a REST delete is a DAV delete');
});

t.test("a DAV write makes the user's cached REST reads miss at once", async (t) => {
  const put = await call('PUT', `${book}cached.vcf`, card('cached', 'Cached One'), VCARD);
  const contact = await contactOf('cached.vcf');
  const url = `/api/contacts/${contact.id}`;
  await rest('GET', url);
  t.equal((await rest('GET', url)).headers['x-cache'], 'HIT');
  await rest('GET', '/api/contacts/?limit=1000');
  const replaced = await call('PUT', `${book}cached.vcf`, card('cached', 'Cached Two'), {
    ...VCARD,
    'if-match': put.headers.etag as string,
  });
  t.equal(replaced.statusCode, 204);
  const read = await rest('GET', url);
  t.equal(read.headers['x-cache'], 'MISS');
  t.equal(read.json().last_name, 'Two');
  t.equal(read.headers.etag, replaced.headers.etag);
  const list = await rest('GET', '/api/contacts/?limit=1000');
  t.equal(list.headers['x-cache'], 'MISS');
  await call('DELETE', `${book}cached.vcf`);
  t.equal((await rest('GET', url)).statusCode, 404);
});
