/**
 * Two service processes over one PostgreSQL database and a Redis Cluster of three masters, each
 * with a replica (REDIS_CLUSTER_URLS): the limits, the cache and the token cut-offs behave as one
 * service, as they do on one Redis; every key of one user lives in that user's slot; and a master
 * killed mid-load (SIGKILL) is failed over by its replica while nothing fails, after which the
 * cache, the limits and the cut-off subscription work across the instances again by themselves.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import t, { type Test } from 'tap';
import { backend, smtpCapture, testEnv } from '../helper.js';
import { dependencies, describe, listAllIds, type Outcome, type Service, startLoad, startService } from '../faults/processes.js';
import { type ClusterNode, startRedisCluster } from '../redis-cluster.js';

const skip = backend !== 'postgres' && 'the service runs as two processes, which cannot share one embedded database';

/** From the kill until every node agrees on the new master, and this long past it, the load goes on. */
const AFTER_FAILOVER_MS = 2_000;

t.test('two instances on a three-master Redis Cluster, one master killed mid-load', { skip }, async (t) => {
  const started = Date.now();
  const cluster = await startRedisCluster({ masters: 3, replicas: 1, nodeTimeoutMs: 1_000 });
  t.teardown(() => cluster.stop());
  const mailbox = await smtpCapture(t);
  const base = await testEnv(t);
  const env = {
    ...base,
    SMTP_URL: mailbox.url,
    TRUST_PROXY: 'loopback',
    LOG_LEVEL: 'info',
    REDIS_URL: '',
    REDIS_CLUSTER_URLS: cluster.urls.join(','),
  };
  const prefix = base.REDIS_KEY_PREFIX!;
  const channel = `${prefix}token-cut-offs`;
  const [a, b] = await Promise.all([startService(t, env), startService(t, env)]);
  t.comment(`cluster of ${cluster.nodes.length} nodes and two instances up in ${Date.now() - started} ms`);

  const call = (service: Service, path: string, init: RequestInit & { ip: string; token?: string } = { ip: '203.0.113.1' }) =>
    fetch(`${service.url}${path}`, {
      ...init,
      headers: {
        'X-Forwarded-For': init.ip,
        ...(init.token ? { Authorization: `Bearer ${init.token}` } : {}),
        ...(init.body ? { 'Content-Type': 'application/json' } : {}),
        ...init.headers,
      },
    });

  let users = 0;
  /** Registers on A, verifies and logs in on B, each user from an address of its own. */
  async function signUp(name: string): Promise<{ id: number; access_token: string; refresh_token: string }> {
    const ip = `198.51.100.${++users}`;
    const password = 'correct-horse-battery';
    const registered = await call(a, '/api/auth/register', {
      method: 'POST',
      ip,
      body: JSON.stringify({ username: name, email: `${name}@example.com`, password }),
    });
    if (registered.status !== 201) throw new Error(`register ${name}: ${registered.status} ${await registered.text()}`);
    const { id } = (await registered.json()) as { id: number };
    const link = new URL((await mailbox.next()).link ?? '');
    const verified = await call(b, `${link.pathname}${link.search}`, { ip });
    if (verified.status !== 200) throw new Error(`verify ${name}: ${verified.status}`);
    const login = await call(b, '/api/auth/login', {
      method: 'POST',
      ip,
      headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ username: name, password }).toString(),
    });
    if (login.status !== 200) throw new Error(`login ${name}: ${login.status}`);
    return { id, ...((await login.json()) as { access_token: string; refresh_token: string }) };
  }

  const contact = (n: number) => ({
    first_name: `Ada${n}`,
    last_name: 'Lovelace',
    email: `ada${n}@example.com`,
    phone: `+4420712345${String(n).padStart(2, '0')}`,
    birthday: '1915-12-10',
  });

  /** A read through B is cached there; a write through A makes B miss and read the new value. */
  async function cacheAcrossInstances(t: Test, token: string, n: number): Promise<void> {
    const ip = '203.0.113.30';
    const created = await call(a, '/api/contacts/', { method: 'POST', ip, token, body: JSON.stringify(contact(n)) });
    t.equal(created.status, 201, await created.clone().text());
    const { id } = (await created.json()) as { id: number };
    t.equal((await call(b, `/api/contacts/${id}`, { ip, token })).headers.get('x-cache'), 'MISS', 'B reads it from the database');
    const cached = await call(b, `/api/contacts/${id}`, { ip, token });
    t.equal(cached.headers.get('x-cache'), 'HIT', 'B cached it');
    t.equal(((await cached.json()) as { first_name: string }).first_name, `Ada${n}`);
    const patched = await call(a, `/api/contacts/${id}`, {
      method: 'PATCH',
      ip,
      token,
      body: JSON.stringify({ first_name: `Augusta${n}` }),
    });
    t.equal(patched.status, 200);
    const after = await call(b, `/api/contacts/${id}`, { ip, token });
    t.equal(after.headers.get('x-cache'), 'MISS', "A's write made B's cached answer miss");
    t.equal(((await after.json()) as { first_name: string }).first_name, `Augusta${n}`);
  }

  /** GET /api/users/me: 3 through A and 2 through B fill the bucket of 5; the sixth is 429 on either. */
  async function meLimitAcrossInstances(t: Test, token: string, ip: string): Promise<void> {
    for (let i = 0; i < 5; i++) {
      const response = await call(i < 3 ? a : b, '/api/users/me', { ip, token });
      t.equal(response.status, 200, `/me call ${i + 1} of 5`);
      t.equal(response.headers.get('x-ratelimit-remaining'), String(4 - i), 'counted once across both instances');
    }
    for (const service of [a, b]) {
      const sixth = await call(service, '/api/users/me', { ip, token });
      t.equal(sixth.status, 429);
      t.match(await sixth.json(), { detail: /^Rate limit exceeded, retry in \d+ seconds$/ });
    }
  }

  /** A password reset through A: the old access token is refused by B right after A's answer, the new password works on B. */
  async function resetAcrossInstances(t: Test, name: string, session: { access_token: string }, round: string) {
    const ip = '203.0.113.40';
    t.equal(
      (await call(b, '/api/contacts/', { ip, token: session.access_token })).status,
      200,
      `${round}: B accepts the token (and remembers the cut-off)`,
    );
    const asked = await call(a, '/api/auth/forgot-password', {
      method: 'POST',
      ip,
      body: JSON.stringify({ email: `${name}@example.com` }),
    });
    t.equal(asked.status, 202);
    const token = new URL((await mailbox.next()).link ?? '').searchParams.get('token');
    const password = `new-password-${round}`;
    t.equal((await call(a, '/api/auth/reset-password', { method: 'POST', ip, body: JSON.stringify({ token, password }) })).status, 200);
    const refused = await call(b, '/api/contacts/', { ip, token: session.access_token });
    t.equal(refused.status, 401, `${round}: B refuses the old access token right after A's answer`);
    t.same(await refused.json(), { detail: 'Not authenticated' });
    const login = await call(b, '/api/auth/login', {
      method: 'POST',
      ip,
      headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ username: name, password }).toString(),
    });
    t.equal(login.status, 200, `${round}: the new password works on B`);
    return (await login.json()) as { access_token: string };
  }

  /** Subscribers of the token cut-off channel on each live node (PUBSUB NUMSUB counts a node's own). */
  const subscribersByNode = async () =>
    Promise.all(
      cluster.nodes
        .filter((node) => node.alive())
        .map(async (node) => ((await cluster.call(node, 'PUBSUB', 'NUMSUB', channel)) as [string, number])[1]),
    );

  /** Every key under the prefix, from every live master. */
  async function allKeys(): Promise<Set<string>> {
    const keys = new Set<string>();
    for (const node of cluster.nodes.filter((n) => n.alive())) {
      const role = (await cluster.call(node, 'ROLE')) as [string];
      if (role[0] !== 'master') continue;
      for (let cursor = '0'; ;) {
        const [next, found] = (await cluster.call(node, 'SCAN', cursor, 'MATCH', `${prefix}*`, 'COUNT', '1000')) as [string, string[]];
        for (const key of found) keys.add(key);
        if ((cursor = next) === '0') break;
      }
    }
    return keys;
  }

  await t.test('both instances see the cluster up and subscribe on the first seed node', async (t) => {
    for (const service of [a, b]) {
      const ready = await fetch(`${service.url}/readyz`);
      t.equal(ready.status, 200);
      t.same(await ready.json(), { status: 'ok', checks: { database: 'ok', cache: 'ok' } });
      t.same(await dependencies(service.url), { redis: 1, database: 1 }, 'contacts_dependency_up');
    }
    t.same(await subscribersByNode(), [2, 0, 0, 0, 0, 0], 'both subscriptions on the first node of REDIS_CLUSTER_URLS');
  });

  await t.test('the anonymous limit is counted once across both instances', async (t) => {
    const ip = '203.0.113.10';
    for (let i = 0; i < 20; i++) {
      t.equal(
        (await call(i % 2 === 0 ? a : b, '/api/auth/verify-email?token=nope', { ip })).status,
        400,
        `request ${i + 1} of 20 is served`,
      );
    }
    for (const service of [a, b]) {
      const response = await call(service, '/api/auth/verify-email?token=nope', { ip });
      t.equal(response.status, 429);
      t.ok(Number(response.headers.get('retry-after')) >= 1, 'with Retry-After');
    }
    t.equal((await call(a, '/api/auth/verify-email?token=nope', { ip: '203.0.113.11' })).status, 400, 'another address has its own bucket');
  });

  const alice = await signUp('alice');
  await t.test('the /me limit is shared across both instances', (t) => meLimitAcrossInstances(t, alice.access_token, '203.0.113.21'));
  await t.test("a write through A makes B's cached read miss", (t) => cacheAcrossInstances(t, alice.access_token, 1));

  await t.test('a reset through A ends earlier tokens on B; a logout through A revokes the refresh token on B', async (t) => {
    let dave: { access_token: string } = await signUp('dave');
    for (const round of ['first', 'second']) dave = await resetAcrossInstances(t, 'dave', dave, round);
    const carol = await signUp('carol');
    t.equal((await call(a, '/api/auth/logout', { method: 'POST', ip: '203.0.113.41', token: carol.access_token })).status, 204);
    const refused = await call(b, '/api/auth/refresh', {
      method: 'POST',
      ip: '203.0.113.41',
      body: JSON.stringify({ refresh_token: carol.refresh_token }),
    });
    t.equal(refused.status, 401);
    t.same(await refused.json(), { detail: 'Invalid refresh token' });
  });

  await t.test("every key one user's requests make is in that user's slot", async (t) => {
    const erin = await signUp('erin');
    const before = await allKeys();
    const ip = '203.0.113.50';
    const token = erin.access_token;
    const created = await call(a, '/api/contacts/', { method: 'POST', ip, token, body: JSON.stringify(contact(2)) });
    const { id } = (await created.json()) as { id: number };
    const reads = [
      '/api/users/me',
      `/api/contacts/${id}`,
      `/api/contacts/${id}`,
      '/api/contacts/?limit=5',
      '/api/contacts/get-upcoming-birthday',
    ];
    for (const path of reads) t.equal((await call(b, path, { ip, token })).status, 200, path);
    t.equal((await call(a, '/api/contacts/export?format=csv', { ip, token })).status, 200, 'export');
    t.equal((await call(b, '/api/contacts/sync', { ip, token })).status, 200, 'sync');
    const imported = await call(a, '/api/contacts/import', {
      method: 'POST',
      ip,
      token,
      headers: { 'Content-Type': 'text/csv' },
      body: 'first_name,last_name,email,phone,birthday\r\nGrace,Hopper,grace@example.com,+12025550143,1906-12-09\r\n',
    });
    t.equal(imported.status, 200, `import ${await imported.clone().text()}`);
    const made = [...(await allKeys())].filter((key) => !before.has(key)).sort();
    const expected = [
      `${prefix}cache:{u${erin.id}}:g`,
      `${prefix}cache:{u${erin.id}}:g-node`,
      `${prefix}cache:{u${erin.id}}:ledger`,
      `${prefix}cache:{u${erin.id}}:bytes`,
      `${prefix}rate-limit:user:{u${erin.id}}:me`,
      `${prefix}rate-limit:user:{u${erin.id}}:export`,
      `${prefix}rate-limit:user:{u${erin.id}}:sync`,
      `${prefix}rate-limit:user:{u${erin.id}}:import`,
    ];
    for (const key of expected) t.ok(made.includes(key), `${key} was made`);
    t.ok(
      made.some((key) => key.startsWith(`${prefix}cache:{u${erin.id}}:a:`)),
      `cached answers were stored: ${made.join(', ')}`,
    );
    const userSlot = Number(await cluster.call(cluster.nodes[0]!, 'CLUSTER', 'KEYSLOT', `{u${erin.id}}`));
    const slots = await Promise.all(made.map(async (key) => Number(await cluster.call(cluster.nodes[0]!, 'CLUSTER', 'KEYSLOT', key))));
    t.same(
      made.filter((_, i) => slots[i] !== userSlot),
      [],
      `all ${made.length} keys are in slot ${userSlot}, the one of {u${erin.id}}`,
    );
  });

  // The users of the load and of the checks after it live on the first seed node, where both
  // instances subscribe: killing it takes their keys and both subscriptions away at once.
  const first = cluster.nodes[0]!;
  const onFirst: Awaited<ReturnType<typeof signUp>>[] = [];
  for (let n = 0; onFirst.length < 2; n++) {
    const candidate = await signUp(`user${n}`);
    if ((await cluster.masterOf(`{u${candidate.id}}`)) === first) onFirst.push(candidate);
    else if (n === 30) throw new Error('fewer than 2 of the first 30 users hashed to the first master');
  }
  const [loadUser, victor] = onFirst as [(typeof onFirst)[0], (typeof onFirst)[0]];
  t.comment(`users ${loadUser.id} and ${victor.id} live on the first master (${first.port})`);

  await t.test('one master killed mid-load: nothing fails, its replica takes over, and all of it works again', async (t) => {
    // Victor's contact, cached by B (in Redis and in B's memory) under the current generation.
    const ip = '203.0.113.70';
    const created = await call(a, '/api/contacts/', { method: 'POST', ip, token: victor.access_token, body: JSON.stringify(contact(4)) });
    const { id } = (await created.json()) as { id: number };
    for (const expected of ['MISS', 'HIT']) {
      t.equal(
        (await call(b, `/api/contacts/${id}`, { ip, token: victor.access_token })).headers.get('x-cache'),
        expected,
        `B: ${expected}`,
      );
    }

    const token = loadUser.access_token;
    const loads = [a, b].map((service, i) => startLoad({ baseUrl: service.url, token, clients: 4, readyEveryMs: 200, tag: `cluster${i}` }));
    t.teardown(() => Promise.all(loads.map((load) => load.stop())));
    await sleep(1_500);
    // The replication link is cut first (as in a network partition), so the master acknowledges what
    // its replica never gets: Victor's write below moves his generation on the master only.
    const replica = await cluster.replicaOf(first);
    replica.pause(true);
    await cluster.call(first, 'CLIENT', 'KILL', 'TYPE', 'replica');
    const patched = await call(a, `/api/contacts/${id}`, {
      method: 'PATCH',
      ip,
      token: victor.access_token,
      body: JSON.stringify({ first_name: 'Victoria' }),
    });
    t.equal(patched.status, 200, 'a write acknowledged by the master that is about to die');
    const killedAt = Date.now();
    await first.kill();
    replica.pause(false);
    await cluster.waitUntilOk();
    const failedOverAt = Date.now();
    await sleep(AFTER_FAILOVER_MS);
    await Promise.all(loads.map((load) => load.stop()));
    const outcomes = loads.flatMap((load) => load.outcomes);
    const api = outcomes.filter((o) => o.op !== 'ready');
    const byStatus: Record<string, number> = {};
    for (const o of api) byStatus[o.status ?? o.error ?? 'none'] = (byStatus[o.status ?? o.error ?? 'none'] ?? 0) + 1;
    t.comment(`failover: the replica was master on every node ${failedOverAt - killedAt} ms after the kill`);
    t.comment(`requests: ${api.length} API by status ${JSON.stringify(byStatus)}, ${outcomes.length - api.length} /readyz`);

    t.equal(a.child.exitCode ?? b.child.exitCode, null, 'both instances still run');
    const unanswered = api.filter((o) => o.status === null);
    t.equal(unanswered.length, 0, `every request got an answer: ${describe(unanswered)}`);
    const failures = api.filter((o) => o.status! >= 500);
    t.equal(failures.length, 0, `no 5xx, not even 503: ${describe(failures)}`);
    // The load's /me calls exceed the user's bucket of 5 a minute; everything else succeeds.
    const refused = api.filter((o) => o.status! >= 300 && !(o.op === 'me' && o.status === 429));
    t.equal(refused.length, 0, `every other answer is 2xx: ${describe(refused)}`);
    const during = api.filter((o) => o.start >= killedAt && o.end <= failedOverAt && o.op !== 'me');
    t.ok(during.length > 0, `requests while the master was away were served (${during.length})`);
    const probes = outcomes.filter((o) => o.op === 'ready');
    const unready = probes.filter((o) => o.status !== 200);
    t.equal(unready.length, 0, `/readyz is never 503 for want of Redis: ${describe(unready)}`);
    const acknowledged = api.filter((o): o is Outcome & { id: number } => o.op === 'create' && o.status === 201);
    const stored = await listAllIds(a.url, token);
    const lost = acknowledged.filter((o) => !stored.has(o.id));
    t.equal(lost.length, 0, `every one of the ${acknowledged.length} creates answered 201 is stored`);

    const promoted = await cluster.masterOf(`{u${victor.id}}`);
    t.equal(promoted, replica, `the first master's slots are served by its replica (${replica.port})`);
    const afterFailover = await call(b, `/api/contacts/${id}`, { ip, token: victor.access_token });
    t.equal(afterFailover.headers.get('x-cache'), 'MISS', "the replica's copy of the old generation is not trusted");
    t.equal(((await afterFailover.json()) as { first_name: string }).first_name, 'Victoria', 'B answers the write the replica never got');

    let subscribers: number[] = [];
    for (const deadline = Date.now() + 5_000; Date.now() < deadline; await sleep(100)) {
      subscribers = await subscribersByNode();
      if (subscribers.reduce((sum, n) => sum + n, 0) === 2) break;
    }
    t.equal(
      subscribers.reduce((sum, n) => sum + n, 0),
      2,
      `both instances subscribed again, on live nodes (${subscribers.join(', ')})`,
    );
    for (const service of [a, b]) {
      const ready = await fetch(`${service.url}/readyz`);
      t.same(await ready.json(), { status: 'ok', checks: { database: 'ok', cache: 'ok' } }, '/readyz: cache ok again');
      t.same(await dependencies(service.url), { redis: 1, database: 1 }, 'contacts_dependency_up: redis 1 again');
    }
    // Each part that uses Redis says once that it went away and once that it is back, per instance.
    for (const [name, service] of [['A', a] as const, ['B', b] as const]) {
      const lines = service.logs.filter(
        (line) => line.time >= killedAt && line.msg !== 'incoming request' && line.msg !== 'request completed',
      );
      const said = new Map<string, number>();
      for (const line of lines) said.set(`${line.level} ${line.msg}`, (said.get(`${line.level} ${line.msg}`) ?? 0) + 1);
      t.comment(`${name} logged from the kill on: ${[...said].map(([line, n]) => `${n}× ${line}`).join('; ')}`);
      t.equal(lines.filter((line) => line.level >= 50).length, 0, `${name}: no error lines`);
      t.same(
        [...said].filter(([, n]) => n > 1),
        [],
        `${name}: every line once`,
      );
      t.ok(said.has('40 redis unavailable; serving without it') && said.has('30 redis reachable again'), `${name}: the outage and its end`);
    }
  });

  // On the promoted replica: Victor's keys.
  await t.test('after the failover the cache works across instances again', (t) => cacheAcrossInstances(t, victor.access_token, 5));
  await t.test('after the failover the /me limit is shared again', (t) => meLimitAcrossInstances(t, victor.access_token, '203.0.113.60'));
  await t.test('after the failover a reset through A ends earlier tokens on B', async (t) => {
    await resetAcrossInstances(t, 'alice', alice, 'after the failover');
  });

  const stray = (node: ClusterNode) => node.alive() !== (node !== first);
  t.same(
    cluster.nodes.filter(stray).map((node) => node.port),
    [],
    'only the killed node is gone',
  );
  t.comment(`wall time ${Date.now() - started} ms`);
});
