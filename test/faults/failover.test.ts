/**
 * Losing the database machine, against real processes: two service instances over a Patroni pair
 * (synchronous_mode) behind HAProxy (test/faults/ha-cluster.ts), under a load of creates that each
 * carry an Idempotency-Key and are retried with it on 503, 409 in progress and network errors, as
 * the SDK does. Mid-load the leader's Patroni and PostgreSQL are SIGKILLed. Every create answered
 * 201 must be stored afterwards, none twice, no request answered anything but 201 or a retryable
 * 503/409, both instances still running; a sync client that synced before the kill and syncs after
 * it must end with exactly the stored contacts. Prints the time from the kill to the first 201.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { backend, smtpCapture } from '../helper.js';
import { haStackUnavailable, startHaCluster } from './ha-cluster.js';
import { processTestsUnavailable, scratchDir, serviceEnv, signUp, startService } from './processes.js';

const CLIENTS = 8;
/** A retry waits this long (the SDK waits longer; shorter here measures the failover more finely). */
const RETRY_MS = 100;
/** Load before the kill, and after the first write through the new leader. */
const BEFORE_KILL_MS = 3_000;
const AFTER_FAILOVER_MS = 3_000;
/** The bound on the kill to the first 201: Patroni's ttl (10 s) and loop_wait, plus HAProxy's checks, generously. */
const FIRST_WRITE_BOUND_MS = 45_000;
const UNAVAILABLE = 'Service unavailable: the database is not reachable';
const IN_PROGRESS = 'A request with this Idempotency-Key is in progress';

interface Attempt {
  key: string;
  start: number;
  end: number;
  status: number | null;
  error?: string;
  detail?: string;
  retryAfter?: string | null;
  replayed?: boolean;
  id?: number;
}

interface SyncPage {
  contacts: { id: number }[];
  deleted: number[];
  next_token: string;
  has_more: boolean;
}

/** Pages of GET /api/contacts/sync from `token` (a full sync without) until no more: the ids held after it, and the token to go on from. */
async function sync(baseUrl: string, token: string, held: Set<number>, from?: string): Promise<string> {
  let next = from;
  for (;;) {
    const query = new URLSearchParams({ limit: '500', ...(next ? { token: next } : {}) });
    const response = await fetch(`${baseUrl}/api/contacts/sync?${query}`, { headers: { authorization: `Bearer ${token}` } });
    if (response.status !== 200) throw new Error(`sync: ${response.status} ${await response.text()}`);
    const page = (await response.json()) as SyncPage;
    for (const contact of page.contacts) held.add(contact.id);
    for (const id of page.deleted) held.delete(id);
    next = page.next_token;
    if (!page.has_more) return next;
  }
}

/** Every contact of the user, page by page. */
async function listAll(baseUrl: string, token: string): Promise<{ id: number; email: string }[]> {
  const all: { id: number; email: string }[] = [];
  for (;;) {
    const response = await fetch(`${baseUrl}/api/contacts/?limit=1000&skip=${all.length}`, {
      headers: { authorization: `Bearer ${token}` },
    });
    if (response.status !== 200) throw new Error(`list: ${response.status} ${await response.text()}`);
    const page = (await response.json()) as { id: number; email: string }[];
    all.push(...page);
    if (page.length < 1000) return all;
  }
}

t.test(
  "the leader's Patroni and PostgreSQL SIGKILLed mid-load",
  { skip: processTestsUnavailable(backend) || haStackUnavailable() },
  async (t) => {
    const cluster = await startHaCluster();
    t.teardown(() => cluster.destroy());
    const mailbox = await smtpCapture(t);
    // One after the other: the first migrates the new database.
    const first = await startService(t, serviceEnv(cluster.url, mailbox.url, await scratchDir(t)));
    const second = await startService(t, serviceEnv(cluster.url, mailbox.url, await scratchDir(t)));
    const instances = [first, second];
    const token = await signUp(first.url, mailbox, 'failover');

    const attempts: Attempt[] = [];
    const finished = new Map<string, Attempt>();
    let sequence = 0;
    let stopped = false;

    /** One create, retried with its key until it is answered 201 or something not worth a retry. */
    async function create(baseUrl: string): Promise<void> {
      const n = sequence++;
      const key = `failover-${n}`;
      const body = JSON.stringify({
        first_name: 'Fail',
        last_name: `Over${n}`,
        email: `failover-${n}@example.com`,
        phone: `+1415${String(1_000_000 + n).slice(-7)}`,
        birthday: '1990-05-17',
      });
      for (;;) {
        const attempt: Attempt = { key, start: Date.now(), end: 0, status: null };
        try {
          const response = await fetch(`${baseUrl}/api/contacts/`, {
            method: 'POST',
            headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'idempotency-key': key },
            body,
            signal: AbortSignal.timeout(15_000),
          });
          const answer = (await response.json()) as { id?: number; detail?: string };
          attempt.status = response.status;
          attempt.detail = answer.detail;
          attempt.retryAfter = response.headers.get('retry-after');
          attempt.replayed = response.headers.get('idempotent-replayed') === 'true';
          attempt.id = answer.id;
        } catch (error) {
          const e = error as { name?: string; cause?: { code?: string } };
          attempt.error = e.name === 'TimeoutError' ? 'timeout' : (e.cause?.code ?? String(error));
        }
        attempt.end = Date.now();
        attempts.push(attempt);
        const retry = attempt.status === null || attempt.status === 503 || (attempt.status === 409 && attempt.detail === IN_PROGRESS);
        if (!retry) {
          finished.set(key, attempt);
          return;
        }
        await sleep(RETRY_MS);
      }
    }

    const clients = Array.from({ length: CLIENTS }, async (_, i) => {
      while (!stopped) await create(instances[i % instances.length]!.url);
    });

    await sleep(BEFORE_KILL_MS / 2);
    const synced = new Set<number>();
    const syncToken = await sync(second.url, token, synced);
    await sleep(BEFORE_KILL_MS / 2);

    const oldLeader = await cluster.leader();
    const { processes: killed, at: killedAt } = await cluster.kill(oldLeader);
    const newLeader = await cluster.leader(60_000);
    const leaderAfterMs = Date.now() - killedAt;
    await cluster.waitForWritable();
    const writableAfterMs = Date.now() - killedAt;
    await sleep(AFTER_FAILOVER_MS);
    stopped = true;
    await Promise.all(clients);

    t.ok(killed > 1, `the old leader's Patroni and PostgreSQL processes were killed (${killed})`);
    t.not(newLeader.name, oldLeader.name, `the standby took over (${oldLeader.name} → ${newLeader.name})`);
    for (const [i, instance] of instances.entries())
      t.equal(instance.child.exitCode, null, `instance ${i + 1} is still running ${instance.stderr().slice(-2000)}`);

    const show = (list: Attempt[]) =>
      list
        .slice(0, 5)
        .map((a) => `${a.key} ${a.status ?? a.error} ${a.detail ?? ''} @${a.start - killedAt}ms`)
        .join('; ');
    const serverErrors = attempts.filter((a) => a.status !== null && a.status >= 500 && a.status !== 503);
    t.same(serverErrors.length, 0, `no 5xx but 503: ${show(serverErrors)}`);
    const bad503 = attempts.filter((a) => a.status === 503 && (a.detail !== UNAVAILABLE || !a.retryAfter));
    t.same(bad503.length, 0, `every 503 says the database is not reachable, with Retry-After: ${show(bad503)}`);
    const notCreated = [...finished.values()].filter((a) => a.status !== 201);
    t.same(notCreated.length, 0, `every create ended in 201 (no 409 duplicate, no 422): ${show(notCreated)}`);

    const stored = await listAll(first.url, token);
    const storedIds = new Set(stored.map((c) => c.id));
    const acknowledged = attempts.filter((a) => a.status === 201);
    const lost = acknowledged.filter((a) => !storedIds.has(a.id!));
    t.equal(lost.length, 0, `every one of the ${acknowledged.length} answers 201 names a stored contact: ${show(lost)}`);
    const emails = stored.map((c) => c.email);
    const duplicates = emails.filter((email, i) => emails.indexOf(email) !== i);
    t.same(duplicates, [], 'no contact stored twice');
    t.equal(stored.length, finished.size, `exactly one contact per create (${finished.size} creates)`);
    const idsPerKey = new Map<string, Set<number>>();
    for (const a of acknowledged) idsPerKey.set(a.key, (idsPerKey.get(a.key) ?? new Set()).add(a.id!));
    const twoAnswers = [...idsPerKey].filter(([, ids]) => ids.size > 1);
    t.same(twoAnswers, [], 'a replayed 201 names the contact the first one made');

    const firstWrite = acknowledged.filter((a) => a.start >= killedAt).sort((a, b) => a.end - b.end)[0];
    const firstWriteMs = firstWrite ? firstWrite.end - killedAt : null;
    t.ok(
      firstWriteMs !== null && firstWriteMs <= FIRST_WRITE_BOUND_MS,
      `a 201 within ${FIRST_WRITE_BOUND_MS} ms of the kill (${firstWriteMs} ms)`,
    );

    // The token of the sync before the kill goes on after it, and misses nothing.
    await sync(second.url, token, synced, syncToken);
    t.same(
      [...synced].sort((a, b) => a - b),
      [...storedIds].sort((a, b) => a - b),
      'the sync client holds exactly the stored contacts',
    );

    const byStatus: Record<string, number> = {};
    for (const a of attempts) byStatus[a.status ?? a.error ?? '?'] = (byStatus[a.status ?? a.error ?? '?'] ?? 0) + 1;
    const replays = acknowledged.filter((a) => a.replayed).length;
    t.comment(`kill → new leader's /primary 200: ${leaderAfterMs} ms; → a write through HAProxy commits: ${writableAfterMs} ms`);
    t.comment(`kill → first 201: ${firstWriteMs} ms`);
    t.comment(
      `attempts by status ${JSON.stringify(byStatus)}; ${finished.size} creates, ${acknowledged.length} answered 201 (${replays} replayed), lost ${lost.length}, duplicates ${duplicates.length}`,
    );
  },
);
