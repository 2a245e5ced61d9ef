import { bearerHeader, type Family, type HostileCase, jsonCase, jsonOperations, toJson } from './common.js';

/**
 * Text PostgreSQL cannot store, in requests that are otherwise valid: openapi.yaml ("Conventions")
 * fixes 422 for a NUL or an unpaired surrogate wherever it appears. Inside a filter's `in_` list
 * (JSON text within the query) a refusal as 400 `Invalid filter value` is accepted too.
 */
export const unstorableText: Family = {
  name: 'unstorable text',
  about:
    'NUL and unpaired UTF-16 surrogates in every string field, additional_data values and keys, and query values of otherwise valid requests must be 422',
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
          const value =
            f === 'email'
              ? `a${text}@example.com`
              : f === 'phone'
                ? `+1415555${text}0123`
                : f === 'birthday'
                  ? `1990-01-0${text}`
                  : `${String(body[f] ?? 'x')}${text}`;
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
            cases.push({
              ...jsonCase(s, op, `${label} as additional_data ${where}`, toJson({ ...op.body(), additional_data: value })),
              expect: unprocessable,
            });
          }
        }
      }
    }
    const auth = bearerHeader(s.accessToken);
    for (const [label, text] of texts) {
      const inList = encodeURIComponent(`first_name:in_:${JSON.stringify([text])}`);
      cases.push({
        label: `${label} in an in_ list`,
        method: 'GET',
        url: `/api/contacts/?query=${inList}`,
        headers: auth,
        expect: [400, 422],
      });
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
