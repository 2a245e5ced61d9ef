/** Unit tests of the CSV codec (src/contacts/formats/csv.ts) against RFC 4180 examples and hostile input. */
import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import t from 'tap';
import { csvHeader, csvRowOf, defuse, parseCsv } from '../../../src/contacts/formats/csv.js';
import type { Contact, ImportEntry, ImportFields } from '../../../src/contacts/formats/entries.js';
import { jane, randomText } from './samples.js';

const SEED = 20261122;
const HEADER = 'first_name,last_name,email,phone,birthday,additional_data';

/** The entries of a body whose header is accepted. */
const entriesOf = (body: string): ImportEntry[] => {
  const result = parseCsv(body);
  if (!result.ok) throw new Error(`expected rows, got: ${result.detail}`);
  return result.entries;
};
const row = (
  first_name: string,
  last_name: string,
  email: string,
  phone: string,
  birthday: string,
  additional_data?: ImportFields['additional_data'],
) => ({
  first_name,
  last_name,
  email,
  phone,
  birthday,
  ...(additional_data === undefined ? {} : { additional_data }),
});

t.test('export: the header openapi.yaml fixes, and rows quoted only where RFC 4180 needs it', async (t) => {
  t.equal(csvHeader(), `${HEADER}\r\n`);
  t.equal(csvRowOf(jane), 'Jane,Doe,jane@example.com,+14155550123,1990-05-17,\r\n');
  t.equal(
    csvRowOf({ ...jane, additional_data: { tags: ['a', 'b'], vip: true } }),
    'Jane,Doe,jane@example.com,+14155550123,1990-05-17,"{""tags"":[""a"",""b""],""vip"":true}"\r\n',
  );
  t.equal(
    csvRowOf({ ...jane, first_name: 'Smith, Jr.', last_name: 'say "hi"' }),
    '"Smith, Jr.","say ""hi""",jane@example.com,+14155550123,1990-05-17,\r\n',
  );
  t.equal(
    csvRowOf({ ...jane, first_name: 'two\nlines', last_name: 'cr\ronly' }),
    '"two\nlines","cr\ronly",jane@example.com,+14155550123,1990-05-17,\r\n',
  );
  // Spaces and semicolons are written as they are.
  t.equal(csvRowOf({ ...jane, first_name: ' =1+1 ', last_name: "a;'x" }), " =1+1 ,a;'x,jane@example.com,+14155550123,1990-05-17,\r\n");
});

t.test('export: a cell a spreadsheet would run as a formula starts with a quote (OWASP CSV injection)', async (t) => {
  const cells = (contact: Partial<Contact>) => csvRowOf({ ...jane, ...contact });
  t.equal(
    cells({ first_name: '=HYPERLINK("http://evil.example","x")' }),
    `"'=HYPERLINK(""http://evil.example"",""x"")",Doe,jane@example.com,+14155550123,1990-05-17,\r\n`,
  );
  t.equal(cells({ first_name: '+SUM(1,2)', last_name: '-2+3' }), `"'+SUM(1,2)",'-2+3,jane@example.com,+14155550123,1990-05-17,\r\n`);
  t.equal(cells({ first_name: '@SUM(A1)', email: '=1@example.com' }), "'@SUM(A1),Doe,'=1@example.com,+14155550123,1990-05-17,\r\n");
  t.equal(cells({ first_name: '\tTab', last_name: '\rCR', email: '\0nul' }), `'\tTab,"'\rCR",'\0nul,+14155550123,1990-05-17,\r\n`);
  // A value that already looks escaped gets one more quote, so that import reads back exactly it.
  t.equal(cells({ first_name: "'=x", last_name: "''" }), "''=x,''',jane@example.com,+14155550123,1990-05-17,\r\n");
  // A quote before anything else is no escape: written and read as it is.
  t.equal(cells({ first_name: "'Tis", last_name: "'" }), "'Tis,',jane@example.com,+14155550123,1990-05-17,\r\n");
  // A stored phone is + and digits: a number to a spreadsheet, written as it is.
  t.equal(cells({}), 'Jane,Doe,jane@example.com,+14155550123,1990-05-17,\r\n');
  t.equal(cells({ phone: '+1 (415)' }), "Jane,Doe,jane@example.com,'+1 (415),1990-05-17,\r\n", 'anything else is escaped');
  t.equal(
    cells({ additional_data: { '=': 1 } }),
    'Jane,Doe,jane@example.com,+14155550123,1990-05-17,"{""="":1}"\r\n',
    'JSON starts with {',
  );
});

t.test('import: the escaping quote is dropped, as a spreadsheet drops it', async (t) => {
  const header = 'first_name,last_name,email,phone,birthday,additional_data';
  t.strictSame(entriesOf(`${header}\r\n'=1+1,'-2,'@x@example.com,'+14155550123,'+1990-01-01,"'{}"\r\n`), [
    { entry: 1, detail: 'body/additional_data must be a JSON object' },
  ]);
  t.strictSame(entriesOf(`${header}\r\n'=1+1,'-2,'@x@example.com,'+14155550123,'\t1990-01-01,\r\n`), [
    { entry: 1, fields: row('=1+1', '-2', '@x@example.com', '+14155550123', '\t1990-01-01') },
  ]);
  t.strictSame(entriesOf(`${header}\r\n''=x,''',''',"'\r",'Tis,\r\n`), [{ entry: 1, fields: row("'=x", "''", "''", '\r', "'Tis") }]);
});

t.test('import: RFC 4180 §2 examples', async (t) => {
  const header = 'first_name,last_name,email,phone,birthday';
  // Rules 1-3: CRLF records, the last one may lack its line break, a header line.
  t.strictSame(parseCsv(`${header}\r\naaa,bbb,ccc,ddd,eee\r\nzzz,yyy,xxx,www,vvv`), {
    ok: true,
    entries: [
      { entry: 1, fields: row('aaa', 'bbb', 'ccc', 'ddd', 'eee') },
      { entry: 2, fields: row('zzz', 'yyy', 'xxx', 'www', 'vvv') },
    ],
  });
  // Rule 4: spaces are part of a field.
  t.strictSame(entriesOf(`${header}\r\n aaa , bbb,ccc ,d d,\r\n`), [{ entry: 1, fields: row(' aaa ', ' bbb', 'ccc ', 'd d', '') }]);
  // Rules 5-7: quoted fields, with line breaks, commas and doubled quotes inside.
  t.strictSame(entriesOf(`${header}\r\n"aaa","b\r\nbb","ccc","d,d","e""e"\r\n"""",""," ",x,y\r\n`), [
    { entry: 1, fields: row('aaa', 'b\r\nbb', 'ccc', 'd,d', 'e"e') },
    { entry: 2, fields: row('"', '', ' ', 'x', 'y') },
  ]);
});

t.test('import: a Google-like file, columns by name in any order, unknown ones ignored', async (t) => {
  const body = [
    'Name,Group Membership, Last_Name ,FIRST_NAME,E-mail 1 - Value,Email,Notes,birthday,Phone,additional_data,Photo',
    'Jane Doe,* myContacts ::: Friends,Doe,Jane,jane@work.example,jane@example.com,"Met at the conference, 2019.',
    'Likes ""tea"".",1990-05-17,+1 (415) 555-0123,"{""vip"":true}",https://example.com/p.jpg',
    'John Roe,* myContacts,Roe,John,,john@example.com,,1985-04-15,+44 20 7183 8750,,',
  ].join('\n');
  t.strictSame(parseCsv(body), {
    ok: true,
    entries: [
      { entry: 1, fields: row('Jane', 'Doe', 'jane@example.com', '+1 (415) 555-0123', '1990-05-17', { vip: true }) },
      { entry: 2, fields: row('John', 'Roe', 'john@example.com', '+44 20 7183 8750', '1985-04-15') },
    ],
  });
  // A repeated name: the first column of that name is read.
  t.strictSame(entriesOf('email,first_name,last_name,phone,birthday,EMAIL\r\na@example.com,A,B,+1,2000-01-01,b@example.com\r\n'), [
    { entry: 1, fields: row('A', 'B', 'a@example.com', '+1', '2000-01-01') },
  ]);
});

t.test('import: the header is checked first; a missing column is named in a fixed order', async (t) => {
  const missing = (column: string) => ({ ok: false, detail: `Missing CSV column '${column}'` });
  t.strictSame(parseCsv('email\r\njane@example.com\r\n'), missing('first_name'));
  t.strictSame(parseCsv('birthday,first_name,last_name\r\n'), missing('email'));
  t.strictSame(parseCsv('first_name,last_name,email,birthday,additional_data\r\n'), missing('phone'));
  t.strictSame(parseCsv('first_name,last_name,email,phone\r\n"unclosed'), missing('birthday'), 'before any row is read');
  t.strictSame(
    parseCsv('first name,last name,email,phone,birthday\r\n'),
    missing('first_name'),
    'names are not rewritten beyond trim and case',
  );
  t.strictSame(parseCsv(''), missing('first_name'), 'an empty body has no header');
  t.strictSame(parseCsv('\uFEFF\r\n\r\n  \r\n'), missing('first_name'), 'nor has a body of blank lines');
  t.strictSame(parseCsv('first_name,last_name,"email\r\nphone,birthday\r\n'), {
    ok: false,
    detail: 'CSV header has a quoted field that is never closed',
  });
  t.strictSame(parseCsv('first_name,"last_name"x,email,phone,birthday\r\n'), {
    ok: false,
    detail: 'CSV header has text after a closing quote',
  });
  t.strictSame(
    parseCsv('first_name,last_name,email,phone,birthday\r\n'),
    { ok: true, entries: [] },
    'additional_data is optional; no rows is no entries',
  );
});

t.test('import: blank lines are skipped and not counted; bad rows are entry errors', async (t) => {
  const body = [
    '',
    HEADER,
    '',
    'A,One,a@example.com,+1,2000-01-01,',
    '   ',
    'B,Two,b@example.com,+1,2000-01-01',
    'C,Three,c@example.com,+1,2000-01-01,,extra',
    'D,"Four"x,d@example.com,+1,2000-01-01,',
    `E,5'11" tall,e@example.com,+1,2000-01-01,`,
    '"",',
    '""',
    ',,,,,',
    'F,Six,f@example.com,+1,2000-01-01,[1]',
    'G,Seven,g@example.com,+1,2000-01-01,{"a":',
    'H,Eight,h@example.com,+1,2000-01-01,"{""__proto__"":{}}"',
    'I,Nine,i@example.com,+1,2000-01-01,null',
    'J,"Ten, never closed,j@example.com',
    'K,Eleven,k@example.com,+1,2000-01-01,',
  ].join('\r\n');
  t.strictSame(entriesOf(body), [
    { entry: 1, fields: row('A', 'One', 'a@example.com', '+1', '2000-01-01') },
    { entry: 2, detail: 'CSV row has 5 fields; the header has 6' },
    { entry: 3, detail: 'CSV row has 7 fields; the header has 6' },
    { entry: 4, detail: 'CSV row has text after a closing quote' },
    { entry: 5, fields: row('E', `5'11" tall`, 'e@example.com', '+1', '2000-01-01') },
    { entry: 6, detail: 'CSV row has 2 fields; the header has 6' },
    { entry: 7, detail: 'CSV row has 1 field; the header has 6' },
    { entry: 8, fields: row('', '', '', '', '') },
    { entry: 9, detail: 'body/additional_data must be a JSON object' },
    { entry: 10, detail: 'body/additional_data must be a JSON object' },
    { entry: 11, detail: 'body/additional_data must not contain "__proto__" or "constructor.prototype" keys' },
    { entry: 12, fields: row('I', 'Nine', 'i@example.com', '+1', '2000-01-01', null) },
    { entry: 13, detail: 'CSV row has a quoted field that is never closed' },
  ]);
});

t.test('import: LF, lone CR and CRLF line ends, a UTF-8 BOM, a missing final line break', async (t) => {
  const expected = [
    { entry: 1, fields: row('Jane', 'Doe', 'jane@example.com', '+1', '1990-05-17') },
    { entry: 2, fields: row('Ann', 'Lee', 'ann@example.com', '+2', '1991-06-18') },
  ];
  const lines = [HEADER, 'Jane,Doe,jane@example.com,+1,1990-05-17,', 'Ann,Lee,ann@example.com,+2,1991-06-18,'];
  for (const lineEnd of ['\r\n', '\n', '\r']) {
    t.strictSame(entriesOf(lines.join(lineEnd)), expected);
    t.strictSame(entriesOf(`\uFEFF${lines.join(lineEnd)}${lineEnd}${lineEnd}`), expected);
  }
  t.strictSame(entriesOf(`\uFEFF"first_name","last_name","email","phone","birthday"\nx,y,z,+1,2000-01-01`), [
    { entry: 1, fields: row('x', 'y', 'z', '+1', '2000-01-01') },
  ]);
  // A BOM belongs to the body, not to the first column name; U+FEFF elsewhere is text.
  t.strictSame(entriesOf(`\uFEFF${HEADER}\n\uFEFFx,y,z,+1,2000-01-01,`), [
    { entry: 1, fields: row('\uFEFFx', 'y', 'z', '+1', '2000-01-01') },
  ]);
});

t.test('import: maxEntries stops reading', async (t) => {
  const body = csvHeader() + csvRowOf(jane).repeat(5);
  const result = parseCsv(body, { maxEntries: 3 });
  t.strictSame(result, {
    ok: true,
    entries: [1, 2, 3].map((entry) => ({ entry, fields: row('Jane', 'Doe', 'jane@example.com', '+14155550123', '1990-05-17') })),
  });
});

t.test('limits: a record over 262,144 bytes is an error of its row; more than 100,000 blank lines refuse the import', async (t) => {
  const long = 'x'.repeat(262_144 - 'B,,,,,'.length);
  // Row 2 is 262,144 bytes (its additional_data is no JSON), row 3 one more, row 4 a quoted cell of 262,146.
  t.strictSame(entriesOf(`${HEADER}\r\nA,,,,,\r\nB,,,,,${long}\r\nC,,,,,${long}x\r\n"${'\r\n'.repeat(131_072)}",,,,,\r\nD,,,,,\r\n`), [
    { entry: 1, fields: row('A', '', '', '', '') },
    { entry: 2, detail: 'body/additional_data must be a JSON object' },
    { entry: 3, detail: 'CSV row is longer than 262144 bytes' },
    { entry: 4, detail: 'CSV row is longer than 262144 bytes' },
    { entry: 5, fields: row('D', '', '', '', '') },
  ]);
  t.strictSame(parseCsv(`${'y'.repeat(262_145)}\r\n`), { ok: false, detail: 'CSV header is longer than 262144 bytes' });

  const blank = (count: number, line: string) => `\r\n${HEADER}\r\n${line.repeat(count - 1)}A,,,,,\r\n`;
  t.strictSame(entriesOf(blank(100_000, '\r\n')), [{ entry: 1, fields: row('A', '', '', '', '') }], '100,000 empty lines');
  const tooMany = { ok: false, detail: 'Too many blank lines in one import (max 100000)', tooLarge: true };
  t.strictSame(parseCsv(blank(100_001, '\r\n')), tooMany, '100,001 empty lines');
  t.strictSame(parseCsv(blank(100_001, ' \r')), tooMany, '100,001 blank lines');
  t.strictSame(parseCsv(`${HEADER}${'\n'.repeat(100_002)}`), tooMany, 'at the end');
  t.strictSame(parseCsv(`${'\r\n'.repeat(100_001)}${HEADER}`), tooMany, 'before the header');
});

t.test('import: hostile input never throws', async (t) => {
  t.strictSame(parseCsv('x'.repeat(200_000)), { ok: false, detail: "Missing CSV column 'first_name'" }, '200 kB single line');
  t.strictSame(parseCsv('\r'.repeat(100_000)), { ok: false, detail: "Missing CSV column 'first_name'" }, 'only CRs');
  t.strictSame(parseCsv(`${HEADER}\r\n${'\r\n'.repeat(100_000)}`), { ok: true, entries: [] }, '100,000 blank lines');
  t.strictSame(entriesOf(`${HEADER}\r\n"${'"",\r\n'.repeat(50_000)}",b,c,d,e,\r\n`)[0]!, {
    entry: 1,
    fields: row('",\r\n'.repeat(50_000), 'b', 'c', 'd', 'e'),
  });
  t.strictSame(entriesOf(`${HEADER}\r\n${','.repeat(200_000)}\r\n`), [{ entry: 1, detail: 'CSV row has 200001 fields; the header has 6' }]);

  const random = randomText(SEED);
  t.strictSame(parseCsv(random(1_000_000)), { ok: false, detail: "Missing CSV column 'first_name'" });
  const rows = parseCsv(`${HEADER}\r\n${random(1_000_000)}`);
  t.ok(rows.ok && rows.entries.every((entry, index) => entry.entry === index + 1), 'random rows are numbered in order');

  const piece = fc.oneof(fc.constantFrom('"', '""', ',', '\r', '\n', '\r\n', ' ', 'null', '{}', '\uFEFF'), fc.string({ unit: 'binary' }));
  fc.assert(
    fc.property(fc.array(piece), (parts) => {
      const result = parseCsv(`${HEADER}\n${parts.join('')}`);
      return result.ok && result.entries.every((entry, index) => entry.entry === index + 1);
    }),
    { seed: SEED, numRuns: 500 },
  );
  t.pass('500 random bodies');
});

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
  const tricky: Contact[] = [
    { ...jane, id: 1, first_name: 'Ann, "the" Q.', last_name: "O'Brien; Jr.", email: 'ann@example.com' },
    {
      ...jane,
      id: 2,
      first_name: 'Back\\slash',
      last_name: 'CRLF\r\nLF\nCR\r',
      email: 'nl@example.com',
      additional_data: { note: 'a,b;c\\d\n"e"\r\n', nested: { list: [1, 2.5, null, true] } },
    },
    { ...jane, id: 3, first_name: '😀'.repeat(30), last_name: 'é', email: 'emoji@example.com', additional_data: {} },
    { ...jane, id: 4, first_name: '  Pad ', last_name: ' ', email: 'pad@example.com', additional_data: { long: 'ü€😀;,"'.repeat(500) } },
  ];
  const exported = csvHeader() + tricky.map(csvRowOf).join('');
  const entries = entriesOf(exported);
  t.strictSame(
    entries,
    tricky.map((contact, index) => ({ entry: index + 1, fields: fieldsFrom(contact) })),
  );
  const again = entries.map((entry, index) => {
    if (!('fields' in entry)) throw new Error(entry.detail);
    return csvRowOf({ ...tricky[index]!, ...entry.fields, additional_data: entry.fields.additional_data ?? null });
  });
  t.equal(csvHeader() + again.join(''), exported);
});

t.test('round trip: random contacts survive exactly', async (t) => {
  const text = fc.string({ unit: 'binary', maxLength: 40 });
  const data = fc
    .option(fc.dictionary(text, fc.jsonValue(), { maxKeys: 4 }))
    .filter((value) => !/"(__proto__|constructor)"/.test(JSON.stringify(value)));
  const contact = fc.record({ first_name: text, last_name: text, email: text, phone: text, birthday: text, additional_data: data });
  fc.assert(
    fc.property(fc.array(contact, { maxLength: 5 }), (contacts) => {
      const full = contacts.map((fields) => ({ ...jane, ...fields }));
      const body = csvHeader() + full.map(csvRowOf).join('');
      // JSON text has no -0: compare with what JSON can carry.
      const expected = JSON.parse(JSON.stringify(full.map((c, index) => ({ entry: index + 1, fields: fieldsFrom(c) }))));
      return isDeepStrictEqual(entriesOf(body), expected);
    }),
    { seed: SEED, numRuns: 300 },
  );
  t.pass('300 random files');
});

t.test('round trip: values that start with formula characters or quotes survive exactly, and export defuses them', async (t) => {
  const start = fc.constantFrom('=', '+', '-', '@', '\t', '\r', '\0', "'", "''", "'=", '"', ' ', 'a');
  const value = fc
    .tuple(fc.array(start, { maxLength: 3 }), fc.string({ unit: 'binary', maxLength: 10 }))
    .map(([head, rest]) => head.join('') + rest);
  const formulaStart = /^[=+\-@\t\r\0]/;
  fc.assert(
    fc.property(fc.record({ first_name: value, last_name: value, email: value, phone: value, birthday: value }), (fields) => {
      const contact: Contact = { ...jane, ...fields, additional_data: null };
      const body = csvHeader() + csvRowOf(contact);
      const entries = entriesOf(body);
      const read = entries[0]!;
      if (!('fields' in read) || !isDeepStrictEqual(entries, [{ entry: 1, fields: fieldsFrom(contact) }])) return false;
      // What a cell holds (inside its quotes, if quoted) never starts with a formula character.
      const defused = [fields.first_name, fields.last_name, fields.email, fields.birthday].every(
        (field) => !formulaStart.test(defuse(field)),
      );
      return defused && csvHeader() + csvRowOf({ ...contact, ...read.fields, additional_data: null }) === body;
    }),
    { seed: SEED, numRuns: 500 },
  );
  t.pass('500 random contacts');
});
