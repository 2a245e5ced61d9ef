/**
 * Sign-in under attack, measured (docs/limits.md, "Sign-in"): a correct login while 20 addresses
 * (127.0.0.11–30) flood one account with wrong passwords, and many registrations at once. Prints
 * the correct login's time and status, the flood's statuses, and the registrations' times and how
 * many were overtaken by a later one.
 *
 *   npx tsx bench/sign-in.ts [--cost 12] [--registrations 60]
 *
 * Runs the service in this process on a throw-away embedded database (or DATABASE_URL/REDIS_URL
 * when set), with production's limits.
 */
import http from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../plugins/config.js';

const { values } = parseArgs({ options: { cost: { type: 'string', default: '12' }, registrations: { type: 'string', default: '60' } } });

function post(port: number, localAddress: string, url: string, body: string, contentType: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const request = http.request(
      { host: '127.0.0.1', port, localAddress, method: 'POST', path: url, headers: { 'content-type': contentType }, agent: false },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode!));
      },
    );
    request.on('error', reject);
    request.end(body);
  });
}

const form = (username: string, password: string) => new URLSearchParams({ username, password }).toString();
const FORM = 'application/x-www-form-urlencoded';

const dataDir = await mkdtemp(path.join(tmpdir(), 'bench-sign-in-'));
const config = await loadConfig({
  ...process.env,
  NODE_ENV: 'development',
  LOG_LEVEL: 'silent',
  DATA_DIR: dataDir,
  BCRYPT_COST: values.cost,
  PUBLIC_BASE_URL: 'http://bench.test',
});
const app = await buildApp({ config });
await app.listen({ host: '127.0.0.1', port: 0 });
const { port } = app.server.address() as AddressInfo;
try {
  const owner = { username: 'bench_owner', email: 'owner@bench.test', password: 'correct-horse-battery' };
  if ((await post(port, '127.0.0.3', '/api/auth/register', JSON.stringify(owner), 'application/json')) !== 201)
    throw new Error('register failed');
  const { user_id: ownerId } = await app.db
    .selectFrom('user_names')
    .select('user_id')
    .where('name', '=', owner.username)
    .executeTakeFirstOrThrow();
  await app.db.updateTable('users').set({ is_verified: true }).where('id', '=', ownerId).execute();

  const statuses: Record<number, number> = {};
  const flood = Array.from({ length: 20 }, async (_, i) => {
    for (let wave = 0; wave < 5; wave++) {
      const answers = await Promise.all(
        Array.from({ length: 4 }, () => post(port, `127.0.0.${11 + i}`, '/api/auth/login', form(owner.username, 'wrong-password'), FORM)),
      );
      for (const status of answers) statuses[status] = (statuses[status] ?? 0) + 1;
    }
  });
  await new Promise((resolve) => setTimeout(resolve, 500));
  let started = performance.now();
  const status = await post(port, '127.0.0.2', '/api/auth/login', form(owner.username, owner.password), FORM);
  const loginMs = performance.now() - started;
  await Promise.all(flood);
  console.log(
    `correct login during the flood: ${status} in ${Math.round(loginMs)} ms; the flood's 400 answers: ${JSON.stringify(statuses)}`,
  );

  // Registrations at once from 10 addresses; each records when it started and ended.
  const count = Number(values.registrations);
  started = performance.now();
  const runs = await Promise.all(
    Array.from({ length: count }, async (_, i) => {
      await new Promise((resolve) => setTimeout(resolve, i * 10));
      const begin = performance.now() - started;
      const body = JSON.stringify({ username: `bench_${i}`, email: `bench_${i}@bench.test`, password: 'correct-horse-battery' });
      const answer = await post(port, `127.0.0.${41 + (i % 10)}`, '/api/auth/register', body, 'application/json');
      return { begin, end: performance.now() - started, answer };
    }),
  );
  const served = runs.filter((run) => run.answer === 201);
  const waits = served.map((run) => run.end - run.begin).sort((a, b) => a - b);
  const overtaken = served.filter((run) => served.some((other) => other.begin > run.begin && other.end < run.end)).length;
  const answers: Record<number, number> = {};
  for (const run of runs) answers[run.answer] = (answers[run.answer] ?? 0) + 1;
  console.log(
    `${count} registrations: ${JSON.stringify(answers)}; of the 201s, median ${Math.round(waits[Math.floor(waits.length / 2)] ?? 0)} ms, ` +
      `max ${Math.round(waits.at(-1) ?? 0)} ms, ${overtaken} overtaken by a later one`,
  );
} finally {
  await app.close();
  await rm(dataDir, { recursive: true, force: true });
}
