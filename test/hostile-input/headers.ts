import { createHmac } from 'node:crypto';
import { craftToken, jti } from '../auth/accounts.js';
import { contactBody } from '../contacts/fixtures.js';
import { TEST_JWT_SECRET } from '../helper.js';
import { bearerHeader, type Family, type HostileCase, JSON_HEADERS, type Subjects, toJson } from './common.js';

/** A JWT from raw header and payload JSON text, HMAC-signed; for payloads JSON.stringify cannot write. */
function rawToken(header: string, payload: string, secret = TEST_JWT_SECRET): string {
  const input = `${Buffer.from(header).toString('base64url')}.${Buffer.from(payload).toString('base64url')}`;
  return `${input}.${createHmac('sha256', secret).update(input).digest('base64url')}`;
}

/** Authorization header values: broken schemes, forged, expired and oddly-claimed tokens; `true` marks those that must be 401. */
function authorizations(s: Subjects): [string, string | null, boolean?][] {
  const sub = String(s.userId);
  const now = Math.floor(Date.now() / 1000);
  const access = (claims: Record<string, unknown>, options?: { alg?: string; secret?: string }) =>
    craftToken({ sub, typ: 'access', ...claims }, options);
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
  about:
    'Authorization: missing, odd schemes and spacing, alg=none, HS512, wrong secret, expired, wrong typ, sub huge/negative/float/non-string, odd jti, huge; X-Forwarded-For, If-None-Match/If-Match, Idempotency-Key, Accept, Content-Length, Transfer-Encoding junk',
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
      cases.push({
        label: `refresh with ${label}`,
        method: 'POST',
        url: '/api/auth/refresh',
        headers: JSON_HEADERS,
        payload: toJson({ refresh_token: token }),
        expect: [401],
      });
    }
    const resetLike: [string, string][] = [
      ['reset token, sub 100000000000000000000', craftToken({ sub: '100000000000000000000', typ: 'reset' })],
      ['reset token, sub 2147483648', craftToken({ sub: '2147483648', typ: 'reset' })],
      ['reset token, no such user', craftToken({ sub: '999999', typ: 'reset' })],
    ];
    for (const [label, token] of resetLike) {
      cases.push({
        label: `reset with ${label}`,
        method: 'POST',
        url: '/api/auth/reset-password',
        headers: JSON_HEADERS,
        payload: toJson({ token, password: 'new-password-123' }),
        expect: [400],
      });
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
      ['Idempotency-Key empty', { 'idempotency-key': '' }],
      ['Idempotency-Key 10k', { 'idempotency-key': 'k'.repeat(10_000) }],
      ['Idempotency-Key non-ASCII', { 'idempotency-key': 'cl\u00e9' }],
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
      {
        method: 'POST',
        url: '/api/contacts/',
        headers: { ...bearerHeader(s.accessToken), ...JSON_HEADERS },
        payload: toJson(contactBody()),
      },
      {
        method: 'PATCH',
        url: `/api/contacts/${s.contactId}`,
        headers: { ...bearerHeader(s.accessToken), ...JSON_HEADERS },
        payload: '{"last_name":"Doe"}',
      },
      {
        method: 'POST',
        url: '/api/auth/login',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        payload: `username=${s.username}&password=wrong-password`,
      },
      { method: 'GET', url: '/healthz' },
    ];
    for (const target of targets) {
      const withBody = target.payload !== undefined;
      for (const [label, extra] of [...odd, ...(withBody ? framing : [])]) {
        cases.push({
          ...target,
          label: `${label} on ${target.method} ${target.url.split('?')[0]}`,
          headers: { ...target.headers, ...extra },
        });
      }
    }
    return cases;
  },
};
