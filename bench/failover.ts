/**
 * `npm run bench:failover`: what losing the database leader costs (docs/operations.md). Each of
 * --rounds rounds starts a fresh HA stack (test/faults/ha-cluster.ts: etcd, two Patroni nodes with
 * synchronous_mode, HAProxy), two service instances over it, and --clients clients creating
 * contacts with an Idempotency-Key, retried with it every 100 ms on 503, 409 in progress or a
 * network error; then SIGKILLs the leader's Patroni and PostgreSQL. Prints per round the time from
 * the kill to the first 201, the creates answered 201 and not stored (lost), and contacts stored
 * twice; then the median. Progress goes to stderr.
 */
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { smtpCapture, type Teardown } from '../test/helper.js';
import { startHaCluster } from '../test/faults/ha-cluster.js';
import { type Cleanup, scratchDir, serviceEnv, signUp, startService } from '../test/faults/processes.js';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    clients: { type: 'string', default: '8' },
  },
});
const ROUNDS = Number(values.rounds);
const CLIENTS = Number(values.clients);
const IN_PROGRESS = 'A request with this Idempotency-Key is in progress';
const log = (message: string) => process.stderr.write(`bench: ${message}\n`);

/** A stack with two instances; `cleanups` run in reverse at the end of the round. */
async function stack(cleanups: (() => unknown)[]) {
  const cleanup: Cleanup & Teardown = {
    teardown: (fn) => void cleanups.push(fn),
    fail: (message) => {
      throw new Error(message);
    },
  };
  const cluster = await startHaCluster();
  cleanups.push(() => cluster.destroy());
  const mailbox = await smtpCapture(cleanup);
  const first = await startService(cleanup, serviceEnv(cluster.url, mailbox.url, await scratchDir(cleanup)));
  const second = await startService(cleanup, serviceEnv(cluster.url, mailbox.url, await scratchDir(cleanup)));
  const token = await signUp(first.url, mailbox, 'bench');
  return { cluster, urls: [first.url, second.url], token };
}

interface Answer {
  start: number;
  end: number;
  status: number | null;
  id?: number;
}

/** Clients creating with keys until stopped; every answer recorded. */
function createLoad(urls: string[], token: string, tag: string) {
  const answers: Answer[] = [];
  let stopped = false;
  let sequence = 0;
  const create = async (url: string) => {
    const n = sequence++;
    const body = JSON.stringify({
      first_name: 'Bench',
      last_name: `${tag}${n}`,
      email: `${tag}-${n}@example.com`,
      phone: '+14155550123',
      birthday: '1990-05-17',
    });
    for (;;) {
      const answer: Answer = { start: Date.now(), end: 0, status: null };
      let detail: string | undefined;
      try {
        const response = await fetch(`${url}/api/contacts/`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'idempotency-key': `${tag}-${n}` },
          body,
          signal: AbortSignal.timeout(15_000),
        });
        const json = (await response.json()) as { id?: number; detail?: string };
        answer.status = response.status;
        answer.id = json.id;
        detail = json.detail;
      } catch {
        // No answer: retried like a 503.
      }
      answer.end = Date.now();
      answers.push(answer);
      if (answer.status !== null && answer.status !== 503 && !(answer.status === 409 && detail === IN_PROGRESS)) return;
      await sleep(100);
    }
  };
  const clients = Array.from({ length: CLIENTS }, async (_, i) => {
    while (!stopped) await create(urls[i % urls.length]!);
  });
  return {
    answers,
    stop: async () => {
      stopped = true;
      await Promise.all(clients);
    },
  };
}

async function storedContacts(url: string, token: string): Promise<{ id: number; email: string }[]> {
  const all: { id: number; email: string }[] = [];
  for (;;) {
    const response = await fetch(`${url}/api/contacts/?limit=1000&skip=${all.length}`, { headers: { authorization: `Bearer ${token}` } });
    const page = (await response.json()) as { id: number; email: string }[];
    all.push(...page);
    if (page.length < 1000) return all;
  }
}

const median = (list: number[]) => [...list].sort((a, b) => a - b)[Math.floor(list.length / 2)]!;

async function failoverRound(round: number) {
  const cleanups: (() => unknown)[] = [];
  try {
    const { cluster, urls, token } = await stack(cleanups);
    const load = createLoad(urls, token, `r${round}`);
    await sleep(3_000);
    const { at: killedAt } = await cluster.kill(await cluster.leader());
    await cluster.waitForWritable();
    await sleep(3_000);
    await load.stop();
    const acknowledged = load.answers.filter((a) => a.status === 201);
    const stored = await storedContacts(urls[0]!, token);
    const ids = new Set(stored.map((c) => c.id));
    const emails = stored.map((c) => c.email);
    const firstWrite = acknowledged.filter((a) => a.start >= killedAt).sort((a, b) => a.end - b.end)[0];
    return {
      firstWriteMs: firstWrite ? firstWrite.end - killedAt : NaN,
      acknowledged: acknowledged.length,
      lost: acknowledged.filter((a) => !ids.has(a.id!)).length,
      duplicates: emails.length - new Set(emails).size,
      errors5xx: load.answers.filter((a) => a.status !== null && a.status >= 500 && a.status !== 503).length,
    };
  } finally {
    for (const cleanup of cleanups.reverse()) await cleanup();
  }
}

const rounds = [];
for (let round = 1; round <= ROUNDS; round++) {
  log(`failover round ${round} of ${ROUNDS}`);
  rounds.push(await failoverRound(round));
}
console.log(`## Failover (${CLIENTS} clients over two instances, SIGKILL of the leader's Patroni and PostgreSQL)\n`);
console.log('| round | kill → first 201 | creates answered 201 | lost | stored twice | 5xx other than 503 |');
console.log('|---|---|---|---|---|---|');
rounds.forEach((r, i) =>
  console.log(`| ${i + 1} | ${(r.firstWriteMs / 1000).toFixed(1)} s | ${r.acknowledged} | ${r.lost} | ${r.duplicates} | ${r.errors5xx} |`),
);
console.log(
  `| median | ${(median(rounds.map((r) => r.firstWriteMs)) / 1000).toFixed(1)} s | | ${rounds.reduce((n, r) => n + r.lost, 0)} in all | ${rounds.reduce((n, r) => n + r.duplicates, 0)} in all | |`,
);
