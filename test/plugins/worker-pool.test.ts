/** app.workerPool on its own: a task runs in a thread; the queue is bounded; a time budget ends a task, thread and all. */
import Fastify, { type FastifyInstance } from 'fastify';
import t from 'tap';
import workerPoolPlugin, { QUEUE_LIMIT, WorkerPoolBusy, WorkerTimedOut } from '../../plugins/worker-pool.js';
import type { Teardown } from '../helper.js';

const SLEEP = new URL('./sleep-worker.js', import.meta.url);

async function poolApp(t: Teardown): Promise<FastifyInstance> {
  const app = Fastify({ logger: false });
  await app.register(workerPoolPlugin);
  t.teardown(() => app.close());
  await app.ready();
  return app;
}

t.test('a task answers from its thread; the event loop is free meanwhile', async (t) => {
  const app = await poolApp(t);
  const task = app.workerPool.run<number>(SLEEP, 300, 60_000);
  let ticks = 0;
  const ticking = setInterval(() => ticks++, 10);
  t.equal(await task, 300);
  clearInterval(ticking);
  t.ok(ticks >= 5, `timers ran while the thread slept (${ticks} ticks)`);
});

t.test(`one task runs and ${QUEUE_LIMIT} wait; the next is refused at once with a Retry-After`, async (t) => {
  const app = await poolApp(t);
  const accepted = Array.from({ length: 1 + QUEUE_LIMIT }, () => app.workerPool.run<number>(SLEEP, 200, 60_000));
  const refused = await app.workerPool.run(SLEEP, 1, 60_000).then(
    () => null,
    (error: unknown) => error,
  );
  t.ok(refused instanceof WorkerPoolBusy, 'refused: the pool is busy');
  t.ok((refused as WorkerPoolBusy).retryAfterSeconds >= 1, 'with a Retry-After of at least 1 s');
  t.same(await Promise.all(accepted), Array(1 + QUEUE_LIMIT).fill(200), 'the others all ran');
});

t.test('past its time a task is stopped, its thread ended, and the pool goes on', async (t) => {
  const app = await poolApp(t);
  const started = Date.now();
  const outcome = await app.workerPool.run(SLEEP, 30_000, 200).then(
    () => null,
    (error: unknown) => error,
  );
  t.ok(outcome instanceof WorkerTimedOut, 'WorkerTimedOut');
  t.ok(Date.now() - started < 10_000, 'long before the task would have ended');
  // Queued behind nothing: the stopped thread no longer holds the pool.
  t.equal(await app.workerPool.run<number>(SLEEP, 1, 60_000), 1, 'the next task runs');
  const waiting = app.workerPool.run(SLEEP, 30_000, 200);
  const queued = await app.workerPool.run(SLEEP, 1, 100).then(
    () => null,
    (error: unknown) => error,
  );
  t.ok(queued instanceof WorkerTimedOut, 'the budget counts the wait for the thread too');
  await waiting.catch(() => undefined);
});
