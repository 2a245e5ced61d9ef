/** Unit tests of the pure filter parser (src/contacts/filter.ts). */
import t from 'tap';
import { type Condition, likeLiteral, likePattern, parseFilter, timestampSpan } from '../../src/contacts/filter.js';

const errorOf = (expression: string): string => {
  try {
    parseFilter(expression);
  } catch (error) {
    return (error as Error).message;
  }
  throw new Error(`expected '${expression}' to be refused`);
};

t.test('one condition per field kind', async (t) => {
  t.same(parseFilter('last_name:eq:Smith'), [{ type: 'eq', field: 'last_name', value: 'Smith' }]);
  t.same(parseFilter('email:ilike:%@Example.com'), [{ type: 'like', field: 'email', pattern: '%@Example.com', caseInsensitive: true }]);
  t.same(parseFilter('first_name:like:J_n%'), [{ type: 'like', field: 'first_name', pattern: 'J_n%', caseInsensitive: false }]);
  t.same(parseFilter('first_name:startswith:Jo'), [{ type: 'like', field: 'first_name', pattern: 'Jo%', caseInsensitive: false }]);
  t.same(parseFilter('first_name:endswith:ne'), [{ type: 'like', field: 'first_name', pattern: '%ne', caseInsensitive: false }]);
  t.same(parseFilter('first_name:contains:an'), [{ type: 'like', field: 'first_name', pattern: '%an%', caseInsensitive: false }]);
  t.same(parseFilter('birthday:gt:1990-01-01'), [
    { type: 'range', field: 'birthday', lower: { value: '1990-01-01', inclusive: false }, upper: null },
  ]);
  t.same(parseFilter('birthday:lt:1990-01-01'), [
    { type: 'range', field: 'birthday', lower: null, upper: { value: '1990-01-01', inclusive: false } },
  ]);
  t.same(parseFilter('birthday:eq:1990-01-01'), [
    { type: 'range', field: 'birthday', lower: { value: '1990-01-01', inclusive: true }, upper: { value: '1990-01-01', inclusive: true } },
  ]);
});

t.test('commas inside between values and inside lists belong to the value', async (t) => {
  t.same(parseFilter('first_name:in_:["John","Jane"],birthday:between:1980-01-01,1990-12-31'), [
    { type: 'in', field: 'first_name', values: ['John', 'Jane'] },
    { type: 'range', field: 'birthday', lower: { value: '1980-01-01', inclusive: true }, upper: { value: '1990-12-31', inclusive: true } },
  ]);
  // A list item that looks like a condition stays inside the list.
  t.same(parseFilter('last_name:in_:["a,last_name:eq:b","c]"],email:eq:x'), [
    { type: 'in', field: 'last_name', values: ['a,last_name:eq:b', 'c]'] },
    { type: 'eq', field: 'email', value: 'x' },
  ]);
  t.same(parseFilter('first_name:in_:["say \\"hi\\", ok"]'), [{ type: 'in', field: 'first_name', values: ['say "hi", ok'] }]);
  t.same(parseFilter('first_name:in_:[]'), [{ type: 'in', field: 'first_name', values: [] }]);
  // After a condition, a comma that does not start a new condition is part of the value.
  t.same(parseFilter('last_name:eq:Smith, Jr.,email:contains:x'), [
    { type: 'eq', field: 'last_name', value: 'Smith, Jr.' },
    { type: 'like', field: 'email', pattern: '%x%', caseInsensitive: false },
  ]);
  t.same(parseFilter('first_name:eq:a,'), [{ type: 'eq', field: 'first_name', value: 'a,' }]);
});

t.test('colons in values: only the first two split a condition', async (t) => {
  t.same(parseFilter('created_at:gt:2025-01-01T10:00:00Z'), [
    { type: 'range', field: 'created_at', lower: { value: '2025-01-01T10:00:00.000Z', inclusive: false }, upper: null },
  ]);
  t.same(parseFilter('first_name:eq:a:b:c'), [{ type: 'eq', field: 'first_name', value: 'a:b:c' }]);
  t.same(parseFilter('created_at:between:2025-01-01T10:00:00+02:00,2025-01-02'), [
    {
      type: 'range',
      field: 'created_at',
      lower: { value: '2025-01-01T08:00:00.000Z', inclusive: true },
      upper: { value: '2025-01-02T23:59:59.999Z', inclusive: true },
    },
  ]);
});

t.test('dates and datetimes on created_at/updated_at', async (t) => {
  const range = (expression: string) => parseFilter(expression)[0] as Extract<Condition, { type: 'range' }>;
  t.same(range('updated_at:eq:2025-03-04'), {
    type: 'range',
    field: 'updated_at',
    lower: { value: '2025-03-04T00:00:00.000Z', inclusive: true },
    upper: { value: '2025-03-04T23:59:59.999Z', inclusive: true },
  });
  t.same(range('updated_at:gt:2025-03-04').lower, { value: '2025-03-04T23:59:59.999Z', inclusive: false });
  t.same(range('updated_at:lt:2025-03-04').upper, { value: '2025-03-04T00:00:00.000Z', inclusive: false });
  t.same(
    range('created_at:eq:2025-03-04T05:06:07.123456Z').lower,
    { value: '2025-03-04T05:06:07.123Z', inclusive: true },
    'digits past ms are dropped',
  );
  t.same(range('created_at:eq:2025-03-04T05:06:07.999999Z').lower?.value, '2025-03-04T05:06:07.999Z', 'not rounded');
  t.same(range('created_at:lt:2025-03-04T00:30-01:30').upper?.value, '2025-03-04T02:00:00.000Z');
  t.same(range('created_at:lt:2025-03-04T00:30:00 0100').upper?.value, '2025-03-03T23:30:00.000Z', 'an unencoded + arrives as a space');
  t.equal(timestampSpan('2025-03-04T05:06:07'), null, 'no zone');
  t.equal(timestampSpan('2025-02-29T00:00:00Z'), null, 'not a real date');
  t.equal(timestampSpan('2025-03-04T24:00:00Z'), null);
  t.equal(timestampSpan('0001-01-01T00:00:00+01:00'), null, 'before year 1 once in UTC');
  t.equal(errorOf('created_at:gt:2025-01-01T10:00:00'), "Invalid filter value '2025-01-01T10:00:00' for field 'created_at'");
  t.equal(errorOf('created_at:between:2025-01-01'), "Invalid filter value '2025-01-01' for field 'created_at'");
  t.equal(
    errorOf('birthday:between:2025-01-01,2025-01-02,2025-01-03'),
    "Invalid filter value '2025-01-01,2025-01-02,2025-01-03' for field 'birthday'",
  );
  t.equal(errorOf('birthday:eq:1990-13-01'), "Invalid filter value '1990-13-01' for field 'birthday'");
  t.equal(errorOf('birthday:eq:1991-02-29'), "Invalid filter value '1991-02-29' for field 'birthday'");
  t.equal(errorOf('birthday:eq:1990-01-01T00:00:00Z'), "Invalid filter value '1990-01-01T00:00:00Z' for field 'birthday'");
  t.ok(parseFilter('birthday:eq:1992-02-29'));
});

t.test('% and _ are literal in contains/startswith/endswith; like keeps \\% and \\_', async (t) => {
  t.same(parseFilter('email:contains:100%_off'), [{ type: 'like', field: 'email', pattern: '%100\\%\\_off%', caseInsensitive: false }]);
  t.same(parseFilter('email:startswith:a\\b'), [{ type: 'like', field: 'email', pattern: 'a\\\\b%', caseInsensitive: false }]);
  t.equal(likeLiteral('a%b_c\\d'), 'a\\%b\\_c\\\\d');
  t.equal(likePattern('50\\%%'), '50\\%%');
  t.equal(likePattern('a\\_b_'), 'a\\_b_');
  t.equal(likePattern('back\\slash\\'), 'back\\\\slash\\\\', 'other backslashes are literal, a trailing one too');
});

t.test('phone values lose separators', async (t) => {
  t.same(parseFilter('phone:eq:+1 (415) 555-0123'), [{ type: 'eq', field: 'phone', value: '+14155550123' }]);
  t.same(parseFilter('phone:in_:["+1 415.555.0123","+44 20"]'), [{ type: 'in', field: 'phone', values: ['+14155550123', '+4420'] }]);
  t.same(parseFilter('phone:startswith:+1 (415'), [{ type: 'like', field: 'phone', pattern: '+1415%', caseInsensitive: false }]);
  t.equal(errorOf('phone:eq:( )'), "Invalid filter value '( )' for field 'phone'");
});

t.test('bare terms before the first condition', async (t) => {
  t.same(parseFilter('smith'), [{ type: 'search', pattern: '%smith%', phonePattern: null }]);
  t.same(parseFilter(' 555-01 ,birthday:gt:1990-01-01'), [
    { type: 'search', pattern: '%555-01%', phonePattern: '%55501%' },
    { type: 'range', field: 'birthday', lower: { value: '1990-01-01', inclusive: false }, upper: null },
  ]);
  t.same(parseFilter('a,b'), [
    { type: 'search', pattern: '%a%', phonePattern: null },
    { type: 'search', pattern: '%b%', phonePattern: null },
  ]);
  t.same(parseFilter('(-)'), [{ type: 'search', pattern: '%(-)%', phonePattern: null }]);
  t.same(parseFilter('(+44) 20'), [{ type: 'search', pattern: '%(+44) 20%', phonePattern: '%+4420%' }]);
  t.same(parseFilter('50%'), [{ type: 'search', pattern: '%50\\%%', phonePattern: null }]);
  t.same(parseFilter(''), []);
  t.same(parseFilter('   '), []);
});

t.test('unicode', async (t) => {
  t.same(parseFilter('first_name:eq:Zoë,last_name:contains:Ünal'), [
    { type: 'eq', field: 'first_name', value: 'Zoë' },
    { type: 'like', field: 'last_name', pattern: '%Ünal%', caseInsensitive: false },
  ]);
  t.same(parseFilter('山田'), [{ type: 'search', pattern: '%山田%', phonePattern: null }]);
  t.same(parseFilter('first_name:in_:["😀","\\u00e9"]'), [{ type: 'in', field: 'first_name', values: ['😀', 'é'] }]);
});

t.test('errors: exact wording, first bad condition from the left, field before operator', async (t) => {
  t.equal(errorOf('nickname:eq:x'), "Invalid filter field 'nickname'");
  t.equal(errorOf('First_Name:eq:x'), "Invalid filter field 'First_Name'");
  t.equal(errorOf('first_name:gte:x'), "Invalid filter operator 'gte' for field 'first_name'");
  t.equal(errorOf('first_name:EQ:x'), "Invalid filter operator 'EQ' for field 'first_name'");
  t.equal(errorOf('phone:contains:1'), "Invalid filter operator 'contains' for field 'phone'");
  t.equal(errorOf('phone:ilike:1'), "Invalid filter operator 'ilike' for field 'phone'");
  t.equal(errorOf('birthday:like:1990%'), "Invalid filter operator 'like' for field 'birthday'");
  t.equal(errorOf('email:gt:a'), "Invalid filter operator 'gt' for field 'email'");
  t.equal(errorOf('nickname:gte:x'), "Invalid filter field 'nickname'", 'unknown field before bad operator');
  t.equal(errorOf('first_name:gte:x,nickname:eq:y'), "Invalid filter operator 'gte' for field 'first_name'", 'leftmost first');
  t.equal(errorOf('birthday:eq:bad,nickname:eq:y'), "Invalid filter value 'bad' for field 'birthday'", 'leftmost first');
  t.equal(errorOf('first_name:eq:'), "Invalid filter value '' for field 'first_name'");
  t.equal(errorOf('first_name:in_:"John"'), `Invalid filter value '"John"' for field 'first_name'`);
  t.equal(errorOf('first_name:in_:[1,2]'), "Invalid filter value '[1,2]' for field 'first_name'");
  t.equal(errorOf('first_name:in_:["a"]x'), `Invalid filter value '["a"]x' for field 'first_name'`);
});

t.test('names inherited from Object.prototype are neither fields nor operators', async (t) => {
  for (const name of ['constructor', '__proto__', 'toString', 'hasOwnProperty', 'valueOf']) {
    t.equal(errorOf(`${name}:eq:x`), `Invalid filter field '${name}'`);
    t.equal(errorOf(`first_name:${name}:x`), `Invalid filter operator '${name}' for field 'first_name'`);
  }
  t.equal(errorOf('smith,constructor:eq:x'), "Invalid filter field 'constructor'", 'after a bare term too');
});

t.test('NUL characters never reach the database', async (t) => {
  t.equal(errorOf('first_name:eq:a\u0000b'), "Invalid filter value 'a\u0000b' for field 'first_name'");
  t.equal(errorOf('email:contains:\u0000'), "Invalid filter value '\u0000' for field 'email'");
  t.equal(errorOf('phone:eq:+1 415\u0000'), "Invalid filter value '+1 415\u0000' for field 'phone'");
  t.equal(
    errorOf('first_name:in_:["a\\u0000"]'),
    `Invalid filter value '["a\\u0000"]' for field 'first_name'`,
    'an escaped NUL in the list',
  );
  t.equal(
    errorOf('last_name:in_:["ok","b\u0000"]'),
    `Invalid filter value '["ok","b\u0000"]' for field 'last_name'`,
    'a raw NUL in the list',
  );
  t.equal(errorOf('birthday:eq:1990-01-01\u0000'), "Invalid filter value '1990-01-01\u0000' for field 'birthday'");
  t.equal(errorOf('smith,a\u0000b'), 'Malformed filter expression: NUL character in condition 2');
});

t.test('unpaired UTF-16 surrogates never reach the database', async (t) => {
  t.equal(errorOf('first_name:eq:a\ud800b'), "Invalid filter value 'a\ud800b' for field 'first_name'");
  t.equal(
    errorOf('first_name:in_:["\\ud800"]'),
    `Invalid filter value '["\\ud800"]' for field 'first_name'`,
    'an escaped surrogate in the list',
  );
  t.same(
    parseFilter('first_name:in_:["\\ud83d\\ude00"]'),
    [{ type: 'in', field: 'first_name', values: ['\u{1F600}'] }],
    'an escaped pair is a character like any other',
  );
  t.equal(errorOf('\udc00x'), 'Malformed filter expression: unpaired UTF-16 surrogate in condition 1');
});

t.test('malformed expressions', async (t) => {
  t.equal(errorOf('first_name:in_:["John","Jane"'), 'Malformed filter expression: unterminated list in condition 1');
  t.equal(errorOf('email:eq:a,first_name:in_:["x\\"]'), 'Malformed filter expression: unterminated list in condition 2');
  t.equal(errorOf('nickname:eq:a,first_name:in_:["x'), "Invalid filter field 'nickname'", 'a bad condition left of the list wins');
  t.equal(errorOf('first_name:in_:[,nickname:eq:x'), 'Malformed filter expression: unterminated list in condition 1');
  t.equal(errorOf(',smith'), 'Malformed filter expression: empty condition 1');
  t.equal(errorOf('smith,,jones'), 'Malformed filter expression: empty condition 2');
  t.equal(errorOf('smith, ,birthday:eq:1990-01-01'), 'Malformed filter expression: empty condition 2');
  t.equal(errorOf('first_name:eq'), 'Malformed filter expression: condition 1 is not field:operator:value');
  t.equal(errorOf('smith,first_name:x,eq:y'), 'Malformed filter expression: condition 2 is not field:operator:value');
});

t.test('length and condition caps', async (t) => {
  const twenty = Array.from({ length: 20 }, (_, i) => `first_name:eq:n${i}`).join(',');
  t.equal(parseFilter(twenty).length, 20);
  t.equal(errorOf(`${twenty},last_name:eq:x`), 'Malformed filter expression: more than 20 conditions');
  t.equal(errorOf(Array.from({ length: 25 }, () => 'x').join(',')), 'Malformed filter expression: more than 20 conditions');
  t.equal(errorOf(`first_name:eq:${'a'.repeat(1990)}`), 'Malformed filter expression: longer than 2000 characters');
  t.equal(parseFilter(`first_name:eq:${'a'.repeat(1986)}`).length, 1, 'exactly 2,000 characters is fine');
  // A long value with many commas that never start a condition stays one value, parsed in linear-ish time.
  t.equal(parseFilter(`first_name:eq:${',a'.repeat(990)}`).length, 1);
});

t.test('a comma starts a condition however long its field and operator names are', async (t) => {
  const field = 'a'.repeat(100);
  t.equal(errorOf(`first_name:eq:John,${field}:eq:x`), `Invalid filter field '${field}'`);
  const operator = 'z'.repeat(100);
  t.equal(errorOf(`first_name:eq:John,first_name:${operator}:x`), `Invalid filter operator '${operator}' for field 'first_name'`);
});
