/**
 * Two service processes on two ports over one PostgreSQL database and one Redis, behind a
 * (simulated) load balancer that sets X-Forwarded-For: rate limits, cache, logout and creates
 * must behave as one service.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import t, { type Test } from 'tap';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { migrateToLatest } from '../../plugins/migrate.js';
import { migrations } from '../../src/db/migrations/index.js';
import { backend, freePort, freshPostgresDatabase, smtpCapture, testEnv } from '../helper.js';

const onlyOnPostgres = { skip: backend !== 'postgres' && 'two processes cannot share one embedded database' };

t.test('two instances behave as one service', onlyOnPostgres, (t) => runAcrossInstances(t));

/** Starts `src/server.ts` and resolves with its base URL once /healthz answers. */
async function startInstance(t: Test, env: Record<string, string>): Promise<{ url: string; process: ChildProcess }> {
  const port = await freePort();
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
    env: { ...process.env, ...env, PORT: String(port), HOST: '127.0.0.1' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  t.teardown(() => {
    child.kill('SIGTERM');
  });
  const url = `http://127.0.0.1:${port}`;
  for (let attempt = 0; attempt < 300; attempt++) {
    if (child.exitCode !== null) throw new Error(`instance exited early: ${stderr}`);
    const up = await fetch(`${url}/healthz`).then(
      (r) => r.ok,
      () => false,
    );
    if (up) return { url, process: child };
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`instance did not start: ${stderr}`);
}

async function runAcrossInstances(t: Test): Promise<void> {
  const mailbox = await smtpCapture(t);
  const env = {
    ...(await testEnv(t)),
    SMTP_URL: mailbox.url,
    TRUST_PROXY: 'true',
    LOG_LEVEL: 'warn',
  };
  // Both start at once on an empty database, so both run the migrations concurrently.
  const [a, b] = await Promise.all([startInstance(t, env), startInstance(t, env)]);

  const call = (base: string, path: string, init: RequestInit & { ip: string; token?: string }) =>
    fetch(`${base}${path}`, {
      ...init,
      headers: {
        'X-Forwarded-For': init.ip,
        ...(init.token ? { Authorization: `Bearer ${init.token}` } : {}),
        ...(init.body ? { 'Content-Type': 'application/json' } : {}),
        ...init.headers,
      },
    });

  /** Registers, verifies from the mailed link and logs in, from its own client address. */
  async function signUp(name: string, ip: string): Promise<{ access_token: string; refresh_token: string }> {
    const registered = await call(a.url, '/api/auth/register', {
      method: 'POST',
      ip,
      body: JSON.stringify({ username: name, email: `${name}@example.com`, password: 'correct-horse-battery' }),
    });
    t.equal(registered.status, 201, `${name} registered`);
    const mail = await mailbox.next();
    const verifyPath = new URL(mail.link ?? '').pathname + new URL(mail.link ?? '').search;
    t.equal((await call(b.url, verifyPath, { ip })).status, 200, `${name} verified on the other instance`);
    const login = await call(b.url, '/api/auth/login', {
      method: 'POST',
      ip,
      headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ username: name, password: 'correct-horse-battery' }).toString(),
    });
    t.equal(login.status, 200, `${name} logged in`);
    return (await login.json()) as { access_token: string; refresh_token: string };
  }

  await t.test('the anonymous limit is counted once across both instances', async (t) => {
    const ip = '203.0.113.10';
    for (let i = 0; i < 20; i++) {
      const response = await call(i % 2 === 0 ? a.url : b.url, '/api/auth/verify-email?token=nope', { ip });
      t.equal(response.status, 400, `request ${i + 1} of 20 is served`);
    }
    for (const instance of [a, b]) {
      const response = await call(instance.url, '/api/auth/verify-email?token=nope', { ip });
      t.equal(response.status, 429);
      t.match(await response.json(), { detail: /^Rate limit exceeded, retry in \d+ seconds$/ });
      t.ok(Number(response.headers.get('retry-after')) >= 1);
    }
    const otherClient = await call(a.url, '/api/auth/verify-email?token=nope', { ip: '203.0.113.11' });
    t.equal(otherClient.status, 400, 'another client address has its own bucket');
  });

  const alice = await signUp('alice', '203.0.113.20');

  await t.test('the /me limit is shared across both instances', async (t) => {
    const ip = '203.0.113.21';
    for (let i = 0; i < 5; i++) {
      const response = await call(i < 3 ? a.url : b.url, '/api/users/me', { ip, token: alice.access_token });
      t.equal(response.status, 200, `/me call ${i + 1} of 5`);
      t.equal(response.headers.get('x-ratelimit-remaining'), String(4 - i));
    }
    const sixth = await call(a.url, '/api/users/me', { ip, token: alice.access_token });
    t.equal(sixth.status, 429);
  });

  await t.test("an update through A is read on B, past B's cache", async (t) => {
    const ip = '203.0.113.22';
    const contact = { first_name: 'Ada', last_name: 'Lovelace', email: 'ada@example.com', phone: '+442071234567', birthday: '1915-12-10' };
    const created = await call(a.url, '/api/contacts/', { method: 'POST', ip, token: alice.access_token, body: JSON.stringify(contact) });
    t.equal(created.status, 201);
    const { id } = (await created.json()) as { id: number };

    const first = await call(b.url, `/api/contacts/${id}`, { ip, token: alice.access_token });
    t.equal(first.headers.get('x-cache'), 'MISS');
    const second = await call(b.url, `/api/contacts/${id}`, { ip, token: alice.access_token });
    t.equal(second.headers.get('x-cache'), 'HIT', 'B cached it');

    const updated = await call(a.url, `/api/contacts/${id}`, {
      method: 'PATCH',
      ip,
      token: alice.access_token,
      body: JSON.stringify({ first_name: 'Augusta' }),
    });
    t.equal(updated.status, 200);
    const afterUpdate = await call(b.url, `/api/contacts/${id}`, { ip, token: alice.access_token });
    t.equal(afterUpdate.headers.get('x-cache'), 'MISS');
    t.equal(((await afterUpdate.json()) as { first_name: string }).first_name, 'Augusta');
  });

  await t.test('every write through A is read at once on B, whose memory held the old answer', async (t) => {
    const ip = '203.0.113.27';
    const contact = { first_name: 'Grace', last_name: 'Hopper', email: 'grace@example.com', phone: '+12025550143', birthday: '1906-12-09' };
    const { id } = (await (
      await call(a.url, '/api/contacts/', { method: 'POST', ip, token: alice.access_token, body: JSON.stringify(contact) })
    ).json()) as { id: number };
    const seen: string[] = [];
    for (let round = 0; round < 20; round++) {
      await call(b.url, `/api/contacts/${id}`, { ip, token: alice.access_token });
      const cached = await call(b.url, `/api/contacts/${id}`, { ip, token: alice.access_token });
      t.equal(cached.headers.get('x-cache'), 'HIT', `round ${round}: B answers from its cache`);
      await call(a.url, `/api/contacts/${id}`, {
        method: 'PATCH',
        ip,
        token: alice.access_token,
        body: JSON.stringify({ first_name: `Grace${round}` }),
      });
      seen.push(
        ((await (await call(b.url, `/api/contacts/${id}`, { ip, token: alice.access_token })).json()) as { first_name: string }).first_name,
      );
    }
    t.same(
      seen,
      Array.from({ length: 20 }, (_, round) => `Grace${round}`),
      'B never served a stale answer',
    );
  });

  await t.test('a password reset on A refuses every earlier token on B at once', async (t) => {
    const ip = '203.0.113.28';
    let session = await signUp('dave', '203.0.113.29');
    for (let round = 0; round < 3; round++) {
      const before = await call(b.url, '/api/contacts/', { ip, token: session.access_token });
      t.equal(before.status, 200, `round ${round}: B accepts the token (and remembers the user's cut-off)`);
      const asked = await call(a.url, '/api/auth/forgot-password', {
        method: 'POST',
        ip,
        body: JSON.stringify({ email: 'dave@example.com' }),
      });
      t.equal(asked.status, 202);
      const token = new URL((await mailbox.next()).link ?? '').searchParams.get('token');
      const password = `new-password-${round}`;
      const reset = await call(a.url, '/api/auth/reset-password', { method: 'POST', ip, body: JSON.stringify({ token, password }) });
      t.equal(reset.status, 200);
      const refused = await call(b.url, '/api/contacts/', { ip, token: session.access_token });
      t.equal(refused.status, 401, `round ${round}: B refuses the old access token right after A's answer`);
      t.same(await refused.json(), { detail: 'Not authenticated' });
      const login = await call(b.url, '/api/auth/login', {
        method: 'POST',
        ip,
        headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ username: 'dave', password }).toString(),
      });
      t.equal(login.status, 200, 'the new password works on B');
      session = (await login.json()) as typeof session;
    }
  });

  await t.test('concurrent creates through both instances lose nothing', async (t) => {
    const ip = '203.0.113.23';
    const bob = await signUp('bob', '203.0.113.24');
    const count = 40;
    const responses = await Promise.all(
      Array.from({ length: count }, (_, i) =>
        call(i % 2 === 0 ? a.url : b.url, '/api/contacts/', {
          method: 'POST',
          ip,
          token: bob.access_token,
          body: JSON.stringify({
            first_name: `Person${i}`,
            last_name: 'Load',
            email: `person${i}@example.com`,
            phone: `+1415555${String(1000 + i)}`,
            birthday: '1990-01-01',
          }),
        }),
      ),
    );
    t.same(
      responses.map((r) => r.status),
      Array(count).fill(201),
    );
    const ids = await Promise.all(responses.map(async (r) => ((await r.json()) as { id: number }).id));
    t.equal(new Set(ids).size, count, 'every id is unique');
    const list = await call(b.url, '/api/contacts/?limit=1000', { ip, token: bob.access_token });
    t.equal(list.headers.get('x-total-count'), String(count));
    t.equal(((await list.json()) as unknown[]).length, count);
  });

  await t.test('a refresh token revoked by logout on A is refused by B', async (t) => {
    const ip = '203.0.113.25';
    const carol = await signUp('carol', '203.0.113.26');
    const refreshed = await call(b.url, '/api/auth/refresh', {
      method: 'POST',
      ip,
      body: JSON.stringify({ refresh_token: carol.refresh_token }),
    });
    t.equal(refreshed.status, 200, 'the refresh token works before logout');
    const logout = await call(a.url, '/api/auth/logout', { method: 'POST', ip, token: carol.access_token });
    t.equal(logout.status, 204);
    const refused = await call(b.url, '/api/auth/refresh', {
      method: 'POST',
      ip,
      body: JSON.stringify({ refresh_token: carol.refresh_token }),
    });
    t.equal(refused.status, 401);
    t.same(await refused.json(), { detail: 'Invalid refresh token' });
  });
}

t.test('concurrent migrations of one empty database serialise on the migrator lock', onlyOnPostgres, async (t) => {
  const url = await freshPostgresDatabase(t);
  const open = () => new Kysely<unknown>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 2 }) }) });
  const first = open();
  const second = open();
  t.teardown(async () => {
    await first.destroy();
    await second.destroy();
  });
  const [appliedByFirst, appliedBySecond] = await Promise.all([migrateToLatest(first, migrations), migrateToLatest(second, migrations)]);
  const all = [...appliedByFirst, ...appliedBySecond].sort();
  t.same(all, [...new Set(all)], 'no migration ran twice');
  t.ok(appliedByFirst.length === 0 || appliedBySecond.length === 0, 'one migrator applied everything, the other found it done');
});
