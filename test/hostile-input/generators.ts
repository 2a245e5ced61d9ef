/**
 * Seeded generators of hostile requests for test/hostile-input/hostile-input.test.ts. Each family returns the
 * same cases for the same seed and subjects, so a failure report can be reproduced request by request.
 */
import { createHmac } from 'node:crypto';
import fc from 'fast-check';
import { credentials, craftToken, jti } from '../auth/accounts.js';
import { contactBody } from '../contacts/fixtures.js';
import { seededRandom, TEST_JWT_SECRET } from '../helper.js';

export interface HostileCase {
  /** What is odd about the request, for failure reports. */
  label: string;
  method: string;
  url: string;
  headers?: Record<string, string>;
  payload?: string | Buffer;
  /** Bytes written to a socket as they are; `method` and `url` then only describe them. */
  raw?: Buffer;
  /** Statuses the contract fixes for this request; absent, any status below 500 will do. */
  expect?: readonly number[];
}

/** What the generated requests act on: a real logged-in user, their contact, and another user's. */
export interface Subjects {
  userId: number;
  username: string;
  email: string;
  password: string;
  accessToken: string;
  refreshToken: string;
  contactId: number;
  /** A contact of the user that the DELETE cases may remove. */
  spareContactId: number;
  otherUserId: number;
  otherContactId: number;
}

export interface Family {
  name: string;
  /** What the family varies, for the test's messages. */
  about: string;
  cases: (subjects: Subjects, seed: number) => HostileCase[];
}

// ---------------------------------------------------------------------------------------------
// Seeded choice

interface Rng {
  int(min: number, max: number): number;
  pick<T>(items: readonly T[]): T;
  sample<T>(items: readonly T[], count: number): T[];
}

function rng(seed: number): Rng {
  const next = seededRandom(seed);
  const int = (min: number, max: number) => min + Math.floor(next() * (max - min + 1));
  return {
    int,
    pick: (items) => items[int(0, items.length - 1)]!,
    sample(items, count) {
      const pool = [...items];
      for (let i = pool.length - 1; i > 0; i--) {
        const j = int(0, i);
        [pool[i], pool[j]] = [pool[j]!, pool[i]!];
      }
      return pool.slice(0, count);
    },
  };
}

/** fast-check values for a seed: the same list every run. */
function samples<T>(arbitrary: fc.Arbitrary<T>, seed: number, count: number): T[] {
  return fc.sample(arbitrary, { seed, numRuns: count });
}

/** Any UTF-16 code unit, lone surrogates and NUL included. */
const codeUnit = fc.integer({ min: 0, max: 0xffff }).map((n) => String.fromCharCode(n));
const hostileString = (maxLength: number) =>
  fc.string({ unit: fc.oneof({ weight: 6, arbitrary: codeUnit }, { weight: 1, arbitrary: fc.constantFrom('\u0000', '\ud800', '\udc00', '%', '\\', '"', ',', ':', '[', ']') }), maxLength });

// ---------------------------------------------------------------------------------------------
// JSON text with parts JSON.stringify cannot write (1e400, -0, duplicate keys)

/** A JSON fragment written as is. */
class Raw {
  constructor(readonly text: string) {}
}
const raw = (text: string) => new Raw(text);

/** JSON text; `Raw` values are copied verbatim. JSON.stringify already escapes NUL and lone surrogates as \u0000 / \ud800. */
function toJson(value: unknown): string {
  if (value instanceof Raw) return value.text;
  if (Array.isArray(value)) return `[${value.map(toJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    return `{${Object.entries(value).map(([key, item]) => `${JSON.stringify(key)}:${toJson(item)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

/** Short, printable description of a value for labels. */
function describe(value: unknown): string {
  const text = value instanceof Raw ? value.text : (JSON.stringify(value) ?? String(value));
  return text.length > 40 ? `${text.slice(0, 30)}…(${text.length} chars)` : text;
}

const JSON_HEADERS = { 'content-type': 'application/json' };

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

/** An operation that takes a JSON body, with a body it accepts and the fields worth varying. */
interface JsonOperation {
  name: string;
  method: string;
  url: string;
  secured: boolean;
  body: () => Record<string, unknown>;
  fields: readonly string[];
}

function jsonOperations(s: Subjects): JsonOperation[] {
  const resetToken = () => craftToken({ sub: String(s.otherUserId), typ: 'reset' });
  const contactFields = ['first_name', 'last_name', 'email', 'phone', 'birthday', 'additional_data', 'id', 'created_at', 'updated_at'];
  return [
    { name: 'register', method: 'POST', url: '/api/auth/register', secured: false, body: () => ({ ...credentials() }), fields: ['username', 'email', 'password'] },
    { name: 'request-verification', method: 'POST', url: '/api/auth/request-verification', secured: false, body: () => ({ email: s.email }), fields: ['email'] },
    { name: 'refresh', method: 'POST', url: '/api/auth/refresh', secured: false, body: () => ({ refresh_token: s.refreshToken }), fields: ['refresh_token'] },
    { name: 'forgot-password', method: 'POST', url: '/api/auth/forgot-password', secured: false, body: () => ({ email: 'nobody@example.com' }), fields: ['email'] },
    { name: 'reset-password', method: 'POST', url: '/api/auth/reset-password', secured: false, body: () => ({ token: resetToken(), password: 'new-password-123' }), fields: ['token', 'password'] },
    { name: 'logout', method: 'POST', url: '/api/auth/logout', secured: true, body: () => ({}), fields: [] },
    { name: 'create contact', method: 'POST', url: '/api/contacts/', secured: true, body: () => contactBody(), fields: contactFields },
    { name: 'replace contact', method: 'PUT', url: `/api/contacts/${s.contactId}`, secured: true, body: () => contactBody(), fields: contactFields },
    { name: 'patch contact', method: 'PATCH', url: `/api/contacts/${s.contactId}`, secured: true, body: () => ({ first_name: 'Pat' }), fields: contactFields },
  ];
}

function jsonCase(s: Subjects, op: JsonOperation, label: string, payload: string | Buffer, headers: Record<string, string> = JSON_HEADERS): HostileCase {
  return {
    label: `${op.name}: ${label}`,
    method: op.method,
    url: op.url,
    headers: { ...headers, ...(op.secured ? bearerHeader(s.accessToken) : {}) },
    payload,
  };
}

const bearerHeader = (token: string) => ({ authorization: `Bearer ${token}` });

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
    ...(field ? [[`duplicate ${field} (second valid)`, `${text.slice(0, -1)},${JSON.stringify(field)}:${JSON.stringify(body[field])}}`] as [string, string]] : []),
    ['UTF-16LE body', Buffer.from(text, 'utf16le')],
    ['latin1 é in body', Buffer.from(text.replace(/"([^"]*)"(?=\s*[,}])/, '"$1\u00e9"'), 'latin1')],
  ];
}

// ---------------------------------------------------------------------------------------------
// Families

/** JSON bodies: every field of every JSON operation given wrong types, huge numbers and hostile text; broken and odd whole bodies. */
export const jsonBodies: Family = {
  name: 'json bodies',
  about: 'truncated, wrong types, 1e400, -0, NaN-like, deep nesting, long strings, NUL and lone surrogates in values and keys, __proto__, duplicate keys, BOM, invalid UTF-8',
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

const CONTENT_TYPES: readonly (string | null)[] = [
  null,
  '',
  'application/json',
  'APPLICATION/JSON',
  'application/json; charset=utf-8',
  'application/json; charset=latin1',
  'application/json; charset=utf-16le',
  'application/json;',
  'application/json ; x=y',
  'application/json, text/plain',
  ' application/json',
  'application/jsonx',
  'application/vnd.api+json',
  'application/problem+json',
  'application/*',
  '*/*',
  'text/json',
  'text/plain',
  'text/html; charset=utf-8',
  'application/xml',
  'application/x-www-form-urlencoded',
  'application/x-www-form-urlencoded; charset=latin1',
  'multipart/form-data',
  'multipart/form-data; boundary=',
  'multipart/form-data; boundary="q"',
  'multipart/mixed; boundary=x',
  'application/octet-stream',
  'image/png',
  `application/${'x'.repeat(5000)}`,
  ';;;',
  '/',
  'application/json; charset="',
  'application/json; boundary=x',
];

/** Wrong, missing and odd Content-Type on every operation that takes a body, and on some that take none. */
export const contentTypes: Family = {
  name: 'content types',
  about: 'missing, wrong or odd Content-Type (parameters, charset=latin1, multipart without boundary) on every body operation and on body-less ones',
  cases(s) {
    const cases: HostileCase[] = [];
    const targets = [
      ...jsonOperations(s).map((op) => ({ name: op.name, method: op.method, url: op.url, secured: op.secured, body: toJson(op.body()) })),
      { name: 'login', method: 'POST', url: '/api/auth/login', secured: false, body: `username=${s.username}&password=wrong-password` },
      { name: 'delete contact (no body declared)', method: 'DELETE', url: '/api/contacts/2147483647', secured: true, body: '{"a":1}' },
      { name: 'list contacts (GET with body)', method: 'GET', url: '/api/contacts/', secured: true, body: '{bad' },
    ];
    for (const target of targets) {
      for (const type of CONTENT_TYPES) {
        cases.push({
          label: `${target.name}: Content-Type ${type === null ? '(none)' : describe(type)}`,
          method: target.method,
          url: target.url,
          headers: { ...(type === null ? {} : { 'content-type': type }), ...(target.secured ? bearerHeader(s.accessToken) : {}) },
          payload: type?.includes('utf-16') ? Buffer.from(target.body, 'utf16le') : target.body,
        });
      }
    }
    return cases;
  },
};

function multipart(boundary: string, parts: string[], { close = true, eol = '\r\n' } = {}): string {
  return `${parts.map((part) => `--${boundary}${eol}${part}${eol}`).join('')}${close ? `--${boundary}--${eol}` : ''}`;
}
const field = (name: string, value: string, eol = '\r\n') => `Content-Disposition: form-data; name="${name}"${eol}${eol}${value}`;

/** Login form bodies, urlencoded and multipart: cut short, huge, missing fields, files, boundary garbage. */
export const forms: Family = {
  name: 'form bodies',
  about: 'login forms urlencoded and multipart: cut short at many offsets, huge fields, file parts, missing and repeated fields, boundary garbage, invalid percent-encoding and UTF-8',
  cases(s, seed) {
    const r = rng(seed);
    const login = (label: string, payload: string | Buffer, contentType: string): HostileCase => ({
      label: `login ${label}`,
      method: 'POST',
      url: '/api/auth/login',
      headers: { 'content-type': contentType },
      payload,
    });
    const urlencoded = 'application/x-www-form-urlencoded';
    const forms: [string, string | Buffer][] = [
      ['empty', ''],
      ['=', '='],
      ['&&&', '&&&'],
      ['name only', 'username'],
      ['empty values', 'username=&password='],
      ['username only', `username=${s.username}`],
      ['password only', 'password=x'],
      ['repeated username', `username=${s.username}&username=b&password=${s.password}`],
      ['username[]', `username[]=${s.username}&password=x`],
      ['username[a]', `username[a]=${s.username}&password=x`],
      ['%5B%5D in name', `username%5B%5D=${s.username}&password=x`],
      ['%zz name', '%zz=1&username=a&password=b'],
      ['%zz value', 'username=%zz&password=x'],
      ['lone %', 'username=%&password=%'],
      ['half escape %E0%A4%A', 'username=%E0%A4%A&password=x'],
      ['CESU surrogate %ED%A0%80', 'username=%ED%A0%80&password=x'],
      ['overlong NUL %C0%80', 'username=%C0%80&password=x'],
      ['%00 in username', 'username=a%00b&password=x'],
      ['%00 in password', `username=${s.username}&password=a%00b`],
      ['%2500', 'username=%2500&password=x'],
      ['plus signs', 'username=+++&password=+++'],
      ['unknown field', `username=${s.username}&password=x&extra=1`],
      ['__proto__ field', `__proto__=x&username=${s.username}&password=x`],
      ['constructor[prototype]', `constructor[prototype][admin]=1&username=a&password=b`],
      ['hasOwnProperty field', 'hasOwnProperty=1&username=a&password=b'],
      ['semicolon separators', `username=${s.username};password=x`],
      ['1000 fields', Array.from({ length: 1000 }, (_, i) => `f${i}=${i}`).join('&')],
      ['username 255', `username=${'u'.repeat(255)}&password=x`],
      ['password 1025', `username=a&password=${'p'.repeat(1025)}`],
      ['1 MiB + 1', `username=a&password=${'p'.repeat(1024 * 1024)}`],
      ['raw latin1 é', Buffer.from('username=\u00e9&password=x', 'latin1')],
      ['raw 0xff byte', Buffer.concat([Buffer.from('username='), Buffer.from([0xff, 0xfe]), Buffer.from('&password=x')])],
      ['real credentials then garbage', `username=${s.username}&password=${s.password}&&&=&%`],
      ['email with NUL', `username=${encodeURIComponent(s.email)}%00&password=${s.password}`],
      ['JSON text', '{"username":"a","password":"b"}'],
    ];
    const cases = forms.map(([label, payload]) => login(`urlencoded ${label}`, payload, urlencoded));
    cases.push(login('urlencoded with charset=latin1', 'username=%E9&password=x', `${urlencoded}; charset=latin1`));

    const b = 'XyZ';
    const valid = multipart(b, [field('username', s.username), field('password', s.password)]);
    // Cut short: every offset near the closing delimiter, where parsers are most fragile, and a seeded spread of the rest.
    const tail = Array.from({ length: 16 }, (_, i) => valid.length - 1 - i);
    const offsets = [...new Set([...tail, ...r.sample(Array.from({ length: valid.length - 17 }, (_, i) => i + 1), 40)])].sort((x, y) => x - y);
    // The final CRLF after the close delimiter is optional; any shorter cut is a form cut short: 400.
    for (const at of offsets) {
      const cut = login(`multipart cut at ${at}/${valid.length}`, valid.slice(0, at), `multipart/form-data; boundary=${b}`);
      cases.push(at < valid.length - 2 ? { ...cut, expect: [400] } : cut);
    }
    const type = (boundary: string) => `multipart/form-data; boundary=${boundary}`;
    const parts = [field('username', s.username), field('password', 'wrong-password')];
    const multiparts: [string, string | Buffer, string, (readonly number[])?][] = [
      ['valid, wrong password', multipart(b, parts), type(b)],
      ['no closing delimiter', multipart(b, parts, { close: false }), type(b), [400]],
      ['LF line endings', multipart(b, [field('username', 'a', '\n'), field('password', 'b', '\n')], { eol: '\n' }), type(b), [400]],
      ['boundary mismatch', multipart('Other', parts), type(b), [400]],
      ['quoted boundary', multipart(b, parts), `multipart/form-data; boundary="${b}"`],
      ['boundary of 71 chars', multipart('b'.repeat(71), parts), type('b'.repeat(71))],
      // RFC 2046 allows 70 characters; a longer boundary is an unusable media type.
      ['boundary of 1000 chars', multipart('b'.repeat(1000), parts), type('b'.repeat(1000)), [400, 415]],
      ['empty boundary', multipart('', parts), 'multipart/form-data; boundary='],
      ['boundary with spaces', multipart('a b', parts), 'multipart/form-data; boundary="a b"'],
      ['boundary "--"', multipart('--', parts), type('--')],
      ['two boundary params', multipart(b, parts), `${type(b)}; boundary=other`],
      ['only the closing delimiter', `--${b}--\r\n`, type(b)],
      ['empty body', '', type(b)],
      ['preamble and epilogue', `preamble\r\n${multipart(b, parts)}epilogue`, type(b)],
      ['no Content-Disposition', multipart(b, ['Content-Type: text/plain\r\n\r\nx', ...parts]), type(b)],
      ['Content-Disposition without name', multipart(b, ['Content-Disposition: form-data\r\n\r\nx', ...parts]), type(b)],
      ['name with escaped quote', multipart(b, ['Content-Disposition: form-data; name="user\\"name"\r\n\r\nx', ...parts]), type(b)],
      ['file part', multipart(b, [...parts, 'Content-Disposition: form-data; name="avatar"; filename="a.txt"\r\nContent-Type: text/plain\r\n\r\nhello']), type(b)],
      ['file part named username', multipart(b, ['Content-Disposition: form-data; name="username"; filename="u.txt"\r\n\r\nann', field('password', 'x')]), type(b)],
      ['filename* parameter', multipart(b, [...parts, "Content-Disposition: form-data; name=\"f\"; filename*=UTF-8''%e2%82%ac.txt\r\n\r\nx"]), type(b)],
      ['JSON part', multipart(b, ['Content-Disposition: form-data; name="username"\r\nContent-Type: application/json\r\n\r\n{"a":1}', field('password', 'x')]), type(b)],
      ['base64 transfer encoding', multipart(b, ['Content-Disposition: form-data; name="username"\r\nContent-Transfer-Encoding: base64\r\n\r\nYW5u', field('password', 'x')]), type(b)],
      ['11 fields', multipart(b, Array.from({ length: 11 }, (_, i) => field(`f${i}`, 'x'))), type(b)],
      ['username missing', multipart(b, [field('password', 'x')]), type(b)],
      ['password missing', multipart(b, [field('username', 'x')]), type(b)],
      ['repeated username', multipart(b, [field('username', 'a'), field('username', 'b'), field('password', 'x')]), type(b)],
      ['field of 4097 bytes', multipart(b, [field('username', 'u'.repeat(4097)), field('password', 'x')]), type(b)],
      ['field of 1 MiB', multipart(b, [field('username', 'u'.repeat(1024 * 1024)), field('password', 'x')]), type(b)],
      ['__proto__ field', multipart(b, [field('__proto__', 'x'), ...parts]), type(b)],
      ['constructor field', multipart(b, [field('constructor', 'x'), ...parts]), type(b)],
      ['NUL in value', multipart(b, [field('username', 'a\u0000b'), field('password', 'x')]), type(b)],
      ['NUL in field name', multipart(b, [field('user\u0000name', 'a'), field('password', 'x')]), type(b)],
      ['invalid UTF-8 in value', Buffer.concat([Buffer.from(`--${b}\r\n${field('username', '')}`), Buffer.from([0xff, 0xed, 0xa0, 0x80]), Buffer.from(`\r\n--${b}\r\n${field('password', 'x')}\r\n--${b}--\r\n`)]), type(b)],
      ['nested multipart/mixed', multipart(b, ['Content-Disposition: form-data; name="username"\r\nContent-Type: multipart/mixed; boundary=inner\r\n\r\n--inner\r\n\r\nx\r\n--inner--', field('password', 'x')]), type(b)],
      ['2000 part headers', multipart(b, [`${Array.from({ length: 2000 }, (_, i) => `X-H${i}: v`).join('\r\n')}\r\n${field('username', 'a')}`, field('password', 'x')]), type(b)],
      ['part header of 100k', multipart(b, [`X-Big: ${'h'.repeat(100_000)}\r\n${field('username', 'a')}`, field('password', 'x')]), type(b)],
      ['garbage between parts', `--${b}\r\n${field('username', 'a')}\r\ngarbage--${b}x\r\n--${b}\r\n${field('password', 'x')}\r\n--${b}--\r\n`, type(b)],
    ];
    for (const [label, payload, contentType, expect] of multiparts) {
      cases.push({ ...login(`multipart ${label}`, payload, contentType), ...(expect ? { expect } : {}) });
    }
    for (const [i, text] of samples(hostileString(40), seed + 2, 20).entries()) {
      cases.push(login(`multipart random username #${i} ${describe(text)}`, multipart(b, [field('username', text), field('password', 'x')]), type(b)));
    }
    return cases;
  },
};

/** Query values that are numbers only to JavaScript: infinite. `skip`, `limit` and `time_range` must refuse them (422). */
const INFINITE = new Set(['1e400', '-1e400', 'Infinity', '-Infinity', '1'.repeat(400)]);

/** Numeric query values: out of range, not numbers, numbers JavaScript reads loosely. */
const NUMBERS: readonly string[] = [
  '',
  '%20',
  '0',
  '-0',
  '1',
  '-1',
  '1.5',
  '1e2',
  '1e400',
  '-1e400',
  'Infinity',
  '-Infinity',
  'NaN',
  '0x10',
  '0b1',
  '0o7',
  '1_000',
  '2147483647',
  '2147483648',
  '9007199254740993',
  '99999999999999999999',
  '1000',
  '1001',
  '366',
  '367',
  'true',
  'null',
  '%00',
  '1%00',
  '%ED%A0%80',
  '%',
  '%zz',
  '%EF%BC%91',
  '+1',
  '%2B1',
  '1,2',
  '[1]',
  'abc',
  `${'0'.repeat(1000)}1`,
  '1'.repeat(400),
];

/** Filter expressions: every trick of the filter language, hand-picked. */
function filterTricks(): string[] {
  const e = encodeText;
  const conditions = (n: number) => Array.from({ length: n }, (_, i) => `first_name:eq:a${i}`).join(',');
  return [
    e('last_name:eq:Smith'),
    e('first_name:in_:["John","Jane"],birthday:between:1980-01-01,1990-12-31'),
    e('smith,created_at:gt:2025-01-01T10:00:00Z'),
    e('first_name:in_:["a"'),
    e('first_name:in_:['),
    e('first_name:in_:["a\\"]'),
    e('first_name:in_:[1,2]'),
    e('first_name:in_:{}'),
    e('first_name:in_:"x"'),
    e('first_name:in_:[["a"]]'),
    e(`first_name:in_:${'['.repeat(900)}${']'.repeat(900)}`),
    e('first_name:in_:[]'),
    e('first_name:in_:[""]'),
    e(`first_name:in_:["${'x'.repeat(1980)}"]`),
    e('first_name:in_:["\\u0000"]'),
    e('first_name:in_:["\\ud800"]'),
    e('first_name:in_:["\\udc00x"]'),
    e('phone:in_:["()"]'),
    e(conditions(20)),
    e(conditions(21)),
    e(conditions(10_000)),
    e(`first_name:eq:${'x'.repeat(1990)}`),
    '%',
    '%25',
    '%2',
    '%zz',
    'first_name:eq:%',
    'first_name:eq:%E0%A4%A',
    'first_name:eq:%00',
    'first_name:eq:%C0%80',
    'first_name:eq:%ED%A0%80',
    '%ED%B0%80',
    'first_name:eq:%uD800',
    'first_name%00:eq:x',
    '%00',
    e(','),
    e(',,,'),
    e(':'),
    e('::'),
    e(':::'),
    e('a:b:c'),
    e('first_name::x'),
    e(':eq:x'),
    e('first_name:eq:'),
    e('first_name:eq:x,'),
    e('first_name:eq:x,,'),
    e(',first_name:eq:x'),
    e('smith,'),
    e('smith,,first_name:eq:x'),
    e('first_name:eq:x,smith'),
    e('birthday:between:1990-01-01'),
    e('birthday:between:,'),
    e('birthday:between:a,b,c'),
    e('birthday:eq:0000-01-01'),
    e('birthday:eq:0001-01-01'),
    e('birthday:gt:9999-12-31'),
    e('birthday:eq:10000-01-01'),
    e('birthday:eq:1990-02-29'),
    e('birthday:eq:-001-01-01'),
    e('created_at:gt:1e400'),
    e('created_at:eq:2025-01-01T25:00:00Z'),
    e('created_at:eq:2025-02-29'),
    e('created_at:lt:0001-01-01'),
    e('created_at:gt:9999-12-31'),
    e('created_at:eq:0001-01-01T00:00:00+23:59'),
    e('created_at:eq:9999-12-31T23:59:59.999-23:59'),
    e('created_at:eq:2025-01-01T10:00:00.123456789012345678901234567890Z'),
    e('created_at:eq:2025-01-01T10:00:00'),
    'created_at:eq:2025-01-01T10:00:00+01:00',
    e('updated_at:between:2020-01-01,2019-01-01'),
    e('updated_at:between:2020-01-01T00:00:00Z,9999-12-31T23:59:59.999Z'),
    e('phone:eq:()'),
    e('phone:eq:---'),
    e('phone:like:+1%'),
    e('first_name:like:\\'),
    e('first_name:like:%'),
    e('first_name:like:\\%'),
    e('first_name:ilike:['),
    e('email:contains:%_\\'),
    e('email:endswith:\\'),
    e('constructor:eq:x'),
    e('__proto__:eq:x'),
    e('toString:eq:x'),
    e('hasOwnProperty:eq:x'),
    e('first_name:constructor:x'),
    e('first_name:__proto__:x'),
    e('first_name:toString:x'),
    e('First_Name:eq:x'),
    e('first_name:EQ:x'),
    e('first_name:gte:x'),
    e('birthday:like:1990%'),
    e('nickname:eq:x'),
    e('%_\\'),
    e('\\'),
    e('\u00e9\u202e\ud83d\ude00'),
    e(' '),
    e('\t'),
    '+',
    'a+b',
    e('"'),
    e("'"),
    e('first_name:eq:x#y'),
    'first_name:eq:a&query=last_name:eq:b',
  ];
}

/** Filter expressions from a small grammar with hostile pieces, then mangled. */
function generatedFilters(seed: number, count: number): string[] {
  const fieldArb = fc.constantFrom('first_name', 'last_name', 'email', 'phone', 'birthday', 'created_at', 'updated_at', 'nickname', 'First_Name', '', '__proto__');
  const opArb = fc.constantFrom('eq', 'in_', 'like', 'ilike', 'startswith', 'endswith', 'contains', 'gt', 'lt', 'between', 'gte', '');
  const valueArb = fc.oneof(
    hostileString(12),
    fc.constantFrom('1990-01-01', '2025-01-01T10:00:00Z', '1990-13-01', '["a","b"]', '["a"', '1990-01-01,1991-01-01', '+1 (415)', '%', '\\%'),
    fc.array(hostileString(4), { maxLength: 3 }).map((items) => JSON.stringify(items)),
  );
  const condition = fc.oneof(
    fc.tuple(fieldArb, opArb, valueArb).map(([f, o, v]) => `${f}:${o}:${v}`),
    hostileString(10),
  );
  const expression = fc.array(condition, { minLength: 1, maxLength: 6 }).map((parts) => parts.join(','));
  return samples(expression, seed, count).map((text, i) => {
    // Half go out well encoded; the rest keep raw `%`, `&`, `#` or spaces that a careless client would send.
    if (i % 2 === 0) return encodeText(text);
    return encodeText(text).replace(/%25/g, '%').replace(/%2C/g, ',').replace(/%3A/g, ':');
  });
}

/** Query strings on every operation that reads one: numbers, filters, tokens, repeated and unknown parameters. */
export const queryStrings: Family = {
  name: 'query strings',
  about: 'skip, limit, time_range with 1e400/Infinity/NaN/hex/overflow; the filter language with unterminated lists, 10k conditions, lone %, invalid percent-encoding, %00, surrogate encodings; verify and reset tokens',
  cases(s, seed) {
    const auth = bearerHeader(s.accessToken);
    const get = (label: string, url: string, headers: Record<string, string> = auth): HostileCase => ({ label, method: 'GET', url, headers });
    const cases: HostileCase[] = [];
    for (const value of NUMBERS) {
      const expect = INFINITE.has(value) ? { expect: [422] } : {};
      for (const [name, path] of [['list', '/api/contacts/'], ['upcoming', '/api/contacts/get-upcoming-birthday']] as const) {
        for (const param of name === 'list' ? ['skip', 'limit'] : ['skip', 'limit', 'time_range']) {
          cases.push({ ...get(`${name} ${param}=${describe(value)}`, `${path}?${param}=${value}`), ...expect });
        }
      }
    }
    const shapes = ['skip=1&skip=2', 'skip[]=1', 'skip[a]=1', 'skip', '=1', '&&&', ';', 'a=%', 'foo=1', 'skip=0&limit=1000&query=smith&extra=1', 'limit=1&limit=1000', '__proto__=1', 'constructor=1', 'query', 'query=', 'query=&query=smith', 'query[]=smith', `query=${'a'.repeat(100_000)}`, 'skip=1#frag', '?skip=1', 'skip=1&&limit=2', 'SKIP=1', 'skip%00=1', '%73kip=1'];
    for (const shape of shapes) {
      cases.push(get(`list ?${shape.slice(0, 40)}`, `/api/contacts/?${shape}`));
      cases.push(get(`upcoming ?${shape.slice(0, 40)}`, `/api/contacts/get-upcoming-birthday?${shape}`));
    }
    for (const query of filterTricks()) cases.push(get(`filter ${describe(decodeSafely(query))}`, `/api/contacts/?query=${query}`));
    for (const query of generatedFilters(seed, 200)) cases.push(get(`generated filter ${describe(decodeSafely(query))}`, `/api/contacts/?query=${query}&limit=5`));
    for (const query of ['smith', 'first_name:eq:a']) {
      for (const value of ['1e400', '-1', 'Infinity']) {
        cases.push({ ...get(`filter and skip=${value}`, `/api/contacts/?query=${query}&skip=${value}&limit=10`), expect: [422] });
      }
      cases.push(get('filter and skip=1001', `/api/contacts/?query=${query}&skip=1001&limit=10`));
    }
    const verify = craftToken({ sub: String(s.userId), typ: 'verify' });
    const tokens: [string, string, (readonly number[])?][] = [
      ['empty', ''],
      ['x', 'x'],
      ['a.b.c', 'a.b.c'],
      ['2049 chars', 'x'.repeat(2049)],
      ['%00', '%00'],
      ['%ED%A0%80', '%ED%A0%80'],
      ['%', '%'],
      ['valid verify token', verify],
      ['verify token with NUL appended', `${verify}%00`],
      ['tampered verify token', `${verify.slice(0, -2)}AA`],
      ['alg none verify token', craftToken({ sub: String(s.userId), typ: 'verify' }, { alg: 'none' })],
      ['access token as verify token', s.accessToken],
      ['verify token, sub 100000000000000000000', craftToken({ sub: '100000000000000000000', typ: 'verify' }), [400]],
      ['verify token, sub 2147483648', craftToken({ sub: '2147483648', typ: 'verify' }), [400]],
      ['verify token, sub 999999', craftToken({ sub: '999999', typ: 'verify' })],
      ['verify token, expired', craftToken({ sub: String(s.userId), typ: 'verify', exp: 1 })],
      ['twice', `${verify}&token=${verify}`],
      ['token[]', `x&token[]=y`],
    ];
    for (const [label, token, expect] of tokens) {
      cases.push({ ...get(`verify-email token ${label}`, `/api/auth/verify-email?token=${token}`, {}), ...(expect ? { expect } : {}) });
      cases.push(get(`reset page token ${label}`, `/reset-password?token=${token}`, {}));
    }
    for (const shape of ['', 'token', 'tok=1', 'token=a&extra=1', '%%%']) {
      cases.push(get(`verify-email ?${shape}`, `/api/auth/verify-email?${shape}`, {}));
      cases.push(get(`reset page ?${shape}`, `/reset-password?${shape}`, {}));
      for (const path of ['/healthz', '/readyz', '/openapi.json', '/openapi.yaml']) cases.push(get(`${path} ?${shape}`, `${path}?${shape}`, {}));
    }
    return cases;
  },
};

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/** Percent-encodes text for a URL; a lone surrogate, which UTF-8 cannot carry, goes as its JSON escape (`\ud800`). */
function encodeText(text: string): string {
  return encodeURIComponent(text.replace(LONE_SURROGATE, (ch) => `\\u${ch.charCodeAt(0).toString(16)}`));
}

function decodeSafely(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/** Contact ids that are no int32, and spellings of a real id (`id`) that JavaScript reads as a number. */
function contactIds(id: number): string[] {
  return [
    '0',
    '-1',
    '1e400',
    '2147483647',
    '2147483648',
    '99999999999',
    '-2147483649',
    '9007199254740993',
    '1'.repeat(100),
    '1'.repeat(101),
    'Infinity',
    '-Infinity',
    'NaN',
    'null',
    'true',
    'abc',
    '%2e%2e',
    '..',
    '.',
    '%00',
    '%ED%A0%80',
    '%',
    '%zz',
    '%25',
    '[1]',
    '%7B1%7D',
    'get-upcoming-birthday',
    'me',
    `${id}.0`,
    `${id}.5`,
    `${id}e0`,
    `0x${id.toString(16)}`,
    `0000${id}`,
    `+${id}`,
    `%2B${id}`,
    `%20${id}`,
    `${id}%20`,
    `${id}%00`,
    `${id};x=y`,
    `${id},${id}`,
  ];
}

/** Path parameters and path shapes: every contact operation with ids that are no int32, and odd URLs. */
export const paths: Family = {
  name: 'path params',
  about: '/api/contacts/{id} with 1e400, -1, 99999999999, %2e%2e, %00 and more on GET/PUT/PATCH/DELETE; odd path shapes',
  cases(s) {
    const auth = bearerHeader(s.accessToken);
    const cases: HostileCase[] = [];
    // An infinite id is out of the int32 range like any other: 422.
    const expectFor = (id: string) => (INFINITE.has(id) ? { expect: [422] } : {});
    for (const id of [...contactIds(s.contactId), String(s.otherContactId)]) {
      const url = `/api/contacts/${id}`;
      cases.push({ label: `get id ${describe(id)}`, method: 'GET', url, headers: auth, ...expectFor(id) });
      cases.push({ label: `put id ${describe(id)}`, method: 'PUT', url, headers: { ...auth, ...JSON_HEADERS }, payload: toJson(contactBody()), ...expectFor(id) });
      cases.push({ label: `patch id ${describe(id)}`, method: 'PATCH', url, headers: { ...auth, ...JSON_HEADERS }, payload: '{"first_name":"Pat"}', ...expectFor(id) });
    }
    // DELETE aims at the spare contact: the first spelling that reaches it removes it, the rest meet a 404.
    for (const id of [...contactIds(s.spareContactId), String(s.otherContactId)]) {
      cases.push({ label: `delete id ${describe(id)}`, method: 'DELETE', url: `/api/contacts/${id}`, headers: auth, ...expectFor(id) });
    }
    const shapes = [
      `/api/contacts/${s.contactId}/`,
      `/api/contacts//${s.contactId}`,
      `//api/contacts/${s.contactId}`,
      `/api//contacts/${s.contactId}`,
      `/api/contacts/${s.contactId}/extra`,
      `/api/contacts/${s.contactId}/..`,
      '/api/contacts/../users/me',
      '/api/contacts/%2e%2e/users/me',
      '/api/contacts/..%2fusers%2fme',
      `/api/%63ontacts/${s.contactId}`,
      `/API/contacts/${s.contactId}`,
      `/api/contacts/${s.contactId}?`,
      `/api/contacts/${s.contactId}#x`,
      `/api/contacts/${s.contactId}?query=%`,
      '/api/contacts/?#',
      '/api/contacts',
      '/api/users/me/',
      '/api/users/me/x',
      '/api/users/%6de',
      '/api/users/me%00',
      '/api/users/me%2F',
      '/api/auth/login/',
      '/healthz/x',
      '/healthz?x=%',
      '/openapi.json?',
      '/docs/',
      '/docs/static/../../package.json',
      '/docs/static/%2e%2e/%2e%2e/package.json',
      '/docs/static/..%2f..%2fpackage.json',
      '/docs/json',
      '/docs/yaml',
      '/docs/static/index.html%00',
      '/redoc/x',
      '/reset-password/x',
      '/%',
      '/%00',
      `/${'a'.repeat(10_000)}`,
      `/api/${'a/'.repeat(1000)}`,
      '/\\api\\contacts',
      `/api/contacts/${s.contactId}\\`,
      '/api/contacts/%C3%A9',
      '/api/contacts/%E2%80%AE1',
      '/api/contacts/%ff',
      '/api/contacts/%',
      '/api/contacts/%%',
      '*',
    ];
    for (const url of shapes) cases.push({ label: `path ${describe(url)}`, method: 'GET', url, headers: auth });
    return cases;
  },
};

/** A JWT from raw header and payload JSON text, HMAC-signed; for payloads JSON.stringify cannot write. */
function rawToken(header: string, payload: string, secret = TEST_JWT_SECRET): string {
  const input = `${Buffer.from(header).toString('base64url')}.${Buffer.from(payload).toString('base64url')}`;
  return `${input}.${createHmac('sha256', secret).update(input).digest('base64url')}`;
}

/** Authorization header values: broken schemes, forged, expired and oddly-claimed tokens; `true` marks those that must be 401. */
function authorizations(s: Subjects): [string, string | null, boolean?][] {
  const sub = String(s.userId);
  const now = Math.floor(Date.now() / 1000);
  const access = (claims: Record<string, unknown>, options?: { alg?: string; secret?: string }) => craftToken({ sub, typ: 'access', ...claims }, options);
  const header = '{"alg":"HS256","typ":"JWT"}';
  const payload = (fields: string) => `{"iat":${now},"exp":${now + 900},"typ":"access","jti":"${jti()}",${fields}}`;
  return [
    ['no Authorization', null],
    ['empty', ''],
    ['Bearer', 'Bearer'],
    ['Bearer + space', 'Bearer '],
    ['two spaces', `Bearer  ${s.accessToken}`],
    ['lowercase bearer', `bearer ${s.accessToken}`],
    ['BEARER', `BEARER ${s.accessToken}`],
    ['tab separator', `Bearer\t${s.accessToken}`],
    ['trailing junk', `Bearer ${s.accessToken} junk`],
    ['two tokens comma', `Bearer ${s.accessToken}, Bearer ${s.accessToken}`],
    ['Basic', `Basic ${Buffer.from('a:b').toString('base64')}`],
    ['Token scheme', `Token ${s.accessToken}`],
    ['garbage base64', 'Bearer !!!!####$$$$'],
    ['a.b.c', 'Bearer a.b.c'],
    ['...', 'Bearer ...'],
    ['two segments', `Bearer ${s.accessToken.split('.').slice(0, 2).join('.')}`],
    ['four segments', `Bearer ${s.accessToken}.x`],
    ['alg none', `Bearer ${access({}, { alg: 'none' })}`],
    ['HS384', `Bearer ${access({}, { alg: 'HS384' })}`],
    ['HS512', `Bearer ${access({}, { alg: 'HS512' })}`],
    ['RS256 header, HMAC signature', `Bearer ${rawToken('{"alg":"RS256","typ":"JWT"}', payload(`"sub":"${sub}"`))}`],
    ['wrong secret', `Bearer ${access({}, { secret: 'another-secret-that-is-at-least-32-characters' })}`],
    ['expired', `Bearer ${access({ iat: now - 3600, exp: now - 1800 })}`],
    ['nbf in the future', `Bearer ${access({ nbf: now + 3600 })}`],
    ['exp 1e400', `Bearer ${rawToken(header, `{"sub":"${sub}","typ":"access","jti":"${jti()}","iat":${now},"exp":1e400}`)}`],
    ['exp as string', `Bearer ${access({ exp: String(now + 900) })}`],
    ['typ refresh', `Bearer ${access({ typ: 'refresh' })}`],
    ['typ verify', `Bearer ${access({ typ: 'verify' })}`],
    ['typ reset', `Bearer ${access({ typ: 'reset' })}`],
    ['typ missing', `Bearer ${access({ typ: undefined })}`],
    ['typ ACCESS', `Bearer ${access({ typ: 'ACCESS' })}`],
    ['sub 100000000000000000000', `Bearer ${access({ sub: '100000000000000000000' })}`, true],
    ['sub 2147483648', `Bearer ${access({ sub: '2147483648' })}`, true],
    ['sub 9007199254740993', `Bearer ${access({ sub: '9007199254740993' })}`, true],
    ['sub 999999 (no such user)', `Bearer ${access({ sub: '999999' })}`],
    ['sub -1', `Bearer ${access({ sub: '-1' })}`],
    ['sub 1.5', `Bearer ${access({ sub: '1.5' })}`],
    ['sub 0', `Bearer ${access({ sub: '0' })}`],
    ['sub 01', `Bearer ${access({ sub: `0${sub}` })}`],
    ['sub number', `Bearer ${access({ sub: s.userId })}`],
    ['sub 1e400 number', `Bearer ${rawToken(header, payload('"sub":1e400'))}`],
    ['sub missing', `Bearer ${access({ sub: undefined })}`],
    ['sub lone surrogate', `Bearer ${access({ sub: '\ud800' })}`],
    ['sub object', `Bearer ${access({ sub: { id: s.userId } })}`],
    ['jti missing', `Bearer ${access({ jti: undefined })}`],
    ['jti empty', `Bearer ${access({ jti: '' })}`],
    ['jti not hex', `Bearer ${access({ jti: 'zzzzzzzz-zzzz' })}`],
    ['jti number', `Bearer ${access({ jti: 123 })}`],
    ['jti far future', `Bearer ${access({ jti: 'ffffffff-ffff-7fff-bfff-ffffffffffff' })}`],
    ['jti 10k chars', `Bearer ${access({ jti: `0000000a-${'f'.repeat(10_000)}` })}`],
    ['duplicate sub keys', `Bearer ${rawToken(header, payload(`"sub":"999999","sub":"${sub}"`))}`],
    ['payload not JSON', `Bearer ${rawToken(header, 'not json')}`],
    ['payload an array', `Bearer ${rawToken(header, '[]')}`],
    ['header not JSON', `Bearer ${rawToken('nope', payload(`"sub":"${sub}"`))}`],
    ['token of 8 KiB', `Bearer ${'a'.repeat(8192)}`],
    ['token of 100 KiB', `Bearer ${'a'.repeat(100 * 1024)}`],
    ['token with NUL', `Bearer ${s.accessToken}\u0000`],
    ['token with é', `Bearer ${s.accessToken}\u00e9`],
  ];
}

/** Every secured operation, each reached with a request that would otherwise succeed. */
function securedRequests(s: Subjects): Omit<HostileCase, 'label'>[] {
  return [
    { method: 'GET', url: '/api/users/me' },
    { method: 'POST', url: '/api/auth/logout' },
    { method: 'GET', url: '/api/contacts/?limit=5' },
    { method: 'POST', url: '/api/contacts/', headers: JSON_HEADERS, payload: toJson(contactBody()) },
    { method: 'GET', url: '/api/contacts/get-upcoming-birthday?time_range=30' },
    { method: 'GET', url: `/api/contacts/${s.contactId}` },
    { method: 'PUT', url: `/api/contacts/${s.contactId}`, headers: JSON_HEADERS, payload: toJson(contactBody()) },
    { method: 'PATCH', url: `/api/contacts/${s.contactId}`, headers: JSON_HEADERS, payload: '{"last_name":"Doe"}' },
    // An id that does not exist: a token that passes must not delete the contact the other cases use.
    { method: 'DELETE', url: '/api/contacts/2147483647' },
  ];
}

/** Authorization variants on every secured operation; other headers (forwarding, conditionals, negotiation, framing) on a few. */
export const headers: Family = {
  name: 'headers',
  about: 'Authorization: missing, odd schemes and spacing, alg=none, HS512, wrong secret, expired, wrong typ, sub huge/negative/float/non-string, odd jti, huge; X-Forwarded-For, If-None-Match/If-Match, Accept, Content-Length, Transfer-Encoding junk',
  cases(s) {
    const cases: HostileCase[] = [];
    for (const [label, value, unauthenticated] of authorizations(s)) {
      for (const request of securedRequests(s)) {
        cases.push({
          ...request,
          label: `Authorization ${label} on ${request.method} ${request.url.split('?')[0]}`,
          headers: { ...request.headers, ...(value === null ? {} : { authorization: value }) },
          ...(unauthenticated ? { expect: [401] } : {}),
        });
      }
    }
    const refreshLike: [string, string][] = [
      ['refresh token, sub 100000000000000000000', craftToken({ sub: '100000000000000000000', typ: 'refresh' })],
      ['refresh token, sub 2147483648', craftToken({ sub: '2147483648', typ: 'refresh' })],
      ['refresh token, no such user', craftToken({ sub: '999999', typ: 'refresh' })],
      ['access token as refresh token', s.accessToken],
    ];
    for (const [label, token] of refreshLike) {
      cases.push({ label: `refresh with ${label}`, method: 'POST', url: '/api/auth/refresh', headers: JSON_HEADERS, payload: toJson({ refresh_token: token }), expect: [401] });
    }
    const resetLike: [string, string][] = [
      ['reset token, sub 100000000000000000000', craftToken({ sub: '100000000000000000000', typ: 'reset' })],
      ['reset token, sub 2147483648', craftToken({ sub: '2147483648', typ: 'reset' })],
      ['reset token, no such user', craftToken({ sub: '999999', typ: 'reset' })],
    ];
    for (const [label, token] of resetLike) {
      cases.push({ label: `reset with ${label}`, method: 'POST', url: '/api/auth/reset-password', headers: JSON_HEADERS, payload: toJson({ token, password: 'new-password-123' }), expect: [400] });
    }

    const odd: [string, Record<string, string>][] = [
      ['X-Forwarded-For garbage', { 'x-forwarded-for': 'garbage' }],
      ['X-Forwarded-For empty list', { 'x-forwarded-for': ',,,,' }],
      ['X-Forwarded-For 3000 hops', { 'x-forwarded-for': Array.from({ length: 3000 }, (_, i) => `10.0.${i >> 8}.${i & 255}`).join(', ') }],
      ['X-Forwarded-For bad IPv4', { 'x-forwarded-for': '999.1.1.1' }],
      ['X-Forwarded-For IPv6 zone', { 'x-forwarded-for': 'fe80::1%eth0' }],
      ['X-Forwarded-For bracketed with port', { 'x-forwarded-for': '[::1]:80' }],
      ['X-Forwarded-For CIDR', { 'x-forwarded-for': '2001:db8::/64' }],
      ['X-Forwarded-For 10k chars', { 'x-forwarded-for': 'a'.repeat(10_000) }],
      ['Forwarded junk', { forwarded: 'for="_gazonk";proto=ftp;by=;;' }],
      ['X-Real-IP junk', { 'x-real-ip': '::::' }],
      ['If-None-Match *', { 'if-none-match': '*' }],
      ['If-None-Match weak', { 'if-none-match': 'W/"x"' }],
      ['If-None-Match lone quote', { 'if-none-match': '"' }],
      ['If-None-Match 10k', { 'if-none-match': `"${'x'.repeat(10_000)}"` }],
      ['If-Match *', { 'if-match': '*' }],
      ['If-Match junk', { 'if-match': 'junk, "", W/' }],
      ['If-Modified-Since junk', { 'if-modified-since': 'yesterday' }],
      ['If-Unmodified-Since epoch', { 'if-unmodified-since': 'Thu, 01 Jan 1970 00:00:00 GMT' }],
      ['Range bytes=0-0', { range: 'bytes=0-0' }],
      ['Range junk', { range: 'bytes=junk' }],
      ['Accept text/html', { accept: 'text/html' }],
      ['Accept application/xml only', { accept: 'application/xml' }],
      ['Accept junk q', { accept: '*/*;q=junk' }],
      ['Accept empty', { accept: '' }],
      ['Accept-Encoding junk', { 'accept-encoding': 'gzip;q=junk, br, x' }],
      ['Accept-Charset latin1', { 'accept-charset': 'latin1' }],
      ['X-Request-Id empty', { 'x-request-id': '' }],
      ['X-Request-Id 10k', { 'x-request-id': 'r'.repeat(10_000) }],
      ['Origin evil', { origin: 'http://evil.example' }],
      ['Origin null', { origin: 'null' }],
      ['Origin allowed', { origin: 'http://app.test' }],
      ['Origin 5k', { origin: `http://${'o'.repeat(5000)}` }],
      ['Cookie junk', { cookie: '=;;;a=%;b="' }],
      ['Host empty', { host: '' }],
      ['Host junk port', { host: 'evil:99999' }],
      ['Expect 100-continue', { expect: '100-continue' }],
      ['X-HTTP-Method-Override DELETE', { 'x-http-method-override': 'DELETE' }],
      ['Connection upgrade h2c', { connection: 'Upgrade, HTTP2-Settings', upgrade: 'h2c' }],
    ];
    const framing: [string, Record<string, string>][] = [
      ['Content-Length larger than body', { 'content-length': '500' }],
      ['Content-Length smaller than body', { 'content-length': '3' }],
      ['Content-Length -1', { 'content-length': '-1' }],
      ['Content-Length abc', { 'content-length': 'abc' }],
      ['Content-Length 1e20', { 'content-length': '100000000000000000000' }],
      ['Transfer-Encoding chunked (unchunked body)', { 'transfer-encoding': 'chunked' }],
      ['Content-Encoding gzip (plain body)', { 'content-encoding': 'gzip' }],
      ['Content-Encoding br', { 'content-encoding': 'br' }],
    ];
    const targets: Omit<HostileCase, 'label'>[] = [
      { method: 'GET', url: '/api/contacts/?limit=5', headers: bearerHeader(s.accessToken) },
      { method: 'GET', url: `/api/contacts/${s.contactId}`, headers: bearerHeader(s.accessToken) },
      { method: 'POST', url: '/api/contacts/', headers: { ...bearerHeader(s.accessToken), ...JSON_HEADERS }, payload: toJson(contactBody()) },
      { method: 'PATCH', url: `/api/contacts/${s.contactId}`, headers: { ...bearerHeader(s.accessToken), ...JSON_HEADERS }, payload: '{"last_name":"Doe"}' },
      { method: 'POST', url: '/api/auth/login', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: `username=${s.username}&password=wrong-password` },
      { method: 'GET', url: '/healthz' },
    ];
    for (const target of targets) {
      const withBody = target.payload !== undefined;
      for (const [label, extra] of [...odd, ...(withBody ? framing : [])]) {
        cases.push({ ...target, label: `${label} on ${target.method} ${target.url.split('?')[0]}`, headers: { ...target.headers, ...extra } });
      }
    }
    return cases;
  },
};

/** Methods Node's HTTP parser accepts, beyond those the spec declares. */
const EXTRA_METHODS = ['HEAD', 'OPTIONS', 'TRACE', 'PROPFIND', 'MKCOL', 'COPY', 'LOCK', 'SEARCH', 'PURGE', 'REPORT', 'QUERY'] as const;
const DECLARABLE = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;

/** HEAD, OPTIONS (bare and as CORS preflights) and unusual verbs on every path, and the declarable verbs each path lacks. */
export const methods: Family = {
  name: 'methods',
  about: 'HEAD, OPTIONS (bare, preflight, preflight from another origin), TRACE, WebDAV verbs, QUERY on every path; verbs a path does not declare',
  cases(s) {
    const declared: Record<string, readonly string[]> = {
      '/api/auth/register': ['POST'],
      '/api/auth/verify-email?token=x': ['GET'],
      '/api/auth/request-verification': ['POST'],
      '/api/auth/login': ['POST'],
      '/api/auth/refresh': ['POST'],
      '/api/auth/logout': ['POST'],
      '/api/auth/forgot-password': ['POST'],
      '/api/auth/reset-password': ['POST'],
      '/api/users/me': ['GET'],
      '/api/contacts/': ['GET', 'POST'],
      '/api/contacts/get-upcoming-birthday': ['GET'],
      [`/api/contacts/${s.contactId}`]: ['GET', 'PUT', 'PATCH', 'DELETE'],
      '/reset-password': ['GET'],
      '/healthz': ['GET'],
      '/readyz': ['GET'],
      '/openapi.json': ['GET'],
      '/openapi.yaml': ['GET'],
      '/docs': ['GET'],
      '/redoc': ['GET'],
      '/nope': [],
    };
    const auth = bearerHeader(s.accessToken);
    const cases: HostileCase[] = [];
    for (const [url, allowed] of Object.entries(declared)) {
      for (const method of EXTRA_METHODS) {
        cases.push({ label: `${method} ${url}`, method, url, headers: auth });
      }
      cases.push({ label: `HEAD ${url} without token`, method: 'HEAD', url });
      cases.push({ label: `OPTIONS ${url} preflight`, method: 'OPTIONS', url, headers: { origin: 'http://app.test', 'access-control-request-method': 'POST' } });
      cases.push({ label: `OPTIONS ${url} preflight from another origin`, method: 'OPTIONS', url, headers: { origin: 'http://evil.example', 'access-control-request-method': 'DELETE' } });
      cases.push({ label: `OPTIONS ${url} with Origin only`, method: 'OPTIONS', url, headers: { origin: 'http://app.test' } });
      for (const method of DECLARABLE.filter((m) => !allowed.includes(m))) {
        cases.push({ label: `${method} ${url} (not declared)`, method, url, headers: { ...auth, ...JSON_HEADERS }, payload: '{}' });
      }
    }
    return cases;
  },
};

/** An HTTP/1.1 request as bytes. */
function request(head: string, body: string | Buffer = ''): Buffer {
  return Buffer.concat([Buffer.from(head.replace(/\n/g, '\r\n'), 'latin1'), typeof body === 'string' ? Buffer.from(body, 'latin1') : body]);
}

/** Bytes Node's HTTP parser must judge: framing, request lines and headers no client library would send. */
export const rawHttp: Family = {
  name: 'raw http',
  about: 'real sockets: unknown verbs, broken chunked encoding, Transfer-Encoding garbage, Content-Length mismatch, invalid UTF-8 and control bytes, header and URL overflow (431), seeded byte mutations of valid requests',
  cases(s, seed) {
    const auth = `Authorization: Bearer ${s.accessToken}\n`;
    const json = toJson(contactBody());
    const curated: [string, Buffer][] = [
      ['unknown verb FOO', request('FOO /api/contacts/ HTTP/1.1\nHost: x\nConnection: close\n\n')],
      ['lowercase verb get', request('get /api/contacts/ HTTP/1.1\nHost: x\nConnection: close\n\n')],
      ['verb with digits', request('G3T /healthz HTTP/1.1\nHost: x\nConnection: close\n\n')],
      ['CONNECT', request('CONNECT example.com:443 HTTP/1.1\nHost: example.com:443\nConnection: close\n\n')],
      ['broken chunk size', request(`POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nTransfer-Encoding: chunked\nConnection: close\n\nzz\n{}\n0\n\n`)],
      ['chunk longer than declared', request(`POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nTransfer-Encoding: chunked\nConnection: close\n\n1\n{}\n0\n\n`)],
      ['chunked without terminator', request(`POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nTransfer-Encoding: chunked\nConnection: close\n\n2\n{}\n`)],
      ['chunk size overflow', request(`POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nTransfer-Encoding: chunked\nConnection: close\n\nffffffffffffffffff\n{}\n0\n\n`)],
      ['chunk extension garbage', request(`POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nTransfer-Encoding: chunked\nConnection: close\n\n2;;;===\n{}\n0\n\n`)],
      ['Transfer-Encoding gzip, garbage', request(`POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nTransfer-Encoding: gzip, garbage\nConnection: close\n\n{}`)],
      ['Transfer-Encoding identity', request(`POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nTransfer-Encoding: identity\nContent-Length: 2\nConnection: close\n\n{}`)],
      ['Content-Length and Transfer-Encoding', request(`POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nContent-Length: 2\nTransfer-Encoding: chunked\nConnection: close\n\n2\n{}\n0\n\n`)],
      ['two Content-Lengths', request(`POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nContent-Length: 2\nContent-Length: 3\nConnection: close\n\n{}`)],
      ['Content-Length abc', request(`POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nContent-Length: abc\nConnection: close\n\n{}`)],
      ['Content-Length -1', request(`POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nContent-Length: -1\nConnection: close\n\n{}`)],
      ['Content-Length larger than body', request(`POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nContent-Length: 100\nConnection: close\n\n{}`)],
      ['Content-Length smaller than body', request(`POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nContent-Length: ${json.length - 5}\nConnection: close\n\n${json}`)],
      ['header of 20 KB (431)', request(`GET /api/contacts/ HTTP/1.1\nHost: x\n${auth}X-Big: ${'a'.repeat(20_000)}\nConnection: close\n\n`)],
      ['URL of 20 KB (431)', request(`GET /api/contacts/?query=${'a'.repeat(20_000)} HTTP/1.1\nHost: x\n${auth}Connection: close\n\n`)],
      ['2000 headers', request(`GET /api/contacts/ HTTP/1.1\nHost: x\n${auth}${Array.from({ length: 2000 }, (_, i) => `X-H${i}: v\n`).join('')}Connection: close\n\n`)],
      ['control byte in header value', request(`GET /api/contacts/ HTTP/1.1\nHost: x\n${auth}X-Bad: a\u0001b\nConnection: close\n\n`)],
      ['NUL in header value', request(`GET /api/contacts/ HTTP/1.1\nHost: x\n${auth}X-Bad: a\u0000b\nConnection: close\n\n`)],
      ['space before colon', request(`GET /api/contacts/ HTTP/1.1\nHost: x\n${auth}X-Bad : v\nConnection: close\n\n`)],
      ['obsolete line folding', request(`GET /api/contacts/ HTTP/1.1\nHost: x\n${auth}X-Folded: a\n b\nConnection: close\n\n`)],
      ['header without colon', request(`GET /api/contacts/ HTTP/1.1\nHost: x\n${auth}NoColon\nConnection: close\n\n`)],
      ['bare LF line endings', Buffer.from(`GET /healthz HTTP/1.1\nHost: x\nConnection: close\n\n`)],
      ['bare CR line endings', Buffer.from(`GET /healthz HTTP/1.1\rHost: x\rConnection: close\r\r`)],
      ['no Host', request('GET /healthz HTTP/1.1\nConnection: close\n\n')],
      ['two Hosts', request('GET /healthz HTTP/1.1\nHost: a\nHost: b\nConnection: close\n\n')],
      ['HTTP/1.0 without Host', request('GET /healthz HTTP/1.0\n\n')],
      ['HTTP/2.0 in request line', request('GET /healthz HTTP/2.0\nHost: x\nConnection: close\n\n')],
      ['HTTP/9.9', request('GET /healthz HTTP/9.9\nHost: x\nConnection: close\n\n')],
      ['HTTP/0.9 style', request('GET /healthz\n\n')],
      ['garbage line', request('GARBAGE\n\n')],
      ['empty request', request('\n\n')],
      ['TLS ClientHello bytes', Buffer.from([0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03, 0x03])],
      ['HTTP/2 preface', Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n')],
      ['raw 0xff in URL', Buffer.concat([Buffer.from('GET /api/contacts/?query='), Buffer.from([0xff, 0xfe]), request(` HTTP/1.1\nHost: x\n${auth}Connection: close\n\n`)])],
      ['raw UTF-8 in URL', Buffer.concat([Buffer.from('GET /api/contacts/?query='), Buffer.from('\u00e9', 'utf8'), request(` HTTP/1.1\nHost: x\n${auth}Connection: close\n\n`)])],
      ['space in URL', request(`GET /api/con tacts/ HTTP/1.1\nHost: x\n${auth}Connection: close\n\n`)],
      ['absolute-form URL', request(`GET http://evil.example/api/contacts/ HTTP/1.1\nHost: x\n${auth}Connection: close\n\n`)],
      ['asterisk-form GET', request('GET * HTTP/1.1\nHost: x\nConnection: close\n\n')],
      ['percent garbage in path', request(`GET /api/contacts/%%%/ HTTP/1.1\nHost: x\n${auth}Connection: close\n\n`)],
      ['invalid UTF-8 in JSON body', (() => {
        const body = Buffer.concat([Buffer.from('{"first_name":"'), Buffer.from([0xff, 0xc0, 0x80, 0xed, 0xa0, 0x80]), Buffer.from('"}')]);
        return request(`POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nContent-Length: ${body.length}\nConnection: close\n\n`, body);
      })()],
      ['multipart cut short', (() => {
        const body = '--XyZ\r\nContent-Disposition: form-data; name="username"\r\n\r\nann';
        return request(`POST /api/auth/login HTTP/1.1\nHost: x\nContent-Type: multipart/form-data; boundary=XyZ\nContent-Length: ${body.length}\nConnection: close\n\n`, body);
      })()],
      ['Expect 100-continue then nothing', request(`POST /api/auth/register HTTP/1.1\nHost: x\nContent-Type: application/json\nExpect: 100-continue\nContent-Length: 50\nConnection: close\n\n`)],
      ['Expect junk', request(`POST /api/auth/register HTTP/1.1\nHost: x\nContent-Type: application/json\nExpect: 100-banana\nContent-Length: 2\nConnection: close\n\n{}`)],
      ['Upgrade websocket', request(`GET /api/contacts/ HTTP/1.1\nHost: x\n${auth}Upgrade: websocket\nConnection: Upgrade\n\n`)],
      ['Authorization 20 KB', request(`GET /api/contacts/ HTTP/1.1\nHost: x\nAuthorization: Bearer ${'a'.repeat(20_000)}\nConnection: close\n\n`)],
      ['two Authorization headers', request(`GET /api/contacts/ HTTP/1.1\nHost: x\n${auth}Authorization: Bearer x\nConnection: close\n\n`)],
      ['two Content-Types', request(`POST /api/auth/register HTTP/1.1\nHost: x\nContent-Type: application/json\nContent-Type: text/plain\nContent-Length: 2\nConnection: close\n\n{}`)],
    ];
    const cases: HostileCase[] = curated.map(([label, bytes]) => ({ label, ...describeRaw(bytes), raw: bytes }));

    // Seeded byte mutations of valid requests: flips, insertions of parser-significant bytes, deletions.
    const r = rng(seed);
    const bases = [
      request(`GET /api/contacts/?skip=0&limit=5 HTTP/1.1\nHost: x\n${auth}Connection: close\n\n`),
      request(`POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nContent-Length: ${json.length}\nConnection: close\n\n`, json),
      request(`POST /api/auth/login HTTP/1.1\nHost: x\nContent-Type: application/x-www-form-urlencoded\nContent-Length: 31\nConnection: close\n\nusername=someone&password=wrong`),
      request(`POST /api/auth/refresh HTTP/1.1\nHost: x\nContent-Type: application/json\nTransfer-Encoding: chunked\nConnection: close\n\n12\n{"refresh_token":1\n1\n}\n0\n\n`),
    ];
    const special = [0x00, 0x0a, 0x0d, 0x20, 0x22, 0x25, 0x2c, 0x3a, 0x3b, 0x7f, 0x80, 0xc0, 0xed, 0xff];
    for (let i = 0; i < 160; i++) {
      const base = Buffer.from(r.pick(bases));
      // Most mutations hit the head, where the parser decides; some hit the body.
      const headEnd = base.indexOf('\r\n\r\n');
      const at = r.int(0, r.int(0, 3) === 0 ? base.length - 1 : headEnd);
      const kind = r.pick(['flip', 'insert', 'delete', 'truncate'] as const);
      let mutated: Buffer;
      if (kind === 'flip') {
        mutated = Buffer.from(base);
        mutated[at] = r.pick(special);
      } else if (kind === 'insert') {
        mutated = Buffer.concat([base.subarray(0, at), Buffer.from([r.pick(special)]), base.subarray(at)]);
      } else if (kind === 'delete') {
        mutated = Buffer.concat([base.subarray(0, at), base.subarray(at + 1)]);
      } else {
        mutated = base.subarray(0, at);
      }
      cases.push({ label: `mutation #${i}: ${kind} at ${at}`, ...describeRaw(mutated), raw: mutated });
    }
    return cases;
  },
};

/** Method and target of raw bytes, for reports. */
function describeRaw(bytes: Buffer): { method: string; url: string } {
  const line = bytes.subarray(0, Math.min(bytes.length, 200)).toString('latin1').split(/\r?\n|\r/, 1)[0] ?? '';
  const [method = '?', url = '?'] = line.split(' ');
  return { method: method.replace(/[^\x21-\x7e]/g, '?'), url: url.replace(/[^\x21-\x7e]/g, '?').slice(0, 120) };
}

/**
 * Text PostgreSQL cannot store, in requests that are otherwise valid: INTERFACE.md fixes 422 for a
 * NUL or an unpaired surrogate wherever it appears. Inside a filter's `in_` list (JSON text within
 * the query) a refusal as 400 `Invalid filter value` is accepted too.
 */
export const unstorableText: Family = {
  name: 'unstorable text',
  about: 'NUL and unpaired UTF-16 surrogates in every string field, additional_data values and keys, and query values of otherwise valid requests must be 422',
  cases(s) {
    const texts: [string, string][] = [
      ['NUL', 'a\u0000b'],
      ['lone high surrogate \\ud800', 'a\ud800b'],
      ['lone low surrogate \\udc00', '\udc00'],
      ['two high surrogates', '\udbff\udbff'],
      ['reversed pair', '\udfff\ud800'],
      // PGlite mis-encodes this one (found by the random family): 500 on the embedded backend.
      ['lone surrogate before Hangul and a backslash', '\u8ff0\udf6d\ucb90\\'],
    ];
    const cases: HostileCase[] = [];
    const unprocessable = [422];
    for (const op of jsonOperations(s)) {
      const strings = op.fields.filter((f) => !['additional_data', 'id'].includes(f));
      for (const f of strings) {
        for (const [label, text] of texts) {
          const body = op.body();
          // Where a format applies, keep the rest of the value valid so only the bad text is wrong.
          const value = f === 'email' ? `a${text}@example.com` : f === 'phone' ? `+1415555${text}0123` : f === 'birthday' ? `1990-01-0${text}` : `${String(body[f] ?? 'x')}${text}`;
          cases.push({ ...jsonCase(s, op, `${label} in ${f}`, toJson({ ...body, [f]: value })), expect: unprocessable });
        }
      }
      if (op.fields.includes('additional_data')) {
        for (const [label, text] of texts) {
          const variants: [string, unknown][] = [
            ['value', { note: text }],
            ['key', { [text]: 1 }],
            ['nested key', { outer: { [`k${text}`]: true } }],
            ['array element', { list: ['ok', text] }],
          ];
          for (const [where, value] of variants) {
            cases.push({ ...jsonCase(s, op, `${label} as additional_data ${where}`, toJson({ ...op.body(), additional_data: value })), expect: unprocessable });
          }
        }
      }
    }
    const auth = bearerHeader(s.accessToken);
    for (const [label, text] of texts) {
      const inList = encodeURIComponent(`first_name:in_:${JSON.stringify([text])}`);
      cases.push({ label: `${label} in an in_ list`, method: 'GET', url: `/api/contacts/?query=${inList}`, headers: auth, expect: [400, 422] });
    }
    for (const [label, url] of [
      ['%00 in a filter value', '/api/contacts/?query=first_name:eq:a%00b'],
      ['%00 in a bare term', '/api/contacts/?query=a%00b'],
      ['%00 in skip', '/api/contacts/?skip=%00'],
      ['%00 in the verify token', '/api/auth/verify-email?token=a%00b'],
      ['%00 in the reset page token', '/reset-password?token=a%00b'],
      ['%00 in the contact id', '/api/contacts/1%00'],
    ] as const) {
      cases.push({ label, method: 'GET', url, headers: auth, expect: unprocessable });
    }
    cases.push({
      label: '%00 in the login username',
      method: 'POST',
      url: '/api/auth/login',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      payload: `username=${s.username}%00&password=${s.password}`,
      expect: unprocessable,
    });
    return cases;
  },
};

export const FAMILIES: readonly Family[] = [jsonBodies, contentTypes, forms, queryStrings, paths, headers, methods, rawHttp, unstorableText];
