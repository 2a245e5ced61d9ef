/**
 * PostgreSQL going away under load, against real processes: the service on a private cluster is
 * loaded with concurrent reads and writes while the cluster is restarted (`pg_ctl restart -m fast`)
 * and then stopped for a while and started again. The service must stay up, answer 503 (never
 * another 5xx, never a refused connection) only while the database is away, serve 2xx again
 * within 5 s of it being back, lose no acknowledged create, and its /readyz and the database's
 * `contacts_dependency_up` must follow.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { backend, smtpCapture } from '../helper.js';
import {
  dependencies,
  describe,
  listAllIds,
  type LogLine,
  type Outcome,
  privatePostgres,
  processTestsUnavailable,
  scratchDir,
  serviceEnv,
  signUp,
  startLoad,
  startService,
  summarise,
  type Window,
} from './processes.js';

/** The contract: 2xx again within this long after the database is back. */
const RECOVERY_MS = 5_000;
/** 503s answered this long after the database is back still count as the outage (answers already on their way). */
const GRACE_MS = 1_000;
/** How long the second fault keeps the database stopped. */
const DOWN_MS = 2_500;
const UNAVAILABLE = 'Service unavailable: the database is not reachable';
/** Log lines this long after the database is back still belong to its outage. */
const LOG_TAIL_MS = 2_000;
const IDLE_CLOSED = 'an idle database connection was closed by the server';
/** plugins/db.ts: connections in the pool. */
const POOL_SIZE = 10;

/** Fastify's own line per request and per response. */
const isRequestLog = (line: LogLine) => line.msg === 'incoming request' || line.msg === 'request completed';

t.test('PostgreSQL restarted, then stopped and started, mid-load', { skip: processTestsUnavailable(backend) }, async (t) => {
  const db = await privatePostgres(t);
  const mailbox = await smtpCapture(t);
  const service = await startService(t, serviceEnv(db.url, mailbox.url, await scratchDir(t), { LOG_LEVEL: 'info' }));
  const token = await signUp(service.url, mailbox, 'pgfault');

  const load = startLoad({ baseUrl: service.url, token, clients: 12, readyEveryMs: 200, tag: 'pg' });

  t.teardown(() => load.stop());
  await sleep(2_000);

  // Fault 1: the restart of the issue.
  const restart: Window = { from: Date.now(), to: 0 };
  await db.restart();
  await db.waitUntilAnswering();
  restart.to = Date.now();
  await sleep(3_000);

  // Fault 2: away long enough for readiness to be seen failing.
  const down: Window = { from: Date.now(), to: 0 };
  await db.stop();
  const stopped = Date.now();
  // An export or an import meets the outage as any request does: 503, never a cut-off file.
  const auth = { authorization: `Bearer ${token}` };
  const exported = await fetch(`${service.url}/api/contacts/export?format=csv`, { headers: auth });
  const imported = await fetch(`${service.url}/api/contacts/import`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'text/csv' },
    body: 'first_name,last_name,email,phone,birthday\r\nA,B,down@example.com,+14155550100,1990-01-01\r\n',
  });
  const metricsWhileStopped = await dependencies(service.url);
  await sleep(DOWN_MS - (Date.now() - stopped));
  const starting = Date.now();
  await db.start();
  await db.waitUntilAnswering();
  down.to = Date.now();
  await sleep(RECOVERY_MS + 1_000);
  const metricsAfter = await dependencies(service.url);
  await load.stop();

  const windows = [restart, down];
  const summary = summarise(load.outcomes, windows, GRACE_MS);
  const api = load.outcomes.filter((o) => o.op !== 'ready');
  const in503 = (w: Window) => api.filter((o) => o.status === 503 && o.end >= w.from && o.end <= w.to + GRACE_MS).length;

  t.equal(service.child.exitCode, null, `the service is still running ${service.stderr().slice(-2000)}`);
  t.equal(
    await fetch(`${service.url}/healthz`).then(
      (r) => r.status,
      () => 'refused',
    ),
    200,
    'and still listening',
  );
  t.same(
    summary.unanswered.length,
    0,
    `every request got an HTTP answer (no refused or reset connection): ${describe(summary.unanswered)}`,
  );
  t.same(summary.other5xx.length, 0, `no 5xx other than 503: ${describe(summary.other5xx)}`);
  t.same(summary.stray503.length, 0, `503 only inside an outage window (+${GRACE_MS} ms): ${describe(summary.stray503)}`);
  t.ok(in503(down) > 0, 'requests during the stop were answered 503');
  const bad503 = api.filter((o) => o.status === 503 && (o.detail !== UNAVAILABLE || !o.retryAfter));
  t.same(bad503.length, 0, `every 503 says the database is not reachable and carries Retry-After: ${describe(bad503)}`);
  for (const [what, res] of [
    ['export', exported],
    ['import', imported],
  ] as const) {
    t.equal(res.status, 503, `${what} while the database is stopped`);
    t.same(await res.json(), { detail: UNAVAILABLE }, `${what}: the outage's detail`);
  }
  summary.recoveryMs.forEach((ms, i) => {
    t.ok(ms !== null && ms <= RECOVERY_MS, `2xx again within ${RECOVERY_MS} ms of the database being back (fault ${i + 1}: ${ms} ms)`);
  });

  // Readiness follows reality: 503 while the database is stopped, 200 again once it is back.
  const ready = load.outcomes.filter((o) => o.op === 'ready');
  const whileStopped = ready.filter((o) => o.start >= stopped && o.end <= starting);
  t.ok(whileStopped.length > 0, `readiness was probed while the database was stopped (${whileStopped.length} probes)`);
  const readyNot503 = whileStopped.filter((o) => o.status !== 503);
  t.equal(readyNot503.length, 0, `/readyz answers 503 while the database is stopped: ${describe(readyNot503)}`);
  t.ok(
    whileStopped.every((o) => o.detail === 'Database unavailable'),
    '/readyz names the database',
  );
  const firstReady = ready.filter((o) => o.start >= down.to && o.status === 200).sort((a, b) => a.end - b.end)[0];
  const readyAfterMs = firstReady ? firstReady.end - down.to : null;
  t.ok(
    readyAfterMs !== null && readyAfterMs <= RECOVERY_MS,
    `/readyz 200 again within ${RECOVERY_MS} ms without a restart (${readyAfterMs} ms)`,
  );
  const lateReady = ready.filter((o) => o.start >= down.to + RECOVERY_MS);
  t.ok(lateReady.length > 0 && lateReady.every((o) => o.status === 200), '/readyz stays 200 afterwards');
  t.same(metricsWhileStopped, { database: 0 }, 'contacts_dependency_up while the database is stopped (this service has no Redis)');
  t.same(metricsAfter, { database: 1 }, 'and once it is back');

  // Every create acknowledged with 201 is there.
  const acknowledged = api.filter((o): o is Outcome & { id: number } => o.op === 'create' && o.status === 201);
  const stored = await listAllIds(service.url, token).catch((error: Error) => {
    t.fail(`contacts could not be listed afterwards: ${error.message}`);
    return new Set<number>();
  });
  const lost = acknowledged.filter((o) => !stored.has(o.id));
  t.equal(lost.length, 0, `every one of the ${acknowledged.length} creates answered 201 is stored`);

  // The log of each outage: one warning when it starts, one info line when it ends, per component;
  // the pool's line per dropped idle connection is bounded by the pool's size.
  const logLines = windows.map((w) => {
    const lines = service.logs.filter((l) => l.time >= w.from && l.time <= w.to + LOG_TAIL_MS && !isRequestLog(l));
    const counts = new Map<string, number>();
    for (const l of lines) {
      const key = `${l.level >= 50 ? 'error' : l.level >= 40 ? 'warn' : 'info'} "${l.msg}"`;
      counts.set(key, (counts.get(key) ?? 0) + 1);
    }
    return counts;
  });
  logLines.forEach((counts, i) => {
    const errors = [...counts.keys()].filter((line) => line.startsWith('error'));
    t.equal(errors.length, 0, `fault ${i + 1}: no error lines ${errors.join(', ')}`);
    for (const [line, n] of counts) {
      if (line.startsWith('error')) continue;
      if (line.endsWith(`"${IDLE_CLOSED}"`)) t.ok(n <= POOL_SIZE, `fault ${i + 1}: ${line} at most once per pooled connection (${n})`);
      else t.ok(n <= 1, `fault ${i + 1}: ${line} logged once per outage (${n})`);
    }
  });
  t.ok(logLines[1]!.has('warn "database not reachable; answering 503 until it is back"'), 'the outage is logged');
  t.ok(logLines[1]!.has('info "database reachable again"'), 'and its end');
  const show = (counts: Map<string, number>) => [...counts].map(([line, n]) => `${n}× ${line}`).join(', ');
  const fmt = (w: Window) => `${w.to - w.from} ms`;
  t.comment(`requests: ${summary.total} API, ${ready.length} /readyz; by status ${JSON.stringify(summary.byStatus)}`);
  t.comment(
    `fault 1 (pg_ctl restart -m fast): outage window ${fmt(restart)}, 503 count ${in503(restart)}, recovery ${summary.recoveryMs[0]} ms`,
  );
  t.comment(
    `fault 2 (stop ${DOWN_MS} ms, start): outage window ${fmt(down)}, 503 count ${in503(down)}, recovery ${summary.recoveryMs[1]} ms, /readyz 200 after ${readyAfterMs} ms, /readyz 503 while stopped ${whileStopped.length - readyNot503.length}/${whileStopped.length}`,
  );
  t.comment(`lost writes: ${lost.length} of ${acknowledged.length} creates answered 201`);
  logLines.forEach((counts, i) =>
    t.comment(`fault ${i + 1} log lines (to ${LOG_TAIL_MS} ms after the database was back, request lines aside): ${show(counts)}`),
  );
});
