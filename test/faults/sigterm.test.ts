/**
 * SIGTERM under load, against real processes. Slow requests are made by holding a row lock from
 * the test: a create whose e-mail collides with a row the test inserted but has not committed
 * waits on the unique index until the test's transaction ends.
 *   - Requests in flight when the signal lands are all answered, then the process exits 0.
 *   - A request that never finishes does not hold the process: it exits non-zero once
 *     SHUTDOWN_TIMEOUT_MS has passed.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import t, { type Test } from 'tap';
import { backend, smtpCapture } from '../helper.js';
import {
  describe,
  type Outcome,
  privatePostgres,
  processTestsUnavailable,
  scratchDir,
  type Service,
  serviceEnv,
  signUp,
  startLoad,
  startService,
} from './processes.js';

/** src/server.ts: the default shutdown deadline. */
const DEFAULT_SHUTDOWN_TIMEOUT_MS = 10_000;
/** Requests sent this close to the signal may reach a server that is already closing. */
const SIGNAL_RACE_MS = 50;

interface Setup {
  service: Service;
  /** The user whose creates the locker holds. */
  token: string;
  /** Another user's, for the load. */
  loadToken: string;
  /** A connection of the test's own, holding an open transaction. */
  locker: pg.Client;
  ownerId: number;
  databaseUrl: string;
}

async function setUp(t: Test, name: string, env: Record<string, string> = {}): Promise<Setup> {
  const db = await privatePostgres(t);
  const mailbox = await smtpCapture(t);
  // The creates blocked on the locker's rows wait past the default statement timeout on a loaded machine.
  const service = await startService(
    t,
    serviceEnv(db.url, mailbox.url, await scratchDir(t), { LOG_LEVEL: 'info', DB_STATEMENT_TIMEOUT_MS: '120000', ...env }),
  );
  const token = await signUp(service.url, mailbox, name);
  // The load is another user's: the held creates keep their owner's address book (migration 033),
  // which every write of that owner waits for.
  const loadToken = await signUp(service.url, mailbox, `${name}load`);
  const me = (await (await fetch(`${service.url}/api/users/me`, { headers: { authorization: `Bearer ${token}` } })).json()) as {
    id: number;
  };
  const locker = new pg.Client({ connectionString: db.url });
  locker.on('error', () => undefined);
  await locker.connect();
  t.teardown(() => locker.end().catch(() => undefined));
  await locker.query('begin');
  return { service, token, loadToken, locker, ownerId: me.id, databaseUrl: db.url };
}

/** Inserts (uncommitted) contacts with these e-mails, so that creating them through the service blocks. */
async function holdEmails(setup: Setup, emails: string[]): Promise<void> {
  for (const email of emails) {
    await setup.locker.query(
      `insert into contacts (owner_id, first_name, last_name, email, phone, birthday) values ($1, 'Held', 'Lock', $2, '+14155550100', '1990-01-01')`,
      [setup.ownerId, email],
    );
  }
}

/** POST creates of `emails`; each resolves with its outcome. */
function slowCreates(setup: Setup, emails: string[]): Promise<Outcome>[] {
  return emails.map(async (email) => {
    const start = Date.now();
    try {
      const response = await fetch(`${setup.service.url}/api/contacts/`, {
        method: 'POST',
        headers: { authorization: `Bearer ${setup.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ first_name: 'Slow', last_name: 'Create', email, phone: '+14155550101', birthday: '1985-03-04' }),
        signal: AbortSignal.timeout(30_000),
      });
      const body = (await response.json()) as { id?: number; detail?: string };
      return { op: 'create', start, end: Date.now(), status: response.status, id: body.id, detail: body.detail } satisfies Outcome;
    } catch (error) {
      const e = error as { cause?: { code?: string }; name?: string; message: string };
      return { op: 'create', start, end: Date.now(), status: null, error: e.cause?.code ?? e.name ?? e.message } satisfies Outcome;
    }
  });
}

/**
 * Resolves once the service's statements for all of `slow` wait for a lock (the owner's address
 * book, which the held creates keep: migration 033); fails if one is
 * answered first. Asks on a connection of its own: inside the locker's open transaction,
 * pg_stat_activity would keep showing the first snapshot it took.
 */
async function waitForBlocked(setup: Setup, slow: Promise<Outcome>[]): Promise<void> {
  const settled: Outcome[] = [];
  for (const request of slow) void request.then((o) => settled.push(o));
  const monitor = new pg.Client({ connectionString: setup.databaseUrl });
  await monitor.connect();
  try {
    for (let attempt = 0; attempt < 200; attempt++) {
      if (settled.length > 0) throw new Error(`a slow request was answered before it blocked: ${describe(settled)}`);
      const { rows } = await monitor.query<{ n: number }>(
        `select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and query like '%"address_books"%'`,
      );
      if (rows[0]!.n >= slow.length) return;
      await sleep(50);
    }
    throw new Error(`fewer than ${slow.length} requests blocked`);
  } finally {
    await monitor.end();
  }
}

/** The ids of these contacts that are stored (read straight from PostgreSQL: the service is gone). */
async function storedIds(databaseUrl: string, ids: number[]): Promise<Set<number>> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ id: number }>('select id from contacts where id = any($1::int[])', [ids]);
    return new Set(rows.map((r) => r.id));
  } finally {
    await client.end();
  }
}

/** The process's exit, or null if it is still running after `ms`. */
async function exitWithin(service: Service, ms: number) {
  return Promise.race([service.exit, sleep(ms).then(() => null)]);
}

t.test('SIGTERM with requests in flight: every one is answered, then exit 0', { skip: processTestsUnavailable(backend) }, async (t) => {
  const setup = await setUp(t, 'termflight');
  const held = Array.from({ length: 5 }, (_, i) => `held-${i}@example.com`);
  await holdEmails(setup, held);
  const load = startLoad({ baseUrl: setup.service.url, token: setup.loadToken, clients: 8, tag: 'term' });
  t.teardown(() => load.stop());
  await sleep(1_000);
  const slow = slowCreates(setup, held);
  await waitForBlocked(setup, slow);
  // Well clear of SIGNAL_RACE_MS, so the slow creates count as sent before the signal.
  await sleep(200);

  const signalAt = Date.now();
  setup.service.child.kill('SIGTERM');
  // The slow creates stay in flight well past the signal, then the test lets them through.
  await sleep(1_500);
  await setup.locker.query('rollback');
  const exit = await exitWithin(setup.service, DEFAULT_SHUTDOWN_TIMEOUT_MS + 5_000);
  await load.stop();
  const slowOutcomes = await Promise.all(slow);

  t.ok(exit, 'the process exited');
  t.equal(exit?.code, 0, `exit code 0 ${setup.service.stderr().slice(-2000)}`);
  const exitMs = exit ? exit.at - signalAt : null;
  t.ok(exitMs !== null && exitMs < DEFAULT_SHUTDOWN_TIMEOUT_MS, `exited before the deadline (${exitMs} ms after the signal)`);
  t.same(
    slowOutcomes.map((o) => o.status),
    held.map(() => 201),
    'every slow create in flight at the signal was answered 201',
  );
  t.ok(
    setup.service.logs.some((l) => l.msg === 'closing: finishing requests in flight'),
    'the close is logged',
  );

  const outcomes = [...load.outcomes, ...slowOutcomes];
  const before = outcomes.filter((o) => o.start < signalAt - SIGNAL_RACE_MS);
  const inFlight = before.filter((o) => o.end >= signalAt);
  const unanswered = before.filter((o) => o.status === null);
  t.equal(unanswered.length, 0, `every request sent before the signal got an answer: ${describe(unanswered)}`);
  const errors = before.filter((o) => o.status !== null && o.status >= 500);
  t.equal(errors.length, 0, `and none of them a 5xx: ${describe(errors)}`);
  const after = outcomes.filter((o) => o.start >= signalAt - SIGNAL_RACE_MS);
  // A request on a connection the server is closing may be reset, or refused once it stopped listening.
  const wrong = after.filter(
    (o) => !(o.status === null ? ['ECONNREFUSED', 'ECONNRESET', 'UND_ERR_SOCKET'].includes(o.error ?? '') : o.status < 500),
  );
  t.equal(wrong.length, 0, `requests sent after the signal are served or refused; never a 5xx or a hang: ${describe(wrong)}`);

  const acknowledged = outcomes.filter((o): o is Outcome & { id: number } => o.op === 'create' && o.status === 201);
  const stored = await storedIds(
    setup.databaseUrl,
    acknowledged.map((o) => o.id),
  );
  const lost = acknowledged.filter((o) => !stored.has(o.id));
  t.equal(lost.length, 0, `every one of the ${acknowledged.length} creates answered 201 is stored`);

  const tally = (list: Outcome[]) =>
    JSON.stringify(
      list.reduce<Record<string, number>>((acc, o) => {
        const key = String(o.status ?? o.error);
        acc[key] = (acc[key] ?? 0) + 1;
        return acc;
      }, {}),
    );
  t.comment(
    `in flight at the signal: ${inFlight.length} (${held.length} held on a lock for 1500 ms), answered ${inFlight.filter((o) => o.status !== null).length}: ${tally(inFlight)}`,
  );
  t.comment(`exit code ${exit?.code} ${exitMs} ms after SIGTERM; sent after the signal: ${tally(after)}`);
  t.comment(`lost writes: ${lost.length} of ${acknowledged.length} creates answered 201`);
});

t.test('SIGTERM with a stuck request: exit non-zero at SHUTDOWN_TIMEOUT_MS', { skip: processTestsUnavailable(backend) }, async (t) => {
  const deadlineMs = 2_000;
  const setup = await setUp(t, 'termstuck', { SHUTDOWN_TIMEOUT_MS: String(deadlineMs) });
  // Never let through: the transaction stays open until teardown.
  await holdEmails(setup, ['stuck@example.com']);
  const load = startLoad({ baseUrl: setup.service.url, token: setup.loadToken, clients: 4, tag: 'stuck' });
  t.teardown(() => load.stop());
  await sleep(500);
  const [stuck] = slowCreates(setup, ['stuck@example.com']);
  await waitForBlocked(setup, [stuck!]);

  const signalAt = Date.now();
  setup.service.child.kill('SIGTERM');
  const exit = await exitWithin(setup.service, deadlineMs + 5_000);
  await load.stop();
  const stuckOutcome = await stuck!;

  t.ok(exit, `the process exited instead of waiting for the stuck request ${setup.service.stderr().slice(-2000)}`);
  const exitMs = exit ? exit.at - signalAt : null;
  t.ok(exitMs !== null && exitMs >= deadlineMs - SIGNAL_RACE_MS, `not before the deadline (${exitMs} ms)`);
  t.ok(exitMs !== null && exitMs <= deadlineMs + 1_500, `but at it: within ${deadlineMs} ms + 1500 ms (${exitMs} ms)`);
  t.ok(exit && exit.code !== 0 && exit.code !== null, `a non-zero exit code (${exit?.code})`);
  t.ok(
    setup.service.logs.some((l) => l.level >= 50 && /shutdown deadline/.test(l.msg ?? '')),
    'the timeout is logged as an error',
  );

  const before = load.outcomes.filter((o) => o.start < signalAt - SIGNAL_RACE_MS);
  const unanswered = before.filter((o) => o.status === null || o.status >= 500);
  t.equal(unanswered.length, 0, `the other requests sent before the signal were answered: ${describe(unanswered)}`);

  const acknowledged = load.outcomes.filter((o): o is Outcome & { id: number } => o.op === 'create' && o.status === 201);
  const stored = await storedIds(
    setup.databaseUrl,
    acknowledged.map((o) => o.id),
  );
  const lost = acknowledged.filter((o) => !stored.has(o.id));
  t.equal(lost.length, 0, `every one of the ${acknowledged.length} creates answered 201 is stored`);

  t.comment(
    `deadline ${deadlineMs} ms: exit code ${exit?.code} ${exitMs} ms after SIGTERM; the stuck create: ${stuckOutcome.status ?? stuckOutcome.error}`,
  );
  t.comment(`lost writes: ${lost.length} of ${acknowledged.length} creates answered 201`);
});
