/**
 * Redis killed (SIGKILL) and started again under load, against real processes: the service keeps
 * answering from PostgreSQL (docs/performance.md promises that nothing fails), loses no acknowledged create,
 * its /readyz stays 200 and says whether the cache is available, /metrics shows Redis down and
 * then up, and it tells the log once that Redis went away and once that it came back, per
 * component that uses Redis, instead of a warning per request.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { backend, smtpCapture } from '../helper.js';
import {
  dependencies,
  describe,
  type LogLine,
  listAllIds,
  type Outcome,
  privatePostgres,
  privateRedis,
  processTestsUnavailable,
  scratchDir,
  serviceEnv,
  signUp,
  startLoad,
  startService,
  summarise,
  type Window,
} from './processes.js';

/** The contract: 2xx (and a ready /readyz) again within this long after the dependency is back. */
const RECOVERY_MS = 5_000;
const GRACE_MS = 1_000;
const DOWN_MS = 3_000;
/** Log lines this long after Redis is back still belong to the outage (ioredis retries once a second). */
const LOG_TAIL_MS = 3_000;

/** Fastify's own line per request and per response. */
const isRequestLog = (line: LogLine) => line.msg === 'incoming request' || line.msg === 'request completed';

t.test('Redis killed and started again mid-load', { skip: processTestsUnavailable(backend) }, async (t) => {
  const db = await privatePostgres(t);
  const redis = await privateRedis(t);
  const mailbox = await smtpCapture(t);
  const service = await startService(t, serviceEnv(db.url, mailbox.url, await scratchDir(t), { REDIS_URL: redis.url, LOG_LEVEL: 'info' }));
  const token = await signUp(service.url, mailbox, 'redisfault');

  const load = startLoad({ baseUrl: service.url, token, clients: 12, readyEveryMs: 200, tag: 'redis' });

  t.teardown(() => load.stop());
  await sleep(2_000);
  const outage: Window = { from: Date.now(), to: 0 };
  await redis.kill();
  await sleep(DOWN_MS);
  const metricsWhileDown = await dependencies(service.url);
  const starting = Date.now();
  await redis.start();
  outage.to = Date.now();
  await sleep(RECOVERY_MS + 1_000);
  const metricsAfter = await dependencies(service.url);
  await load.stop();

  const summary = summarise(load.outcomes, [outage], GRACE_MS);
  const api = load.outcomes.filter((o) => o.op !== 'ready');
  t.equal(service.child.exitCode, null, `the service is still running ${service.stderr().slice(-2000)}`);
  t.equal(summary.unanswered.length, 0, `every request got an HTTP answer: ${describe(summary.unanswered)}`);
  t.equal(summary.other5xx.length, 0, `no 5xx other than 503: ${describe(summary.other5xx)}`);
  t.equal(summary.stray503.length, 0, `503 only inside the outage window: ${describe(summary.stray503)}`);
  t.equal(summary.count503, 0, 'no request fails while Redis is away: everything is served from PostgreSQL');
  const during = api.filter((o) => o.start >= outage.from && o.end <= starting);
  t.ok(
    during.length > 0 && during.every((o) => o.status !== null && o.status < 300),
    `requests during the outage succeed (${during.length})`,
  );
  const recoveryMs = summary.recoveryMs[0] ?? null;
  t.ok(recoveryMs !== null && recoveryMs <= RECOVERY_MS, `2xx within ${RECOVERY_MS} ms of Redis being back (${recoveryMs} ms)`);

  // /readyz stays 200 (the replica serves without Redis) and says the cache is unavailable, then ok again once it is back.
  const ready = load.outcomes.filter((o) => o.op === 'ready');
  const readyWhileDown = ready.filter((o) => o.start >= outage.from + 500 && o.end <= starting);
  t.ok(
    readyWhileDown.length > 0 && readyWhileDown.every((o) => o.status === 200 && o.cache === 'unavailable'),
    `/readyz 200 with "cache": "unavailable" while Redis is away (${readyWhileDown.length} probes)`,
  );
  t.same(
    ready.filter((o) => o.status !== 200).map((o) => o.status),
    [],
    '/readyz is never 503 for want of Redis',
  );
  const firstReady = ready.filter((o) => o.start >= outage.to && o.cache === 'ok').sort((a, b) => a.end - b.end)[0];
  const readyAfterMs = firstReady ? firstReady.end - outage.to : null;
  t.ok(
    readyAfterMs !== null && readyAfterMs <= RECOVERY_MS,
    `/readyz says "cache": "ok" within ${RECOVERY_MS} ms of Redis being back (${readyAfterMs} ms)`,
  );
  t.same(metricsWhileDown, { redis: 0, database: 1 }, 'contacts_dependency_up while Redis is away');
  t.same(metricsAfter, { redis: 1, database: 1 }, 'and once it is back');

  const acknowledged = api.filter((o): o is Outcome & { id: number } => o.op === 'create' && o.status === 201);
  const stored = await listAllIds(service.url, token).catch((error: Error) => {
    t.fail(`contacts could not be listed afterwards: ${error.message}`);
    return new Set<number>();
  });
  const lost = acknowledged.filter((o) => !stored.has(o.id));
  t.equal(lost.length, 0, `every one of the ${acknowledged.length} creates answered 201 is stored`);

  // The log during the outage: one warning when it starts and one info line when it ends, per component.
  const lines = service.logs.filter((l) => l.time >= outage.from && l.time <= outage.to + LOG_TAIL_MS && !isRequestLog(l));
  const tally = (level: number) => {
    const counts = new Map<string, number>();
    for (const l of lines.filter((x) => x.level === level)) counts.set(l.msg ?? '', (counts.get(l.msg ?? '') ?? 0) + 1);
    return counts;
  };
  const warnings = tally(40);
  const infos = tally(30);
  const errors = lines.filter((l) => l.level >= 50);
  const show = (counts: Map<string, number>) => [...counts].map(([msg, n]) => `${n}× "${msg}"`).join(', ') || 'none';
  t.equal(errors.length, 0, `no error lines: ${errors.map((l) => l.msg).join(' | ')}`);
  for (const [msg, n] of warnings) t.ok(n <= 1, `warning "${msg}" logged once per outage (${n})`);
  for (const [msg, n] of infos) t.ok(n <= 1, `info "${msg}" logged once per outage (${n})`);
  t.ok(warnings.size >= 1, 'the outage is logged');
  t.ok(infos.size >= 1, 'the end of the outage is logged');
  const requestLines = service.logs.filter((l) => l.time >= outage.from && l.time <= outage.to + LOG_TAIL_MS && isRequestLog(l)).length;

  t.comment(`requests: ${summary.total} API, ${ready.length} /readyz; by status ${JSON.stringify(summary.byStatus)}`);
  t.comment(
    `outage window ${outage.to - outage.from} ms, 503 count ${summary.count503}, recovery ${recoveryMs} ms, /readyz 200 after ${readyAfterMs} ms`,
  );
  t.comment(`lost writes: ${lost.length} of ${acknowledged.length} creates answered 201`);
  t.comment(
    `log lines from the kill to ${LOG_TAIL_MS} ms after Redis was back, request lines aside (${requestLines} of those): warn ${show(warnings)}; info ${show(infos)}; error ${errors.length}`,
  );
});
