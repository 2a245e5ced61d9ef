import fc from 'fast-check';
import {
  describe,
  type Family,
  type HostileCase,
  hostileString,
  jsonCase,
  jsonOperations,
  raw,
  type Rng,
  rng,
  samples,
  toJson,
} from './common.js';

/** Replacement values for one field: wrong types, out-of-range numbers, hostile text. */
const HOSTILE_VALUES: readonly unknown[] = [
  null,
  true,
  0,
  raw('-0'),
  raw('1e400'),
  raw('-1e400'),
  raw('1267650600228229401496703205376'),
  1.5,
  [],
  {},
  ['x'],
  { $ne: null },
  '',
  '   ',
  '\t\n',
  'x'.repeat(51),
  'x'.repeat(255),
  'x'.repeat(2049),
  'x'.repeat(100_000),
  'NaN',
  'Infinity',
  '-0',
  '1e400',
  'null',
  'a\u0000b',
  'a\ud800b',
  '\udc00',
  '\udfff\ud800',
  '\ud83d\ude00',
  '\u202eevil',
  '\ufeffx',
  `a${'\u0301'.repeat(1000)}`,
  '%00',
  '<script>alert(1)</script>',
  "' OR 1=1--",
  'a\r\nSet-Cookie: x=y',
  '\\\\\\',
  '2025-02-30',
  '0000-00-00',
  'a@b',
  '+0000000',
  ' +1 (415) 555-0123 ',
];

/** Whole bodies that are not the object an operation expects, or not JSON at all. */
const HOSTILE_BODIES: readonly (readonly [string, string | Buffer])[] = [
  ['empty', ''],
  ['spaces', '   '],
  ['null', 'null'],
  ['true', 'true'],
  ['-0', '-0'],
  ['1e400', '1e400'],
  ['string', '"text"'],
  ['array', '[]'],
  ['array of object', '[{}]'],
  ['two objects', '{"a":1}{"b":2}'],
  ['lone comma', '{,}'],
  ['trailing comma', '{"a":1,}'],
  ['single quotes', "{'a':1}"],
  ['NaN literal', '{"a":NaN}'],
  ['Infinity literal', '{"a":Infinity}'],
  ['hex number', '{"a":0x10}'],
  ['leading zero', '{"a":01}'],
  ['bare fraction', '{"a":.5}'],
  ['comment', '/*c*/{}'],
  ['bad escape \\x', '{"a":"\\x41"}'],
  ['short \\u escape', '{"a":"\\u12"}'],
  ['non-hex \\u escape', '{"a":"\\uZZZZ"}'],
  ['unterminated string', '{"a":"abc}'],
  ['raw control char in string', '{"a":"tab\there"}'],
  ['raw NUL byte in string', '{"a":"x\u0000y"}'],
  ['BOM bytes then {}', Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{}')])],
  ['UTF-16LE {}', Buffer.from('{}', 'utf16le')],
  ['invalid UTF-8 byte 0xff in string', Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d])],
  ['overlong NUL 0xc0 0x80 in string', Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xc0, 0x80, 0x22, 0x7d])],
  ['CESU-8 surrogate bytes in string', Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xed, 0xa0, 0x80, 0x22, 0x7d])],
  ['truncated UTF-8 sequence', Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xe2, 0x82, 0x22, 0x7d])],
  ['__proto__ key', '{"__proto__":{"isAdmin":true}}'],
  ['constructor.prototype', '{"constructor":{"prototype":{"isAdmin":true}}}'],
  ['NUL key', '{"\\u0000":1}'],
  ['lone surrogate key', '{"\\ud800":1}'],
  ['empty key', '{"":1}'],
  ['100k arrays open', '['.repeat(100_000)],
  ['20k nested arrays', `${'['.repeat(20_000)}${']'.repeat(20_000)}`],
  ['200k nested arrays', `${'['.repeat(200_000)}${']'.repeat(200_000)}`],
  ['5k nested objects', `${'{"a":'.repeat(5000)}1${'}'.repeat(5000)}`],
  ['1 MiB + 1 string', `{"a":"${'x'.repeat(1024 * 1024)}"}`],
  ['10k keys', `{${Array.from({ length: 10_000 }, (_, i) => `"k${i}":${i}`).join(',')}}`],
];

/** Values nested `depth` levels deep (the guard allows 32). */
const nested = (depth: number, kind: 'array' | 'object') =>
  raw(kind === 'array' ? `${'['.repeat(depth)}1${']'.repeat(depth)}` : `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`);

/** `additional_data` values: depth at and past the limit, size at and past 16 KiB, odd keys and numbers. */
function additionalDataValues(seed: number): [string, unknown][] {
  const sized = (bytes: number) => ({ notes: 'x'.repeat(bytes - '{"notes":""}'.length) });
  const fixed: [string, unknown][] = [
    ['depth 30 arrays', nested(30, 'array')],
    ['depth 31 arrays', nested(31, 'array')],
    ['depth 32 arrays', nested(32, 'array')],
    ['depth 31 objects', nested(31, 'object')],
    ['depth 40 objects', nested(40, 'object')],
    ['depth 5000 arrays', nested(5000, 'array')],
    ['16 KiB exactly', sized(16 * 1024)],
    ['16 KiB + 1', sized(16 * 1024 + 1)],
    ['1e400 inside', raw('{"n":1e400}')],
    ['-0 inside', raw('{"n":-0}')],
    ['2^100 inside', raw('{"n":1267650600228229401496703205376}')],
    ['-1e400 inside', raw('{"n":[-1e400]}')],
    ['NUL value', { k: 'a\u0000' }],
    ['lone surrogate value', { k: '\ud800' }],
    ['lone low surrogate in array', { k: ['ok', '\udc00'] }],
    ['NUL key', { 'k\u0000': 1 }],
    ['lone surrogate key', { '\ud800': 1 }],
    ['lone surrogate nested key', { outer: { '\udbff': true } }],
    ['__proto__ key', raw('{"__proto__":{"x":1}}')],
    ['constructor.prototype', raw('{"constructor":{"prototype":{"x":1}}}')],
    ['constructor without prototype', { constructor: 1 }],
    ['duplicate keys', raw('{"a":1,"a":2}')],
    ['empty key', { '': 1 }],
    ['long key', { ['k'.repeat(10_000)]: 1 }],
    ['1000 keys', Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`k${i}`, i]))],
    ['hasOwnProperty key', { hasOwnProperty: 1, toString: 'x', valueOf: null }],
    ['array', []],
    ['string', 'text'],
    ['number', 5],
    ['valid surrogate pair', { emoji: '\ud83d\ude00' }],
  ];
  const random = samples(fc.dictionary(hostileString(8), fc.jsonValue({ maxDepth: 3 }), { maxKeys: 4 }), seed, 30).map(
    (value, i): [string, unknown] => [`random #${i}`, value],
  );
  return [...fixed, ...random];
}

/** Duplicate keys, BOM, truncation and proto keys on a valid body. */
function structuralVariants(body: Record<string, unknown>, fields: readonly string[], r: Rng): [string, string | Buffer][] {
  const text = toJson(body);
  const cuts = r.sample(
    Array.from({ length: text.length - 1 }, (_, i) => i + 1),
    Math.min(8, text.length - 1),
  );
  const field = fields[0];
  return [
    ...cuts.map((at): [string, string] => [`cut at ${at}/${text.length}`, text.slice(0, at)]),
    ['BOM then body', Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(text)])],
    ['body then garbage', `${text}garbage`],
    ['body twice', `${text}${text}`],
    ['body then NUL byte', `${text}\u0000`],
    ['__proto__ alongside', `${text.slice(0, -1)}${text.length > 2 ? ',' : ''}"__proto__":{"admin":true}}`],
    ['constructor.prototype alongside', `${text.slice(0, -1)}${text.length > 2 ? ',' : ''}"constructor":{"prototype":{"admin":true}}}`],
    ['unknown property', `${text.slice(0, -1)}${text.length > 2 ? ',' : ''}"nickname":"x"}`],
    ...(field ? [[`duplicate ${field} (second a number)`, `${text.slice(0, -1)},${JSON.stringify(field)}:5}`] as [string, string]] : []),
    ...(field
      ? [
          [`duplicate ${field} (second valid)`, `${text.slice(0, -1)},${JSON.stringify(field)}:${JSON.stringify(body[field])}}`] as [
            string,
            string,
          ],
        ]
      : []),
    ['UTF-16LE body', Buffer.from(text, 'utf16le')],
    ['latin1 é in body', Buffer.from(text.replace(/"([^"]*)"(?=\s*[,}])/, '"$1\u00e9"'), 'latin1')],
  ];
}

// ---------------------------------------------------------------------------------------------
// Families

/** JSON bodies: every field of every JSON operation given wrong types, huge numbers and hostile text; broken and odd whole bodies. */
export const jsonBodies: Family = {
  name: 'json bodies',
  about:
    'truncated, wrong types, 1e400, -0, NaN-like, deep nesting, long strings, NUL and lone surrogates in values and keys, __proto__, duplicate keys, BOM, invalid UTF-8',
  cases(s, seed) {
    const r = rng(seed);
    const cases: HostileCase[] = [];
    for (const op of jsonOperations(s)) {
      const isCreate = op.name === 'create contact' || op.name === 'register';
      // Every value on every field of create and register; a seeded share of them elsewhere.
      const pairs = op.fields.flatMap((field) => HOSTILE_VALUES.map((value) => [field, value] as const));
      for (const [field, value] of isCreate ? pairs : r.sample(pairs, 30)) {
        cases.push(jsonCase(s, op, `${field}=${describe(value)}`, toJson({ ...op.body(), [field]: value })));
      }
      for (const [label, payload] of isCreate ? HOSTILE_BODIES : r.sample(HOSTILE_BODIES, 15)) cases.push(jsonCase(s, op, label, payload));
      for (const [label, payload] of structuralVariants(op.body(), op.fields, r)) cases.push(jsonCase(s, op, label, payload));
      if (op.fields.includes('additional_data')) {
        const values = additionalDataValues(seed + op.name.length);
        for (const [label, value] of op.name === 'create contact' ? values : r.sample(values, 12)) {
          cases.push(jsonCase(s, op, `additional_data ${label}`, toJson({ ...op.body(), additional_data: value })));
        }
      }
    }
    // Random field text, any UTF-16 code unit included, on create.
    const create = jsonOperations(s).find((op) => op.name === 'create contact')!;
    for (const [i, text] of samples(hostileString(60), seed + 1, 40).entries()) {
      const field = r.pick(['first_name', 'last_name', 'email', 'phone', 'birthday']);
      cases.push(jsonCase(s, create, `random ${field} #${i} ${describe(text)}`, toJson({ ...create.body(), [field]: text })));
    }
    return cases;
  },
};
