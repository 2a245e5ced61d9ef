import { bearerHeader, type Family, type HostileCase, JSON_HEADERS } from './common.js';

/** Methods Node's HTTP parser accepts, beyond those the spec declares. */
const EXTRA_METHODS = ['HEAD', 'OPTIONS', 'TRACE', 'PROPFIND', 'MKCOL', 'COPY', 'LOCK', 'SEARCH', 'PURGE', 'REPORT', 'QUERY'] as const;
const DECLARABLE = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;

/** HEAD, OPTIONS (bare and as CORS preflights) and unusual verbs on every path, and the declarable verbs each path lacks. */
export const methods: Family = {
  name: 'methods',
  about:
    'HEAD, OPTIONS (bare, preflight, preflight from another origin), TRACE, WebDAV verbs, QUERY on every path; verbs a path does not declare',
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
      cases.push({
        label: `OPTIONS ${url} preflight`,
        method: 'OPTIONS',
        url,
        headers: { origin: 'http://app.test', 'access-control-request-method': 'POST' },
      });
      cases.push({
        label: `OPTIONS ${url} preflight from another origin`,
        method: 'OPTIONS',
        url,
        headers: { origin: 'http://evil.example', 'access-control-request-method': 'DELETE' },
      });
      cases.push({ label: `OPTIONS ${url} with Origin only`, method: 'OPTIONS', url, headers: { origin: 'http://app.test' } });
      for (const method of DECLARABLE.filter((m) => !allowed.includes(m))) {
        cases.push({ label: `${method} ${url} (not declared)`, method, url, headers: { ...auth, ...JSON_HEADERS }, payload: '{}' });
      }
    }
    return cases;
  },
};
