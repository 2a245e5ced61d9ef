import { contactBody } from '../contacts/fixtures.js';
import { bearerHeader, describe, type Family, type HostileCase, JSON_HEADERS, toJson } from './common.js';
import { INFINITE } from './query.js';

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
      cases.push({
        label: `put id ${describe(id)}`,
        method: 'PUT',
        url,
        headers: { ...auth, ...JSON_HEADERS },
        payload: toJson(contactBody()),
        ...expectFor(id),
      });
      cases.push({
        label: `patch id ${describe(id)}`,
        method: 'PATCH',
        url,
        headers: { ...auth, ...JSON_HEADERS },
        payload: '{"first_name":"Pat"}',
        ...expectFor(id),
      });
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
