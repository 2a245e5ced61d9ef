/** Unit tests of the vCard codec (src/contacts/formats/vcard.ts) against RFC 6350 / RFC 2426 examples and hostile input. */
import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import t from 'tap';
import type { Contact, ImportEntry, ImportFields, ImportResult } from '../../../src/contacts/formats/entries.js';
import { escapeText, foldLine, parseVcards, vcardOf } from '../../../src/contacts/formats/vcard.js';
import { jane, randomText } from './samples.js';

const SEED = 20261122;

/** The entries of a body that must hold cards. */
const entriesOf = (body: string): ImportEntry[] => {
  const result = parseVcards(body);
  if (!result.ok) throw new Error(`expected cards, got: ${result.detail}`);
  return result.entries;
};
/** The fields of the only card of `body`. */
const fieldsOf = (body: string): ImportFields => {
  const entries = entriesOf(body);
  if (entries.length !== 1 || !('fields' in entries[0]!)) throw new Error(`expected one readable card, got ${JSON.stringify(entries)}`);
  return entries[0].fields;
};
const crlf = (...lines: string[]) => lines.map((line) => `${line}\r\n`).join('');
const octets = (text: string) => Buffer.byteLength(text);
/** RFC 6350 §3.2 unfolding, written independently of the codec: CRLF + one space or tab is removed. */
const unfold = (text: string) => text.replace(/\r\n[ \t]/g, '');

t.test('export: one card with the properties openapi.yaml lists, CRLF line ends', async (t) => {
  t.equal(
    vcardOf(jane),
    crlf(
      'BEGIN:VCARD',
      'VERSION:4.0',
      'FN:Jane Doe',
      'N:Doe;Jane;;;',
      'EMAIL:jane@example.com',
      'TEL;VALUE=uri:tel:+14155550123',
      'BDAY:19900517',
      'REV:20250131T093000Z',
      'END:VCARD',
    ),
  );
  t.equal(
    vcardOf({ ...jane, additional_data: { tags: ['a', 'b'], vip: true } }),
    crlf(
      'BEGIN:VCARD',
      'VERSION:4.0',
      'FN:Jane Doe',
      'N:Doe;Jane;;;',
      'EMAIL:jane@example.com',
      'TEL;VALUE=uri:tel:+14155550123',
      'BDAY:19900517',
      'REV:20250131T093000Z',
      'X-ADDITIONAL-DATA:{"tags":["a"\\,"b"]\\,"vip":true}',
      'END:VCARD',
    ),
  );
});

t.test('export: TEXT values escaped as RFC 6350 §3.4 says, inside N components too', async (t) => {
  // §6.2.1 and §6.7.2 examples.
  t.equal(escapeText('Mr. John Q. Public, Esq.'), 'Mr. John Q. Public\\, Esq.');
  t.equal(
    escapeText('This fax number is operational 0800 to 1715 EST, Mon-Fri.'),
    'This fax number is operational 0800 to 1715 EST\\, Mon-Fri.',
  );
  t.equal(escapeText('back\\slash;semi,comma\nnewline'), 'back\\\\slash\\;semi\\,comma\\nnewline');
  t.equal(escapeText('crlf\r\nand lone\rcr'), 'crlf\\nand lone\\ncr');
  t.equal(escapeText('colon: "quotes" stay'), 'colon: "quotes" stay');
  const card = vcardOf({ ...jane, first_name: 'Ann;Marie', last_name: 'Smith, Jr.\\' });
  t.match(card, '\r\nFN:Ann\\;Marie Smith\\, Jr.\\\\\r\n');
  t.match(card, '\r\nN:Smith\\, Jr.\\\\;Ann\\;Marie;;;\r\n');
});

t.test('export: folding at exactly 75 octets, never inside a UTF-8 character', async (t) => {
  t.equal(foldLine(`X:${'a'.repeat(73)}`), `X:${'a'.repeat(73)}`, '75 octets stay on one line');
  t.equal(foldLine(`X:${'a'.repeat(74)}`), `X:${'a'.repeat(73)}\r\n a`, '76 octets fold after the 75th');
  t.equal(foldLine(`FN:${'a'.repeat(70)}éb`), `FN:${'a'.repeat(70)}é\r\n b`, 'a 2-octet character ending at octet 75 stays');
  t.equal(foldLine(`FN:${'a'.repeat(71)}éb`), `FN:${'a'.repeat(71)}\r\n éb`, 'a 2-octet character across octet 75 moves down whole');
  t.equal(foldLine(`FN:${'a'.repeat(68)}😀`), `FN:${'a'.repeat(68)}😀`, 'a 4-octet character ending at octet 75 stays');
  t.equal(foldLine(`FN:${'a'.repeat(69)}😀b`), `FN:${'a'.repeat(69)}\r\n 😀b`, 'a 4-octet character across octet 75 moves down whole');
  // Continuation lines hold 74 octets after their leading space.
  t.equal(foldLine(`X:${'b'.repeat(200)}`), `X:${'b'.repeat(73)}\r\n ${'b'.repeat(74)}\r\n ${'b'.repeat(53)}`);
  t.equal(foldLine(`X:${'€'.repeat(60)}`), `X:${'€'.repeat(24)}\r\n ${'€'.repeat(24)}\r\n ${'€'.repeat(12)}`);

  const card = vcardOf({
    ...jane,
    first_name: '😀'.repeat(30),
    last_name: 'é'.repeat(50),
    additional_data: { long: 'x'.repeat(500), mixed: 'ü€😀'.repeat(40) },
  });
  t.ok(card.endsWith('\r\n'));
  t.notOk(/\r(?!\n)|(?<!\r)\n/.test(card), 'every line break is CRLF');
  const lines = card.split('\r\n').slice(0, -1);
  t.ok(lines.length > 12, 'long values were folded');
  for (const line of lines) {
    t.ok(octets(line) <= 75, `at most 75 octets: ${line.slice(0, 20)}…`);
    t.equal(Buffer.from(line).toString(), line, 'no character split across lines');
  }
});

t.test('export: any value folds into lines of at most 75 octets that unfold back to it', async (t) => {
  fc.assert(
    fc.property(fc.string({ unit: 'binary', maxLength: 400 }), (value) => {
      const line = `X-ADDITIONAL-DATA:${escapeText(value)}`;
      const folded = foldLine(line);
      return unfold(folded) === line && folded.split('\r\n').every((physical) => octets(physical) <= 75 && physical.length > 0);
    }),
    { seed: SEED, numRuns: 500 },
  );
  t.pass('500 random values');
});

t.test('import: RFC 6350 §3.2 folded forms unfold to the same line (CRLF, LF, tab)', async (t) => {
  const forms = [
    'FN:This is a long description that exists on a long line.',
    'FN:This is a long description\r\n  that exists on a long line.',
    'FN:This is a long descrip\r\n tion that exists o\r\n n a long line.',
    'FN:This is a long descrip\n\ttion that exists o\n\tn a long line.',
  ];
  for (const form of forms) {
    t.strictSame(fieldsOf(`BEGIN:VCARD\r\nVERSION:4.0\r\n${form}\r\nEND:VCARD\r\n`), {
      first_name: 'This is a long description that exists on a long',
      last_name: 'line.',
    });
  }
});

t.test('import: RFC 6350 escaped TEXT values and N components', async (t) => {
  // §6.2.2: N components; unescaped commas inside one are list separators and stay as text.
  t.strictSame(
    fieldsOf(crlf('BEGIN:VCARD', 'VERSION:4.0', 'FN:Mr. John Q. Public\\, Esq.', 'N:Public;John;Quinlan;Mr.;Esq.', 'END:VCARD')),
    {
      first_name: 'John',
      last_name: 'Public',
    },
  );
  t.strictSame(fieldsOf(crlf('BEGIN:VCARD', 'VERSION:4.0', 'N:Stevenson;John;Philip,Paul;Dr.;Jr.,M.D.,A.C.P.', 'END:VCARD')), {
    first_name: 'John',
    last_name: 'Stevenson',
  });
  t.strictSame(fieldsOf(crlf('BEGIN:VCARD', 'N:Smith\\; Jones\\, Esq.\\\\;Ann\\nMarie;;;', 'END:VCARD')), {
    first_name: 'Ann\nMarie',
    last_name: 'Smith; Jones, Esq.\\',
  });
  // §3.4 allows only \\ \, \; \n \N; anything else is kept as written.
  t.strictSame(fieldsOf(crlf('BEGIN:VCARD', 'N:A\\Nb\\:c;\\x;;;', 'END:VCARD')), { first_name: '\\x', last_name: 'A\nb\\:c' });
});

t.test('import: the RFC 6350 §8 author card', async (t) => {
  const card = crlf(
    'BEGIN:VCARD',
    'VERSION:4.0',
    'FN:Simon Perreault',
    'N:Perreault;Simon;;;ing. jr,M.Sc.',
    'BDAY:--0203',
    'ANNIVERSARY:20090808T1430-0500',
    'GENDER:M',
    'LANG;PREF=1:fr',
    'LANG;PREF=2:en',
    'ORG;TYPE=work:Viagenie',
    'ADR;TYPE=work:;Suite D2-630;2875 Laurier;',
    ' Quebec;QC;G1V 2M2;Canada',
    'TEL;VALUE=uri;TYPE="work,voice";PREF=1:tel:+1-418-656-9254;ext=102',
    'TEL;VALUE=uri;TYPE="work,cell,voice,video,text":tel:+1-418-262-6501',
    'EMAIL;TYPE=work:simon.perreault@viagenie.ca',
    'GEO;TYPE=work:geo:46.772673,-71.282945',
    'KEY;TYPE=work;VALUE=uri:',
    ' http://www.viagenie.ca/simon.perreault/simon.asc',
    'TZ:-0500',
    'URL;TYPE=home:http://nomis80.org',
    'END:VCARD',
  );
  // The first TEL as written (its extension included) and the year-less BDAY are left for the caller's rules to refuse.
  t.strictSame(fieldsOf(card), {
    first_name: 'Simon',
    last_name: 'Perreault',
    email: 'simon.perreault@viagenie.ca',
    phone: '+1-418-656-9254;ext=102',
    birthday: '--0203',
  });
});

t.test('import: the RFC 2426 §7 cards (3.0, no N, mixed-case BEGIN, TYPE lists)', async (t) => {
  const body = crlf(
    'BEGIN:vCard',
    'VERSION:3.0',
    'FN:Frank Dawson',
    'ORG:Lotus Development Corporation',
    'ADR;TYPE=WORK,POSTAL,PARCEL:;;6544 Battleford Drive',
    ' ;Raleigh;NC;27613-3502;U.S.A.',
    'TEL;TYPE=VOICE,MSG,WORK:+1-919-676-9515',
    'TEL;TYPE=FAX,WORK:+1-919-676-9564',
    'EMAIL;TYPE=INTERNET,PREF:Frank_Dawson@Lotus.com',
    'EMAIL;TYPE=INTERNET:fdawson@earthlink.net',
    'URL:http://home.earthlink.net/~fdawson',
    'END:vCard',
    '',
    '',
    'BEGIN:vCard',
    'VERSION:3.0',
    'FN:Tim Howes',
    'ORG:Netscape Communications Corp.',
    'ADR;TYPE=WORK:;;501 E. Middlefield Rd.;Mountain View;',
    ' CA; 94043;U.S.A.',
    'TEL;TYPE=VOICE,MSG,WORK:+1-415-937-3419',
    'TEL;TYPE=FAX,WORK:+1-415-528-4164',
    'EMAIL;TYPE=INTERNET:howes@netscape.com',
    'END:vCard',
  );
  t.strictSame(parseVcards(body), {
    ok: true,
    entries: [
      { entry: 1, fields: { first_name: 'Frank', last_name: 'Dawson', email: 'Frank_Dawson@Lotus.com', phone: '+1-919-676-9515' } },
      { entry: 2, fields: { first_name: 'Tim', last_name: 'Howes', email: 'howes@netscape.com', phone: '+1-415-937-3419' } },
    ],
  });
});

t.test('import: 3.0 cards as phones and Outlook export them', async (t) => {
  const outlook = crlf(
    'BEGIN:VCARD',
    'VERSION:3.0',
    'N;LANGUAGE=en-us:Müller-Lüdenscheidt;Jürgen;Karl;Dr.;',
    'FN:Dr. Jürgen Karl Müller-Lüdenscheidt',
    'ORG:Contoso',
    'TEL;TYPE=WORK,VOICE:+49 (30) 901820',
    'TEL;TYPE=CELL:+49 170 1234567',
    'EMAIL;TYPE=INTERNET,PREF:juergen@contoso.example',
    'BDAY:1985-04-15',
    'PHOTO;TYPE=JPEG;ENCODING=b:/9j/4AAQSkZJRgABAQEAYABgAAD/2wBDAAgGBgcGBQgHBwcJCQgKDBQNDAsLDBkSEw8UHRofHh0a',
    ' HBwgJC4nICIsIxwcKDcpLDAxNDQ0Hyc5PTgyPC4zNDL/2wBDAQkJCQwLDBgNDRgyIRwhMjIyMjIy',
    'X-MS-OL-DEFAULT-POSTAL-ADDRESS:0',
    'REV:20250101T120000Z',
    'END:VCARD',
  );
  t.strictSame(fieldsOf(outlook), {
    first_name: 'Jürgen',
    last_name: 'Müller-Lüdenscheidt',
    email: 'juergen@contoso.example',
    phone: '+49 (30) 901820',
    birthday: '1985-04-15',
  });

  const iphone = crlf(
    'BEGIN:VCARD',
    'VERSION:3.0',
    'PRODID:-//Apple Inc.//iPhone OS 17.5//EN',
    'N:Appleseed;Johnny;;;',
    'FN:Johnny Appleseed',
    'item1.EMAIL;type=INTERNET;type=pref:johnny@example.com',
    'item1.X-ABLabel:_$!<Other>!$_',
    'EMAIL;type=INTERNET;type=HOME:home@example.com',
    'item2.TEL;type=CELL;type=VOICE;type=pref:+1 (408) 555-0100',
    'item2.X-ABLabel:_$!<Mobile>!$_',
    'item3.ADR;type=HOME;type=pref:;;1 Infinite Loop;Cupertino;CA;95014;United States',
    'item3.X-ABADR:us',
    'BDAY;value=date:1985-04-15',
    'END:VCARD',
  );
  t.strictSame(fieldsOf(iphone), {
    first_name: 'Johnny',
    last_name: 'Appleseed',
    email: 'johnny@example.com',
    phone: '+1 (408) 555-0100',
    birthday: '1985-04-15',
  });
  // iOS writes a birthday without a year as 1604; left as written for the caller's rules.
  t.equal(fieldsOf(crlf('BEGIN:VCARD', 'VERSION:3.0', 'FN:A B', 'BDAY;VALUE=date:1604-04-15', 'END:VCARD')).birthday, '1604-04-15');
});

t.test('import: 2.1 quoted-printable values in their CHARSET, bare parameters', async (t) => {
  const card = crlf(
    'BEGIN:VCARD',
    'VERSION:2.1',
    'N;CHARSET=UTF-8;ENCODING=QUOTED-PRINTABLE:M=C3=BCller;J=C3=BCr=',
    'gen;;;',
    'FN;CHARSET=UTF-8;ENCODING=QUOTED-PRINTABLE:J=C3=BCrgen M=C3=BCller',
    'NOTE;ENCODING=QUOTED-PRINTABLE:first line=0D=0A=',
    'second line',
    'TEL;CELL;PREF:+49 170 1234567',
    'EMAIL;INTERNET:juergen@example.de',
    'END:VCARD',
  );
  t.strictSame(fieldsOf(card), { first_name: 'Jürgen', last_name: 'Müller', email: 'juergen@example.de', phone: '+49 170 1234567' });
  t.strictSame(fieldsOf(crlf('BEGIN:VCARD', 'VERSION:2.1', 'N;CHARSET=ISO-8859-1;QUOTED-PRINTABLE:M=FCller;Ren=E9;;;', 'END:VCARD')), {
    first_name: 'René',
    last_name: 'Müller',
  });
  t.strictSame(fieldsOf(crlf('BEGIN:VCARD', 'N;CHARSET=NO-SUCH-CHARSET;ENCODING=QUOTED-PRINTABLE:M=C3=BCller;A=3DB;;;', 'END:VCARD')), {
    first_name: 'A=B',
    last_name: 'Müller',
  });
});

t.test('import: what each property becomes', async (t) => {
  const card = (...lines: string[]) => fieldsOf(crlf('BEGIN:VCARD', 'VERSION:4.0', ...lines, 'END:VCARD'));
  t.strictSame(card('N:Doe;Jane;;;', 'FN:Something Else'), { first_name: 'Jane', last_name: 'Doe' }, 'N wins over FN');
  t.strictSame(
    card('N:;;;;', 'FN:Mary Ann  Smith'),
    { first_name: 'Mary Ann', last_name: 'Smith' },
    'an empty N falls back to FN, split at its last blank',
  );
  t.strictSame(card('FN:Jean-Luc\tPicard'), { first_name: 'Jean-Luc', last_name: 'Picard' }, 'any blank splits FN');
  t.strictSame(card('FN:Cher'), { first_name: 'Cher' }, 'one word is a first name');
  t.strictSame(card('N:Acme;;;;'), { first_name: '', last_name: 'Acme' }, 'an N with only a family name');
  t.strictSame(card('FN:   '), {}, 'a blank FN gives no names');
  t.strictSame(card(), {}, 'a card with nothing this import reads');
  t.strictSame(card('fn:jane doe', 'Email;Type=home:first@example.com', 'EMAIL:second@example.com'), {
    first_name: 'jane',
    last_name: 'doe',
    email: 'first@example.com',
  });
  t.equal(card('TEL:+1 415 555 0123', 'TEL:+2').phone, '+1 415 555 0123', 'the first TEL, text form');
  t.equal(card('TEL;VALUE=uri:TEL:+14155550123').phone, '+14155550123', 'uri form, scheme in any case');
  t.equal(card('BDAY:19900517').birthday, '1990-05-17');
  t.equal(card('BDAY;VALUE=date:1990-05-17').birthday, '1990-05-17');
  t.equal(card('BDAY:--0415').birthday, '--0415', 'no year: left as given');
  t.equal(card('BDAY:19900517T000000Z').birthday, '19900517T000000Z', 'a date-time: left as given');
  // vCard's `\\` is JSON's `\`, so JSON's own `\n` escape (a newline) and `\\` (a backslash) come through.
  t.strictSame(card('X-ADDITIONAL-DATA:{"a":"b\\,c\\;d"\\,"n":"x\\\\ny"\\,"b":"\\\\\\\\"}'), {
    additional_data: { a: 'b,c;d', n: 'x\ny', b: '\\' },
  });
  t.strictSame(card('X-ADDITIONAL-DATA:null'), { additional_data: null });
  t.strictSame(card('x-additional-data;VALUE=text:{}'), { additional_data: {} });
});

t.test('import: an X-ADDITIONAL-DATA that is no JSON object is the entry error', async (t) => {
  const detailOf = (value: string) => entriesOf(crlf('BEGIN:VCARD', 'FN:A B', `X-ADDITIONAL-DATA:${value}`, 'END:VCARD'));
  t.strictSame(detailOf('{"a":1'), [{ entry: 1, detail: 'body/additional_data must be a JSON object' }]);
  t.strictSame(detailOf('[1\\,2]'), [{ entry: 1, detail: 'body/additional_data must be a JSON object' }]);
  t.strictSame(detailOf('"text"'), [{ entry: 1, detail: 'body/additional_data must be a JSON object' }]);
  t.strictSame(detailOf(''), [{ entry: 1, detail: 'body/additional_data must be a JSON object' }]);
  t.strictSame(detailOf('{"__proto__":{"x":1}}'), [
    { entry: 1, detail: 'body/additional_data must not contain "__proto__" or "constructor.prototype" keys' },
  ]);
  t.strictSame(detailOf('{"constructor":{"prototype":{}}}'), [
    { entry: 1, detail: 'body/additional_data must not contain "__proto__" or "constructor.prototype" keys' },
  ]);
  // Deep but valid JSON is read; how deep is allowed is the caller's rule.
  const deep = `${'{"a":'.repeat(40_000)}1${'}'.repeat(40_000)}`;
  const [entry] = detailOf(deep);
  t.ok(entry && 'fields' in entry && typeof entry.fields.additional_data === 'object');
});

t.test('import: structure, numbering, and text outside cards', async (t) => {
  t.strictSame(parseVcards(''), { ok: false, detail: 'No vCard in the body: it has no BEGIN:VCARD line' });
  t.strictSame(parseVcards('first_name,last_name\r\nJane,Doe\r\n'), {
    ok: false,
    detail: 'No vCard in the body: it has no BEGIN:VCARD line',
  });
  t.strictSame(parseVcards('BEGIN:VCALENDAR\r\nEND:VCALENDAR\r\n'), {
    ok: false,
    detail: 'No vCard in the body: it has no BEGIN:VCARD line',
  });

  const body = [
    '\uFEFFjunk before',
    'BEGIN:VCARD',
    'FN:One A',
    'END:VCARD',
    'stray text; END:VCARD and NOTE:x lines outside cards are not entries',
    'END:VCARD',
    'BEGIN:VCARD',
    'FN:Two B',
    'BEGIN:VCARD',
    'FN:Three C',
    '',
    '   ',
    'END:VCARD',
    'BEGIN:VCARD',
    'FN:Four D',
    'this line has no colon',
    'EMAIL:four@example.com',
    'END:VCARD',
    'BEGIN:VCARD',
    'EMAIL;TYPE="unclosed:five@example.com',
    'END:VCARD',
    'BEGIN:VCARD',
    'FN:Six F',
    'EMAIL:six@example.com',
  ].join('\n');
  t.strictSame(entriesOf(body), [
    { entry: 1, fields: { first_name: 'One', last_name: 'A' } },
    { entry: 2, detail: 'vCard has no END:VCARD before the BEGIN:VCARD on line 9' },
    { entry: 3, fields: { first_name: 'Three', last_name: 'C' } },
    { entry: 4, detail: 'vCard line 16 is not a property (NAME:value)' },
    { entry: 5, detail: 'vCard line 20 is not a property (NAME:value)' },
    { entry: 6, detail: 'vCard has no END:VCARD' },
  ]);
  t.strictSame(entriesOf('BEGIN:VCARD\r\nVERSION:4.0\r\nN:Doe;Ja'), [{ entry: 1, detail: 'vCard has no END:VCARD' }], 'a truncated body');

  const five = crlf('BEGIN:VCARD', 'FN:A B', 'END:VCARD').repeat(5);
  t.strictSame(
    parseVcards(five, { maxEntries: 3 }),
    { ok: true, entries: [1, 2, 3].map((entry) => ({ entry, fields: { first_name: 'A', last_name: 'B' } })) },
    'maxEntries stops reading',
  );
  t.equal((parseVcards(crlf('BEGIN:VCARD', 'BEGIN:VCARD', 'BEGIN:VCARD'), { maxEntries: 1 }) as { entries: unknown[] }).entries.length, 1);
});

t.test('import: only-CR line ends and LF line ends read like CRLF; a BOM is skipped', async (t) => {
  const card = crlf('BEGIN:VCARD', 'VERSION:4.0', 'FN:Jane Doe', 'N:Doe;', ' Jane;;;', 'EMAIL:jane@example.com', 'END:VCARD');
  const expected = { first_name: 'Jane', last_name: 'Doe', email: 'jane@example.com' };
  t.strictSame(fieldsOf(card), expected);
  t.strictSame(fieldsOf(card.replaceAll('\r\n', '\r')), expected);
  t.strictSame(fieldsOf(card.replaceAll('\r\n', '\n')), expected);
  t.strictSame(fieldsOf(`\uFEFF${card}`), expected, 'after a UTF-8 BOM');
});

t.test(
  'limits: a line over 262,144 bytes as written is an error of its card; more than 100,000 ignored lines refuse the import',
  async (t) => {
    const card = (...lines: string[]) => crlf('BEGIN:VCARD', 'FN:A B', ...lines, 'END:VCARD');
    // 'NOTE:', `pad` bytes and CRLF, then 4,000 folded pieces of 65 bytes (CRLF, a space, 62 bytes): 262,144 bytes with a pad of 2,137.
    const folded = (pad: number) => `NOTE:${'z'.repeat(pad)}${'\r\n '.concat('y'.repeat(62)).repeat(4000)}`;
    const qp = (lines: number) => `NOTE;ENCODING=QUOTED-PRINTABLE:${'=\r\nab'.repeat(lines)}`;
    t.strictSame(
      entriesOf(card() + card(folded(2137)) + card(folded(2138)) + card(`FN:${'é'.repeat(131_072)}`) + card(qp(60_000)) + card()),
      [
        { entry: 1, fields: { first_name: 'A', last_name: 'B' } },
        { entry: 2, fields: { first_name: 'A', last_name: 'B' } },
        { entry: 3, detail: 'vCard line 4010 is longer than 262144 bytes' },
        { entry: 4, detail: 'vCard line 8014 is longer than 262144 bytes' },
        { entry: 5, detail: 'vCard line 8018 is longer than 262144 bytes' },
        { entry: 6, fields: { first_name: 'A', last_name: 'B' } },
      ],
    );

    const blanks = (count: number, line: string) => `${line.repeat(count - 1)}${card()}${line}`;
    t.strictSame(entriesOf(blanks(100_000, '\r\n')), [{ entry: 1, fields: { first_name: 'A', last_name: 'B' } }], '100,000 blank lines');
    const tooMany = { ok: false, detail: 'Too many blank lines or lines outside cards in one import (max 100000)', tooLarge: true };
    t.strictSame(parseVcards(blanks(100_001, '\r\n')), tooMany, '100,001 blank lines');
    t.strictSame(parseVcards(blanks(100_001, 'NOTE:outside\n')), tooMany, '100,001 lines outside cards');
    t.strictSame(parseVcards(card().replace('END:', `${'\r\n'.repeat(100_001)}END:`)), tooMany, 'blank lines inside a card count too');
  },
);

t.test('import: hostile input never throws', async (t) => {
  const noCard = { ok: false, detail: 'No vCard in the body: it has no BEGIN:VCARD line' };
  t.strictSame(parseVcards('x'.repeat(1_048_576)), noCard, '1 MB single line');
  t.strictSame(parseVcards('\r'.repeat(100_000)), noCard, 'only CRs');
  t.strictSame(parseVcards(`BEGIN:VCARD\r\n${';'.repeat(200_000)}\r\nEND:VCARD\r\n`), {
    ok: true,
    entries: [{ entry: 1, detail: 'vCard line 2 is not a property (NAME:value)' }],
  });
  t.strictSame(fieldsOf(`BEGIN:VCARD\r\nNOTE;X=${'a,'.repeat(50_000)}:${'y'.repeat(150_000)}\r\nFN:A B\r\nEND:VCARD\r\n`), {
    first_name: 'A',
    last_name: 'B',
  });
  t.strictSame(fieldsOf(`BEGIN:VCARD\r\nFN:${'long '.repeat(50_000)}tail\r\nEND:VCARD`).last_name, 'tail', '250 kB FN');

  // 10,000 BEGINs deep: each one starts a card, so the nesting costs nothing.
  const nested = `${'BEGIN:VCARD\r\n'.repeat(10_000)}FN:In Most\r\n${'END:VCARD\r\n'.repeat(10_000)}`;
  const entries = entriesOf(nested);
  t.equal(entries.length, 10_000);
  t.strictSame(entries[0], { entry: 1, detail: 'vCard has no END:VCARD before the BEGIN:VCARD on line 2' });
  t.strictSame(entries[9_999], { entry: 10_000, fields: { first_name: 'In', last_name: 'Most' } });

  // Random bytes from a fixed seed, bare and inside a card.
  const random = randomText(SEED);
  t.strictSame(parseVcards(random(1_000_000)), noCard);
  const inside = parseVcards(`BEGIN:VCARD\r\n${random(100_000)}\r\nEND:VCARD\r\n`);
  t.ok(inside.ok && inside.entries.length === 1 && inside.entries[0]!.entry === 1);

  const piece = fc.oneof(
    fc.constantFrom('BEGIN:VCARD', 'END:VCARD', 'FN:A B', ' ', '\t', 'X;Y="', '=', ':', 'N;ENCODING=QUOTED-PRINTABLE:=C3='),
    fc.string({ unit: 'binary' }),
  );
  fc.assert(
    fc.property(fc.array(piece), fc.constantFrom('\r\n', '\n', '\r', ''), (parts, lineEnd) => {
      const result: ImportResult = parseVcards(parts.join(lineEnd));
      return !result.ok || result.entries.every((entry, index) => entry.entry === index + 1);
    }),
    { seed: SEED, numRuns: 500 },
  );
  t.pass('500 random bodies');
});

const tricky: Contact[] = [
  { ...jane, id: 1, first_name: 'Ann, "the" Q.', last_name: "O'Brien; Jr.", email: 'ann@example.com' },
  {
    ...jane,
    id: 2,
    first_name: 'Back\\slash',
    last_name: 'New\nLine',
    email: 'nl@example.com',
    phone: '+442071838750',
    birthday: '1900-01-01',
    additional_data: {
      note: 'a,b;c\\d\n"e"\r\n',
      family: '👩‍👩‍👧‍👦 ünïcödé',
      nested: { list: [1, 2.5, null, true, 'x'.repeat(300)] },
      constructor: 'ok',
    },
  },
  { ...jane, id: 3, first_name: '😀'.repeat(30), last_name: 'é'.repeat(40), email: 'emoji@example.com', additional_data: {} },
  {
    ...jane,
    id: 4,
    first_name: '  Pad ',
    last_name: ' Spaces  ',
    email: 'pad@example.com',
    additional_data: { long: 'ü€😀;,'.repeat(500) },
  },
];

const fieldsFrom = (contact: Contact): ImportFields => {
  const { first_name, last_name, email, phone, birthday, additional_data } = contact;
  return {
    first_name,
    last_name,
    email: email!,
    phone: phone!,
    birthday: birthday!,
    ...(additional_data === null ? {} : { additional_data }),
  };
};

t.test('round trip: export, import, export again gives the same text', async (t) => {
  const exported = tricky.map(vcardOf).join('');
  const entries = entriesOf(exported);
  t.strictSame(
    entries,
    tricky.map((contact, index) => ({ entry: index + 1, fields: fieldsFrom(contact) })),
  );
  const again = entries.map((entry, index) => {
    if (!('fields' in entry)) throw new Error(entry.detail);
    return vcardOf({ ...tricky[index]!, ...entry.fields, additional_data: entry.fields.additional_data ?? null });
  });
  t.equal(again.join(''), exported);
});

t.test('round trip: random names and data survive (a CR becomes a newline, as vCard has no CR)', async (t) => {
  const text = fc.string({ unit: 'binary', maxLength: 60 });
  // Prototype keys are refused on import as on create, so they are not exportable data.
  const data = fc
    .option(fc.dictionary(text, fc.jsonValue(), { maxKeys: 4 }))
    .filter((value) => !/"(__proto__|constructor)"/.test(JSON.stringify(value)));
  const newlines = (value: string) => value.replace(/\r\n?/g, '\n');
  fc.assert(
    fc.property(text, text, text, data, (first, last, email, additional) => {
      // Names both empty read FN instead of N; no stored contact has them (names are 1-50 characters).
      fc.pre(first !== '' || last !== '');
      const contact: Contact = { ...jane, first_name: first, last_name: last, email, additional_data: additional };
      const expected = fieldsFrom({ ...contact, first_name: newlines(first), last_name: newlines(last), email: newlines(email) });
      // JSON text has no -0: compare with what JSON can carry.
      return isDeepStrictEqual(entriesOf(vcardOf(contact)), [{ entry: 1, fields: JSON.parse(JSON.stringify(expected)) }]);
    }),
    { seed: SEED, numRuns: 300 },
  );
  t.pass('300 random contacts');
});
