import t from 'tap';
import { bearer, buildAccountsApp, loggedInUser } from '../auth/accounts.js';

t.test('GET /api/users/me returns the authenticated user and nothing else', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app, { username: 'me_myself', email: 'Me@Example.com' });
  const other = await loggedInUser(app);
  const res = await app.inject({ method: 'GET', url: '/api/users/me', headers: bearer(session.accessToken) });
  t.equal(res.statusCode, 200);
  const body = res.json();
  t.same(Object.keys(body).sort(), ['avatar', 'created_at', 'email', 'id', 'is_verified', 'username']);
  t.match(body, { id: session.id, username: 'me_myself', email: 'Me@Example.com', avatar: null, is_verified: true });
  const row = await app.db.selectFrom('users').select('created_at').where('id', '=', session.id).executeTakeFirstOrThrow();
  t.equal(body.created_at, row.created_at.toISOString());
  t.equal(res.headers['x-ratelimit-limit'], '5');
  t.equal(res.headers['x-ratelimit-remaining'], '4');

  const theirs = await app.inject({ method: 'GET', url: '/api/users/me', headers: bearer(other.accessToken) });
  t.equal(theirs.json().id, other.id);
});

t.test('GET /api/users/me without a valid access token is 401', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  for (const headers of [{}, bearer('nope'), bearer(session.refreshToken)]) {
    const res = await app.inject({ method: 'GET', url: '/api/users/me', headers });
    t.equal(res.statusCode, 401);
    t.same(res.json(), { detail: 'Not authenticated' });
    t.equal(res.headers['www-authenticate'], 'Bearer');
  }
});
