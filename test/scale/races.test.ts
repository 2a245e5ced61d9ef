/**
 * Races, in the issue's words: "The check and the write are one atomic step: two clients racing
 * with the same tag get exactly one 200 and one 412, through one instance or two." and "A test
 * races writes through two instances against a syncing client and proves that the client's copy
 * equals the server's."
 *
 * Through one instance (in-process, both backends) and through two service processes on one
 * PostgreSQL and one Redis. On PostgreSQL a session of the test holds the contact's row lock while
 * both requests arrive, so they are provably in flight together; the sync race adds transactions
 * that write the table directly and commit late, and API writes that wait on a held row lock, so
 * commits land out of transaction order.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { CompiledQuery } from 'kysely';
import pg from 'pg';
import t, { type Test } from 'tap';
import { loadConfig } from '../../plugins/config.js';
import { buildApp } from '../../src/app.js';
import { buildContactsApp, contactBody, createUser, type TestUser } from '../contacts/fixtures.js';
import { startService } from '../faults/processes.js';
import { backend, seededRandom, testEnv } from '../helper.js';

const onlyOnPostgres = {
  skip: backend !== 'postgres' && 'two processes and a second session need PostgreSQL; the embedded database has one session',
};
const CHANGED = { detail: 'Precondition Failed: the contact has changed' };

type Contact = Record<string, any> & { id: number };

interface Answer {
  status: number;
  headers: Record<string, string | undefined>;
  body: any;
}

/** One way into the service as one user: an instance, or the in-process app. */
interface Endpoint {
  name: string;
  send(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<Answer>;
}

function viaInject(app: FastifyInstance, user: TestUser, name = 'app'): Endpoint {
  return {
    name,
    async send(method, path, body, headers = {}) {
      const res = await app.inject({
        method: method as 'GET',
        url: path,
        headers: { authorization: `Bearer ${user.token}`, ...headers },
        ...(body === undefined ? {} : { payload: body as object }),
      });
      return { status: res.statusCode, headers: res.headers as Answer['headers'], body: res.body ? JSON.parse(res.body) : undefined };
    },
  };
}

function viaHttp(baseUrl: string, user: TestUser, name: string): Endpoint {
  return {
    name,
    async send(method, path, body, headers = {}) {
      const res = await fetch(`${baseUrl}${path}`, {
        method,
        headers: {
          authorization: `Bearer ${user.token}`,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          ...headers,
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      const text = await res.text();
      return { status: res.status, headers: Object.fromEntries(res.headers), body: text ? JSON.parse(text) : undefined };
    },
  };
}

/** Resolves once `n` sessions of the database wait for a lock. */
async function lockWaiters(monitor: pg.Client, n: number): Promise<void> {
  for (let attempt = 0; attempt < 500; attempt++) {
    const { rows } = await monitor.query<{ n: number }>(
      `select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`,
    );
    if (rows[0]!.n >= n) return;
    await sleep(10);
  }
  throw new Error(`${n} sessions never waited for the lock`);
}

async function connect(t: Test, url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  t.teardown(() => client.end());
  return client;
}

const KINDS = ['PATCH/PATCH', 'PUT/PATCH', 'PUT/PUT', 'DELETE/PATCH', 'PATCH/DELETE', 'DELETE/DELETE'] as const;

/**
 * Rounds of two writes with one tag, through `a` and `b`. With `lock`, a session holds the row
 * while both arrive and releases it once both wait. Exactly one wins each round: a write that
 * loses to a write is 412 and one that loses to a delete finds no contact (404), and what is stored
 * afterwards is the winner's.
 */
async function sameTagRounds(
  t: Test,
  a: Endpoint,
  b: Endpoint,
  rounds: number,
  lock?: { session: pg.Client; monitor: pg.Client },
): Promise<void> {
  const tally: Record<string, number> = {};
  for (let round = 0; round < rounds; round++) {
    const kind = KINDS[round % KINDS.length]!;
    const created = await a.send('POST', '/api/contacts/', contactBody());
    const contact = created.body as Contact;
    const tag = created.headers.etag!;
    const url = `/api/contacts/${contact.id}`;
    const request = (endpoint: Endpoint, method: string, n: number) =>
      endpoint.send(
        method,
        url,
        method === 'PATCH'
          ? { first_name: `Racer${n}` }
          : method === 'PUT'
            ? { ...contactBody({ email: contact.email }), last_name: `Racer${n}` }
            : undefined,
        { 'if-match': tag },
      );
    const [methodA, methodB] = kind.split('/') as [string, string];
    if (lock) {
      await lock.session.query('begin');
      await lock.session.query('select id from contacts where id = $1 for update', [contact.id]);
    }
    const answers = Promise.all([request(a, methodA, 1), request(b, methodB, 2)]);
    if (lock) {
      await lockWaiters(lock.monitor, 2);
      await lock.session.query('commit');
    }
    const [first, second] = await answers;
    const statuses = [first.status, second.status];
    const label = `round ${round}, ${kind} through ${a.name} and ${b.name}`;
    const winners = [first, second].filter((answer) => answer.status === 200);
    t.equal(winners.length, 1, `${label}: exactly one 200 (${statuses})`);
    const loser = first.status === 200 ? second : first;
    const loserMethod = first.status === 200 ? methodB : methodA;
    const winnerMethod = first.status === 200 ? methodA : methodB;
    if (winnerMethod === 'DELETE') {
      t.equal(loser.status, 404, `${label}: the loser finds the contact gone`);
      t.strictSame(loser.body, { detail: 'Contact not found' });
    } else {
      t.equal(loser.status, 412, `${label}: the loser (${loserMethod}) is 412`);
      t.strictSame(loser.body, CHANGED);
    }
    tally[`${winnerMethod} won, ${loserMethod} ${loser.status}`] = (tally[`${winnerMethod} won, ${loserMethod} ${loser.status}`] ?? 0) + 1;
    const after = await b.send('GET', url);
    if (winnerMethod === 'DELETE') {
      t.equal(after.status, 404, `${label}: deleted`);
    } else {
      t.strictSame(after.body, winners[0]!.body, `${label}: stored is the winner's write`);
      t.equal(after.headers.etag, winners[0]!.headers.etag, `${label}: with the winner's tag`);
    }
  }
  t.comment(`${rounds} rounds${lock ? ' under a held row lock' : ''}: ${JSON.stringify(tally)}`);
}

t.test('one instance: two clients with the same tag get exactly one 200 and one 412', async (t) => {
  const app = await buildContactsApp(t);
  const user = await createUser(app);
  const client1 = viaInject(app, user, 'client 1');
  const client2 = viaInject(app, user, 'client 2');
  await t.test('sent together', (t) => sameTagRounds(t, client1, client2, 60));
  await t.test('both waiting on a held row lock', onlyOnPostgres, async (t) => {
    const url = app.config.databaseUrl!;
    await sameTagRounds(t, client1, client2, 24, { session: await connect(t, url), monitor: await connect(t, url) });
  });
});

/** One PostgreSQL database and one Redis key prefix; migrated; an in-process app on them for setup. */
async function sharedBackend(t: Test): Promise<{ env: Record<string, string>; app: FastifyInstance }> {
  const env = { ...(await testEnv(t)), LOG_LEVEL: 'warn', REDIS_COMMAND_TIMEOUT_MS: '2000' };
  const app = await buildApp({ config: await loadConfig(env) });
  t.teardown(() => app.close());
  await app.ready();
  return { env, app };
}

t.test('two instances', onlyOnPostgres, async (t) => {
  const { env, app } = await sharedBackend(t);
  const [a, b] = await Promise.all([startService(t, env), startService(t, env)]);
  const url = app.config.databaseUrl!;

  await t.test('two clients with the same tag, one through each instance: exactly one 200 and one 412', async (t) => {
    const user = await createUser(app);
    const throughA = viaHttp(a.url, user, 'A');
    const throughB = viaHttp(b.url, user, 'B');
    await t.test('sent together', (t) => sameTagRounds(t, throughA, throughB, 60));
    await t.test('both waiting on a held row lock', async (t) => {
      await sameTagRounds(t, throughA, throughB, 24, { session: await connect(t, url), monitor: await connect(t, url) });
    });
  });

  await t.test("a page cached by B never answers 304 to a tag A's write made stale", async (t) => {
    const user = await createUser(app);
    const throughA = viaHttp(a.url, user, 'A');
    const throughB = viaHttp(b.url, user, 'B');
    const created = (await throughA.send('POST', '/api/contacts/', contactBody())).body as Contact;
    for (let round = 0; round < 10; round++) {
      const page = await throughB.send('GET', '/api/contacts/?limit=10');
      t.equal((await throughB.send('GET', '/api/contacts/?limit=10')).headers['x-cache'], 'HIT', `round ${round}: B cached the page`);
      t.equal((await throughB.send('GET', '/api/contacts/?limit=10', undefined, { 'if-none-match': page.headers.etag! })).status, 304);
      t.equal((await throughA.send('PATCH', `/api/contacts/${created.id}`, { first_name: `Round${round}` })).status, 200);
      const after = await throughB.send('GET', '/api/contacts/?limit=10', undefined, { 'if-none-match': page.headers.etag! });
      t.equal(after.status, 200, `round ${round}: B answers the stale tag with the new page`);
      t.equal(after.body[0].first_name, `Round${round}`);
      t.not(after.headers.etag, page.headers.etag);
    }
  });

  await t.test(
    'writes race through both instances, SQL commits late, two clients sync through both: their copies equal the server',
    async (t) => {
      const user = await createUser(app);
      await syncRace(t, {
        endpoints: [viaHttp(a.url, user, 'A'), viaHttp(b.url, user, 'B')],
        userId: user.id,
        sql: await pgSessions(t, url, 4),
        count: async () =>
          (
            await app.db
              .selectFrom('contacts')
              .where('owner_id', '=', user.id)
              .select((eb) => eb.fn.countAll<number>().as('n'))
              .executeTakeFirstOrThrow()
          ).n,
        invalidate: () => app.cache.invalidate(user.id),
        seed: 20261122,
        phases: 4,
        phaseMs: 5000,
        apiWriters: 4,
        sqlWriters: 2,
        lockWriters: 2,
      });
    },
  );
});

t.test('one instance: concurrent writes (and SQL transactions) against two syncing clients', async (t) => {
  const app = await buildContactsApp(t);
  const user = await createUser(app);
  await syncRace(t, {
    endpoints: [viaInject(app, user)],
    userId: user.id,
    sql: backend === 'postgres' ? await pgSessions(t, app.config.databaseUrl!, 3) : embeddedSessions(app, 1),
    count: async () =>
      (
        await app.db
          .selectFrom('contacts')
          .where('owner_id', '=', user.id)
          .select((eb) => eb.fn.countAll<number>().as('n'))
          .executeTakeFirstOrThrow()
      ).n,
    invalidate: () => app.cache.invalidate(user.id),
    seed: 42,
    phases: 3,
    phaseMs: 3000,
    apiWriters: 4,
    sqlWriters: 1,
    // The embedded session is everyone's: a transaction held open stops every request meanwhile.
    longHolds: backend === 'postgres',
    // A held row lock would hold the embedded database's one session, which the API write needs.
    lockWriters: backend === 'postgres' ? 1 : 0,
  });
});

type Query = (text: string, params?: unknown[]) => Promise<any[]>;

/** The 503 of a write PostgreSQL aborted to break a deadlock (plugins/http/error-handler.ts). */
const CONFLICT = 'Service unavailable: the write met a concurrent one and was not applied; retry';

/** Database sessions beside the service, each used by one writer at a time. */
interface Sessions {
  /** Runs `work` on session `i`. */
  with(i: number, work: (query: Query) => Promise<void>): Promise<void>;
  size: number;
}

async function pgSessions(t: Test, url: string, size: number): Promise<Sessions> {
  const clients = await Promise.all(Array.from({ length: size }, () => connect(t, url)));
  return {
    size,
    with: (i, work) => work(async (text, params) => (await clients[i]!.query(text, params as unknown[])).rows),
  };
}

/** The embedded database's one session, taken for a whole transaction (every request waits meanwhile). */
function embeddedSessions(app: FastifyInstance, size: number): Sessions {
  return {
    size,
    with: (_i, work) =>
      app.db
        .connection()
        .execute((conn) => work(async (text, params) => (await conn.executeQuery(CompiledQuery.raw(text, params ?? []))).rows as any[])),
  };
}

interface SyncRaceOptions {
  endpoints: Endpoint[];
  userId: number;
  sql: Sessions;
  count(): Promise<number>;
  invalidate(): Promise<void>;
  seed: number;
  phases: number;
  phaseMs: number;
  apiWriters: number;
  sqlWriters: number;
  lockWriters: number;
  /** Whether some SQL transactions stay open for over a second (default true). */
  longHolds?: boolean;
}

interface SyncPage {
  contacts: Contact[];
  deleted: number[];
  next_token: string;
  has_more: boolean;
}

/** A syncing client: applies every page in order. */
class Replica {
  readonly contacts = new Map<number, Contact>();
  token: string | undefined;
  midRound = false;
  pages = 0;
  rounds = 0;
  constructor(readonly name: string) {}
  async step(endpoint: Endpoint, limit: number): Promise<void> {
    const query = new URLSearchParams({ limit: String(limit), ...(this.token ? { token: this.token } : {}) });
    const res = await endpoint.send('GET', `/api/contacts/sync?${query}`);
    if (res.status !== 200) throw new Error(`${this.name} sync through ${endpoint.name}: ${res.status} ${JSON.stringify(res.body)}`);
    const page = res.body as SyncPage;
    for (const contact of page.contacts) this.contacts.set(contact.id, contact);
    for (const id of page.deleted) this.contacts.delete(id);
    this.token = page.next_token;
    this.midRound = page.has_more;
    this.pages++;
    if (!page.has_more) this.rounds++;
  }
}

/**
 * Phases of concurrent writers (API writes through every endpoint, SQL transactions held open and
 * committed late or rolled back, API writes waiting on a row lock) against two syncing clients, one
 * keeping its token throughout and one starting a full sync each phase. After each phase the writers
 * stop, each client finishes its round and syncs one more, and both copies must equal the server's
 * contacts exactly.
 */
async function syncRace(t: Test, options: SyncRaceOptions): Promise<void> {
  const { endpoints, userId, sql } = options;
  const random = seededRandom(options.seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
  const live = new Set<number>();
  const tags = new Map<number, string>();
  /** Every tag a write answered, with the write that answered it. */
  const issued = new Map<string, string>();
  const counts: Record<string, number> = {};
  const count = (what: string) => (counts[what] = (counts[what] ?? 0) + 1);
  const problems: string[] = [];
  let serial = 0;
  const started = Date.now();

  for (let i = 0; i < 30; i++) {
    const res = await endpoints[0]!.send('POST', '/api/contacts/', contactBody({ email: `seed${i}@race.example` }));
    live.add(res.body.id);
    tags.set(res.body.id, res.headers.etag!);
  }
  const someone = () => (live.size === 0 ? 2147483647 : pick([...live]));

  async function apiWrite(): Promise<void> {
    const endpoint = pick(endpoints);
    const dice = random();
    const n = ++serial;
    const id = someone();
    const conditional = random() < 0.3 && tags.has(id) ? { 'if-match': tags.get(id)! } : undefined;
    let res: Answer;
    let op: string;
    if (dice < (live.size > 200 ? 0.1 : 0.3)) {
      op = 'create';
      res = await endpoint.send('POST', '/api/contacts/', contactBody({ email: `api${n}@race.example`, first_name: `Api${n}` }));
      if (res.status === 201) live.add(res.body.id);
    } else if (dice < 0.55) {
      op = 'patch';
      res = await endpoint.send(
        'PATCH',
        `/api/contacts/${id}`,
        random() < 0.5 ? { first_name: `Patch${n}` } : { additional_data: { n } },
        conditional,
      );
    } else if (dice < 0.65) {
      op = 'put';
      res = await endpoint.send(
        'PUT',
        `/api/contacts/${id}`,
        { ...contactBody({ email: `put${n}@race.example` }), last_name: `Put${n}` },
        conditional,
      );
    } else if (dice < 0.72) {
      op = 'patch, nothing to write';
      res = await endpoint.send('PATCH', `/api/contacts/${id}`, {}, conditional);
    } else {
      op = 'delete';
      res = await endpoint.send('DELETE', `/api/contacts/${id}`, undefined, conditional);
      if (res.status === 200) live.delete(id);
    }
    // 503: PostgreSQL broke a deadlock with a SQL writer holding the owner's book (see sqlWrite); nothing was applied.
    const expected = [...(op === 'create' ? [201] : conditional ? [200, 404, 412] : [200, 404]), 503];
    if (!expected.includes(res.status)) problems.push(`${op} through ${endpoint.name}: ${res.status} ${JSON.stringify(res.body)}`);
    if (res.status === 503 && res.body.detail !== CONFLICT)
      problems.push(`${op} through ${endpoint.name}: 503 ${JSON.stringify(res.body)}`);
    if (res.status < 300 && op !== 'delete') {
      const tag = res.headers.etag!;
      // Every write makes a new state, and a state's tag never repeats for the contact. A PATCH
      // with nothing to write answers the state as it is (perhaps one a racing write has yet to report).
      if (op !== 'patch, nothing to write') {
        const key = `${res.body.id} ${tag}`;
        const write = `${op} #${n} through ${endpoint.name} (${res.body.updated_at})`;
        if (issued.has(key)) problems.push(`${write}: ETag ${tag} of contact ${res.body.id} issued before by ${issued.get(key)}`);
        issued.set(key, write);
      }
      tags.set(res.body.id, tag);
    }
    count(`api ${op} ${res.status}`);
  }

  /** A transaction beside the API: writes, stays open (now and then across several sync rounds), commits or rolls back. */
  async function sqlWrite(session: number): Promise<void> {
    await sql.with(session, async (query) => {
      const n = ++serial;
      const inserted: number[] = [];
      const removed: number[] = [];
      await query('begin');
      try {
        const dice = random();
        if (dice < 0.35) {
          await query(
            `update contacts set last_name = $1, updated_at = greatest(now(), updated_at + interval '1 millisecond') where owner_id = $2 and id = $3`,
            [`Sql${n}`, userId, someone()],
          );
        } else if (dice < 0.65) {
          const rows = await query(
            `insert into contacts (owner_id, first_name, last_name, email, phone, birthday) values ($1, 'Sql', $2, $3, '+14155550100', '1980-02-29') returning id`,
            [userId, `Insert${n}`, `sql${n}@race.example`],
          );
          inserted.push(rows[0].id);
        } else if (dice < 0.8) {
          const rows = await query('delete from contacts where owner_id = $1 and id = $2 returning id', [userId, someone()]);
          removed.push(...rows.map((row) => row.id));
        } else {
          // Several rows in one transaction, in id order (no deadlock between writers).
          const ids = [...new Set([someone(), someone(), someone()])].sort((x, y) => x - y);
          for (const id of ids.slice(0, -1)) {
            await query(
              `update contacts set first_name = $1, updated_at = greatest(now(), updated_at + interval '1 millisecond') where owner_id = $2 and id = $3`,
              [`Multi${n}`, userId, id],
            );
          }
          const rows = await query('delete from contacts where owner_id = $1 and id = $2 returning id', [userId, ids.at(-1)]);
          removed.push(...rows.map((row) => row.id));
        }
        // Mostly short; one in eight stays open for over a second, across several sync rounds.
        const long = random() < 0.125 && options.longHolds !== false;
        await sleep(long ? 800 + random() * 800 : 10 + random() * (options.longHolds === false ? 30 : 150));
        if (random() < 0.1) {
          await query('rollback');
          count('sql rolled back');
          return;
        }
        await query('commit');
        count('sql committed');
        for (const id of inserted) live.add(id);
        for (const id of removed) live.delete(id);
      } catch (error) {
        await query('rollback').catch(() => undefined);
        // Several rows written in one transaction hold the owner's book (migration 033) while the
        // next row's lock may be the API's, which waits for the book: PostgreSQL aborts one side.
        if ((error as { code?: string }).code === '40P01') count('sql deadlock, rolled back');
        else problems.push(`sql: ${(error as Error).message}`);
      }
    });
    if (options.longHolds === false) await sleep(50 + random() * 100);
  }

  /**
   * An API write that waits on a row lock this session holds, so its transaction commits late. The
   * session writes nothing itself: a write would then wait for the owner's address book, which
   * another writer holding it may be waiting to lock this row with. Waiting for the row, it can
   * still be part of such a cycle (first in the row's queue), which PostgreSQL breaks.
   */
  async function lockedWrite(session: number): Promise<void> {
    await sql.with(session, async (query) => {
      const id = someone();
      const n = ++serial;
      await query('begin');
      try {
        await query('select id from contacts where owner_id = $1 and id = $2 for update', [userId, id]);
      } catch (error) {
        await query('rollback');
        if ((error as { code?: string }).code === '40P01') count('locked write: deadlock, rolled back');
        else problems.push(`locked write: ${(error as Error).message}`);
        return;
      }
      const endpoint = pick(endpoints);
      const pending = endpoint.send('PATCH', `/api/contacts/${id}`, { first_name: `Waited${n}` });
      await sleep(30 + random() * 250);
      await query('commit');
      const res = await pending;
      if (![200, 404].includes(res.status) && !(res.status === 503 && res.body.detail === CONFLICT))
        problems.push(`locked patch through ${endpoint.name}: ${res.status} ${JSON.stringify(res.body)}`);
      count(`api patch behind a lock ${res.status}`);
    });
  }

  const replicas = [new Replica('keeper'), new Replica('restarter')];
  const limits = [1, 2, 5, 20, 100, 1000];

  async function everything(): Promise<Contact[]> {
    await options.invalidate();
    const all: Contact[] = [];
    for (let skip = 0; ; skip += 1000) {
      const res = await endpoints[0]!.send('GET', `/api/contacts/?limit=1000&skip=${skip}`);
      all.push(...res.body);
      if (res.body.length < 1000) return all;
    }
  }

  for (let phase = 0; phase < options.phases; phase++) {
    let stopped = false;
    const until = Date.now() + options.phaseMs;
    const loop = async (work: () => Promise<void>) => {
      while (!stopped && Date.now() < until) await work();
    };
    replicas[1]!.token = undefined;
    replicas[1]!.contacts.clear();
    const writers = [
      ...Array.from({ length: options.apiWriters }, () => loop(apiWrite)),
      ...Array.from({ length: options.sqlWriters }, (_, i) => loop(() => sqlWrite(i))),
      ...Array.from({ length: options.lockWriters }, (_, i) => loop(() => lockedWrite(options.sqlWriters + i))),
    ];
    const syncers = replicas.map((replica) =>
      loop(async () => {
        await replica.step(pick(endpoints), pick(limits));
        await sleep(random() * 20);
      }),
    );
    await Promise.all(writers);
    stopped = true;
    await Promise.all(syncers);

    // Every writer is done and committed: finish the round under way, then one more from scratch.
    for (const replica of replicas) {
      while (replica.midRound) await replica.step(pick(endpoints), pick(limits));
      do await replica.step(pick(endpoints), pick(limits));
      while (replica.midRound);
    }
    const server = await everything();
    t.equal(server.length, await options.count(), `phase ${phase}: the list holds every row`);
    for (const replica of replicas) {
      const copy = [...replica.contacts.values()].sort((x, y) => x.id - y.id);
      const held = new Map(server.map((c) => [c.id, c]));
      const summary = {
        missing: server.filter((c) => !replica.contacts.has(c.id)).map((c) => c.id),
        extra: copy.filter((c) => !held.has(c.id)).map((c) => c.id),
        differing: copy.filter((c) => held.has(c.id) && JSON.stringify(c) !== JSON.stringify(held.get(c.id))).map((c) => c.id),
      };
      t.strictSame(
        summary,
        { missing: [], extra: [], differing: [] },
        `phase ${phase}: ${replica.name}'s copy has exactly the server's contacts`,
      );
      t.strictSame(copy, server, `phase ${phase}: ${replica.name}'s copy equals the server's, every field`);
    }
  }
  t.strictSame(problems, [], 'no write answered anything unexpected');
  const writes = Object.entries(counts).reduce((sum, [, n]) => sum + n, 0);
  // One owner's writes queue on its address book (migration 033), behind SQL transactions held for up to 1.6 s.
  t.ok(writes > options.phases * 25, `a real load: ${writes} writes`);
  t.comment(
    `sync race over ${endpoints.map((e) => e.name).join(' + ')}: ${options.phases} phases of ${options.phaseMs} ms, ${writes} writes ` +
      `${JSON.stringify(counts)}; sync pages ${replicas.map((r) => `${r.name} ${r.pages}`).join(', ')}; rounds ` +
      `${replicas.map((r) => `${r.name} ${r.rounds}`).join(', ')}; ${live.size} contacts at the end; ${Date.now() - started} ms`,
  );
}
