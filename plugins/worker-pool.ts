import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import fp from 'fastify-plugin';
import { Piscina } from 'piscina';

/** CPU-bound work that must not hold the event loop: a worker module's default export, run in a thread. */
export interface WorkerPool {
  /**
   * Runs the default export of `module` (a URL beside its caller, written with `.js`) on `task` in a
   * worker thread, and resolves with what it returns. Rejects with WorkerPoolBusy when QUEUE_LIMIT
   * tasks already wait, and with WorkerTimedOut when the answer is not there `timeoutMs` after the
   * call (waiting included); a task that runs past it is stopped by ending its thread.
   */
  run<T>(module: URL, task: unknown, timeoutMs: number): Promise<T>;
}

/** QUEUE_LIMIT tasks already wait for the thread. */
export class WorkerPoolBusy extends Error {
  constructor(readonly retryAfterSeconds: number) {
    super('the worker pool is busy');
  }
}

/** The task had no answer within its time. */
export class WorkerTimedOut extends Error {
  constructor() {
    super('the worker task timed out');
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    workerPool: WorkerPool;
  }
}

/**
 * One thread. The password pool (plugins/passwords.ts) has its own threads and queue, so this work
 * neither waits behind password hashes nor makes a login wait behind it; the two share the cores.
 */
const THREADS = 1;
/** Tasks that may wait for the thread; past it WorkerPoolBusy. */
export const QUEUE_LIMIT = 8;
/** The thread ends after this long without work; the next task starts a new one. */
const IDLE_TIMEOUT_MS = 60_000;

/**
 * How a thread loads a worker module. Compiled, it is the `.js` file and the threads need nothing.
 * Run from TypeScript (tsx, tap) it is the `.ts` file beside it, loaded through tsx's require hook,
 * which starts fast in any thread (see `worker()` in plugins/passwords.ts for why not the inherited loader).
 */
function workerLoading(): { extension: string; execArgv: string[] } {
  const extension = path.extname(fileURLToPath(import.meta.url));
  return { extension, execArgv: extension === '.ts' ? ['--require', createRequire(import.meta.url).resolve('tsx/cjs')] : [] };
}

/** `app.workerPool`: a piscina pool of one thread for CPU-bound work, with a bounded queue and per-task time budgets. */
export default fp(
  async (app) => {
    const { extension, execArgv } = workerLoading();
    // The queue is bounded here: piscina's maxQueue does not count tasks that carry an abort signal.
    const pool = new Piscina({ execArgv, minThreads: 0, maxThreads: THREADS, idleTimeout: IDLE_TIMEOUT_MS });
    let closed = false;
    let inFlight = 0;

    app.decorate('workerPool', {
      async run<T>(module: URL, task: unknown, timeoutMs: number): Promise<T> {
        if (closed) throw new Error('the worker pool is closed');
        if (inFlight >= THREADS + QUEUE_LIMIT) {
          // The waiting tasks' time at the mean a task has taken so far (none yet: 1 s).
          const meanMs = pool.histogram.runTime.mean;
          const seconds = Number.isFinite(meanMs) ? Math.ceil((QUEUE_LIMIT * meanMs) / THREADS / 1000) : 1;
          throw new WorkerPoolBusy(Math.max(1, seconds));
        }
        const filename = fileURLToPath(module).replace(/\.js$/, extension);
        const budget = AbortSignal.timeout(timeoutMs);
        inFlight++;
        try {
          return (await pool.run(task, { filename, signal: budget })) as T;
        } catch (error) {
          throw budget.aborted ? new WorkerTimedOut() : error;
        } finally {
          inFlight--;
        }
      },
    } satisfies WorkerPool);

    app.addHook('onClose', async () => {
      closed = true;
      await pool.destroy();
    });
  },
  { name: 'worker-pool', fastify: '5.x' },
);
