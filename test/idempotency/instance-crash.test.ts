/**
 * An instance killed (SIGKILL) while it writes a create with an Idempotency-Key, a real process on
 * a PostgreSQL database that another instance (in this process) shares: the key is held only while
 * the dead instance's transaction lives, nothing of that write remains, and a retry through the
 * other instance writes it once. The
 * create is held mid-write by a row the test inserted with the same e-mail and has not committed:
 * the service's insert waits on the unique index inside the key's transaction.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import t from 'tap';
import { loadConfig } from '../../plugins/config.js';
import { buildApp } from '../../src/app.js';
import { signUp, startService } from '../faults/processes.js';
import { backend, smtpCapture, testEnv } from '../helper.js';

const IN_PROGRESS = JSON.stringify({ detail: 'A request with this Idempotency-Key is in progress' });

t.test(
  'a create in flight on an instance that dies leaves its key free once its transaction ends, and the retry writes once',
  { skip: backend !== 'postgres' && 'two processes cannot share one embedded database' },
  async (t) => {
    const mailbox = await smtpCapture(t);
    const env: Record<string, string> = { ...(await testEnv(t)), SMTP_URL: mailbox.url, LOG_LEVEL: 'warn' };
    const first = await startService(t, env);
    const token = await signUp(first.url, mailbox, 'crash_user');
    const locker = new pg.Client({ connectionString: env.DATABASE_URL });
    locker.on('error', () => undefined);
    await locker.connect();
    t.teardown(() => locker.end().catch(() => undefined));
    const { rows: users } = await locker.query<{ id: number }>(`select id from users where username = 'crash_user'`);
    const ownerId = users[0]!.id;
    const email = 'held@example.com';
    await locker.query('begin');
    await locker.query(
      `insert into contacts (owner_id, first_name, last_name, email, phone, birthday) values ($1, 'Held', 'Row', $2, '+14155550100', '1990-01-01')`,
      [ownerId, email],
    );

    const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'idempotency-key': 'crash' };
    const body = JSON.stringify({ first_name: 'Ada', last_name: 'Crash', email, phone: '+14155550101', birthday: '1985-03-04' });
    const inFlight = fetch(`${first.url}/api/contacts/`, { method: 'POST', headers, body }).then(
      (response) => response.status,
      () => 'no answer',
    );
    const monitor = new pg.Client({ connectionString: env.DATABASE_URL });
    await monitor.connect();
    t.teardown(() => monitor.end());
    for (let waited = 0; ; waited += 20) {
      const { rows } = await monitor.query<{ n: number }>(`select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock'`);
      if (rows[0]!.n > 0) break;
      if (waited > 10_000) throw new Error('the create never waited for the held row');
      await sleep(20);
    }
    first.child.kill('SIGKILL');
    await first.exit;
    t.equal(await inFlight, 'no answer', 'the client of the dead instance got no answer');

    const second = await buildApp({ config: await loadConfig(env) });
    t.teardown(() => second.close());
    const create = () => second.inject({ method: 'POST', url: '/api/contacts/', headers, payload: body });
    const meanwhile = await create();
    t.equal(meanwhile.statusCode, 409, "the dead instance's transaction still runs, blocked: its key is in progress");
    t.equal(meanwhile.body, IN_PROGRESS);
    t.equal(meanwhile.headers['retry-after'], '1');

    // The held row goes away; the dead instance's statement then ends, its transaction with it.
    await locker.query('rollback');
    const started = Date.now();
    let retried = await create();
    while (retried.statusCode === 409 && Date.now() - started < 10_000) {
      await sleep(100);
      retried = await create();
    }
    t.equal(retried.statusCode, 201, `written by the retry ${Date.now() - started} ms after the row was released`);
    t.equal(retried.headers['idempotent-replayed'], undefined, 'nothing of the dead write was kept');
    const { rows } = await monitor.query<{ n: number }>(`select count(*)::int as n from contacts where owner_id = $1`, [ownerId]);
    t.equal(rows[0]!.n, 1, 'one contact');
    const replay = await create();
    t.equal(replay.headers['idempotent-replayed'], 'true');
  },
);
