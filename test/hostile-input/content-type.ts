import { bearerHeader, describe, type Family, type HostileCase, jsonOperations, toJson } from './common.js';

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
  about:
    'missing, wrong or odd Content-Type (parameters, charset=latin1, multipart without boundary) on every body operation and on body-less ones',
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
