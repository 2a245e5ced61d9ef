/**
 * The SDK's refresh-on-401 middleware against the real service, with access tokens that live 2 s:
 * one refresh and one retry after expiry, one refresh shared by concurrent calls, and no loop when
 * the refresh is refused or the retry is answered 401 again.
 */
import t, { type Test } from 'tap';
import { createContactsClient, login, tokenSession, type ContactsClient, type TokenSession } from '../../sdk/src/index.js';
import { buildAccountsApp, decodeClaims, verifiedUser } from '../auth/accounts.js';

// Not 1 s: exp is whole seconds (iat + ttl, floored), so a 1 s token can be minted already expired.
const ACCESS_TOKEN_TTL = '2';

const contact = { first_name: 'Ada', last_name: 'Lovelace', email: 'ada@example.com', phone: '+14155550123', birthday: '1990-12-10' };

interface Harness {
  client: ContactsClient;
  session: TokenSession;
  /** `METHOD /path status` of every request that reached fetch, retries included. */
  sent: string[];
  /** How many times the client called its refresh function. */
  refreshes: () => number;
}

/** A running service, a verified user logged in through the SDK, and a client that records its traffic. */
async function harness(t: Test, refresh?: (client: ContactsClient, session: TokenSession) => Promise<string | null>): Promise<Harness> {
  const app = await buildAccountsApp(t, { env: { ACCESS_TOKEN_TTL } });
  const baseUrl = await app.listen({ host: '127.0.0.1', port: 0 });
  const user = await verifiedUser(app);
  const session = tokenSession();
  const sent: string[] = [];
  let refreshes = 0;
  const client = createContactsClient(baseUrl, session.getToken, {
    refresh: (client) => {
      refreshes++;
      return refresh ? refresh(client, session) : session.refresh(client);
    },
    fetch: async (request) => {
      const response = await fetch(request);
      sent.push(`${request.method} ${new URL(request.url).pathname} ${response.status}`);
      return response;
    },
  });
  const { data } = await login(client, { username: user.username, password: user.password });
  session.set(data ?? null);
  sent.length = 0;
  return { client, session, sent, refreshes: () => refreshes };
}

/** Waits until the access token held has expired. */
async function expire(session: TokenSession): Promise<void> {
  const exp = decodeClaims(session.getToken() ?? '').exp as number;
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, exp * 1000 - Date.now()) + 50));
}

t.test('an expired access token is refreshed once and the call retried once, body and all', async (t) => {
  const { client, session, sent, refreshes } = await harness(t);
  const expired = session.tokens!;
  await expire(session);

  const created = await client.POST('/api/contacts/', { body: contact });
  t.equal(created.response.status, 201);
  t.match(created.data, contact, 'the retry sent the whole body again');
  t.same(sent, ['POST /api/contacts/ 401', 'POST /api/auth/refresh 200', 'POST /api/contacts/ 201']);
  t.equal(refreshes(), 1);
  t.not(session.getToken(), expired.access_token, 'the session holds the new access token');
  t.equal(session.tokens?.refresh_token, expired.refresh_token);

  sent.length = 0;
  const listed = await client.GET('/api/contacts/');
  t.equal(listed.response.status, 200);
  t.same(
    listed.data?.map((c) => c.id),
    [created.data?.id],
  );
  t.same(sent, ['GET /api/contacts/ 200'], 'the new token is used from then on, with no refresh');
  t.equal(refreshes(), 1);
});

t.test('concurrent calls answered 401 share one refresh', async (t) => {
  const { client, session, sent, refreshes } = await harness(t);
  await expire(session);

  const answers = await Promise.all([1, 2, 3].map(() => client.GET('/api/contacts/')));
  t.same(
    answers.map((a) => a.response.status),
    [200, 200, 200],
  );
  t.equal(refreshes(), 1);
  t.same([...sent].sort(), [
    'GET /api/contacts/ 200',
    'GET /api/contacts/ 200',
    'GET /api/contacts/ 200',
    'GET /api/contacts/ 401',
    'GET /api/contacts/ 401',
    'GET /api/contacts/ 401',
    'POST /api/auth/refresh 200',
  ]);
});

t.test('a refresh token revoked by logout: the 401 comes through, once, and the session is cleared', async (t) => {
  const { client, session, sent, refreshes } = await harness(t);
  const logout = await client.POST('/api/auth/logout');
  t.equal(logout.response.status, 204);
  await expire(session);
  sent.length = 0;

  const refused = await client.GET('/api/contacts/');
  t.equal(refused.response.status, 401);
  t.same(refused.error, { detail: 'Not authenticated' });
  t.same(sent, ['GET /api/contacts/ 401', 'POST /api/auth/refresh 401']);
  t.equal(refreshes(), 1);
  t.equal(session.tokens, null);

  sent.length = 0;
  const anonymous = await client.GET('/api/contacts/');
  t.equal(anonymous.response.status, 401);
  t.same(sent, ['GET /api/contacts/ 401'], 'with no token there is nothing to refresh');
  t.equal(refreshes(), 1);
});

t.test('a retry answered 401 again is returned as it is, not retried', async (t) => {
  const { client, session, sent, refreshes } = await harness(t, async () => 'not-a-jwt');
  await expire(session);

  const refused = await client.GET('/api/contacts/');
  t.equal(refused.response.status, 401);
  t.same(refused.error, { detail: 'Not authenticated' });
  t.same(sent, ['GET /api/contacts/ 401', 'GET /api/contacts/ 401']);
  t.equal(refreshes(), 1);
});

t.test('a 401 from login is the answer, not a reason to refresh', async (t) => {
  const { client, sent, refreshes } = await harness(t);
  const wrong = await login(client, { username: 'nobody', password: 'wrong-horse-battery' });
  t.equal(wrong.response.status, 401);
  t.same(wrong.error, { detail: 'Incorrect username or password' });
  t.same(sent, ['POST /api/auth/login 401']);
  t.equal(refreshes(), 0);
});
