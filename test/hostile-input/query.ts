import fc from 'fast-check';
import { craftToken } from '../auth/accounts.js';
import { bearerHeader, decodeSafely, describe, encodeText, type Family, type HostileCase, hostileString, samples } from './common.js';

/** Query values that are numbers only to JavaScript: infinite. `skip`, `limit` and `time_range` must refuse them (422). */
export const INFINITE = new Set(['1e400', '-1e400', 'Infinity', '-Infinity', '1'.repeat(400)]);

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
  const fieldArb = fc.constantFrom(
    'first_name',
    'last_name',
    'email',
    'phone',
    'birthday',
    'created_at',
    'updated_at',
    'nickname',
    'First_Name',
    '',
    '__proto__',
  );
  const opArb = fc.constantFrom('eq', 'in_', 'like', 'ilike', 'startswith', 'endswith', 'contains', 'gt', 'lt', 'between', 'gte', '');
  const valueArb = fc.oneof(
    hostileString(12),
    fc.constantFrom(
      '1990-01-01',
      '2025-01-01T10:00:00Z',
      '1990-13-01',
      '["a","b"]',
      '["a"',
      '1990-01-01,1991-01-01',
      '+1 (415)',
      '%',
      '\\%',
    ),
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
  about:
    'skip, limit, time_range with 1e400/Infinity/NaN/hex/overflow; the filter language with unterminated lists, 10k conditions, lone %, invalid percent-encoding, %00, surrogate encodings; verify and reset tokens',
  cases(s, seed) {
    const auth = bearerHeader(s.accessToken);
    const get = (label: string, url: string, headers: Record<string, string> = auth): HostileCase => ({
      label,
      method: 'GET',
      url,
      headers,
    });
    const cases: HostileCase[] = [];
    for (const value of NUMBERS) {
      const expect = INFINITE.has(value) ? { expect: [422] } : {};
      for (const [name, path] of [
        ['list', '/api/contacts/'],
        ['upcoming', '/api/contacts/get-upcoming-birthday'],
      ] as const) {
        for (const param of name === 'list' ? ['skip', 'limit'] : ['skip', 'limit', 'time_range']) {
          cases.push({ ...get(`${name} ${param}=${describe(value)}`, `${path}?${param}=${value}`), ...expect });
        }
      }
    }
    const shapes = [
      'skip=1&skip=2',
      'skip[]=1',
      'skip[a]=1',
      'skip',
      '=1',
      '&&&',
      ';',
      'a=%',
      'foo=1',
      'skip=0&limit=1000&query=smith&extra=1',
      'limit=1&limit=1000',
      '__proto__=1',
      'constructor=1',
      'query',
      'query=',
      'query=&query=smith',
      'query[]=smith',
      `query=${'a'.repeat(100_000)}`,
      'skip=1#frag',
      '?skip=1',
      'skip=1&&limit=2',
      'SKIP=1',
      'skip%00=1',
      '%73kip=1',
    ];
    for (const shape of shapes) {
      cases.push(get(`list ?${shape.slice(0, 40)}`, `/api/contacts/?${shape}`));
      cases.push(get(`upcoming ?${shape.slice(0, 40)}`, `/api/contacts/get-upcoming-birthday?${shape}`));
    }
    for (const query of filterTricks()) cases.push(get(`filter ${describe(decodeSafely(query))}`, `/api/contacts/?query=${query}`));
    for (const query of generatedFilters(seed, 200))
      cases.push(get(`generated filter ${describe(decodeSafely(query))}`, `/api/contacts/?query=${query}&limit=5`));
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
      for (const path of ['/healthz', '/readyz', '/openapi.json', '/openapi.yaml'])
        cases.push(get(`${path} ?${shape}`, `${path}?${shape}`, {}));
    }
    return cases;
  },
};
