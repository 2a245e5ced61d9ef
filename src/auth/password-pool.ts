import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';

/*
 * bcrypt is CPU-bound (about 250 ms at cost 12), so hashing and comparing run on a small pool of
 * worker threads and a burst of logins never stalls the event loop. The worker is plain
 * JavaScript evaluated from a string and loads bcryptjs by absolute path, so it runs the same
 * under tsx, tap's TypeScript loader and compiled output.
 */

const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const bcrypt = require(workerData.bcryptPath);
parentPort.on('message', (job) => {
  try {
    const result = job.op === 'hash' ? bcrypt.hashSync(job.password, job.cost) : bcrypt.compareSync(job.password, job.hash);
    parentPort.postMessage({ result });
  } catch (error) {
    parentPort.postMessage({ error: error instanceof Error ? error.message : String(error) });
  }
});
`;

const bcryptPath = createRequire(import.meta.url).resolve('bcryptjs');

type Job =
  | { op: 'hash'; password: string; cost: number }
  | { op: 'compare'; password: string; hash: string };

interface Pending {
  job: Job;
  resolve(result: unknown): void;
  reject(error: Error): void;
}

interface Slot {
  worker: Worker;
  current: Pending | null;
}

const POOL_SIZE = Math.min(2, availableParallelism());

const queue: Pending[] = [];
const slots: Slot[] = [];

function startSlot(): Slot {
  const slot: Slot = { worker: new Worker(WORKER_SOURCE, { eval: true, workerData: { bcryptPath }, execArgv: [] }), current: null };
  slot.worker.unref();
  slot.worker.on('message', (message: { result?: unknown; error?: string }) => {
    const done = slot.current;
    slot.current = null;
    slot.worker.unref();
    if (message.error !== undefined) done?.reject(new Error(message.error));
    else done?.resolve(message.result);
    dispatch();
  });
  // A crashed worker fails its job and is replaced on the next dispatch; the pool keeps serving.
  let crash: Error | null = null;
  slot.worker.on('error', (error) => {
    crash = error;
  });
  slot.worker.on('exit', (code) => {
    slot.current?.reject(crash ?? new Error(`password worker exited with code ${code}`));
    slot.current = null;
    slots.splice(slots.indexOf(slot), 1);
    dispatch();
  });
  slots.push(slot);
  return slot;
}

function dispatch(): void {
  while (queue.length > 0) {
    const idle = slots.find((slot) => slot.current === null) ?? (slots.length < POOL_SIZE ? startSlot() : undefined);
    if (!idle) return;
    const pending = queue.shift()!;
    idle.current = pending;
    // Hold the process open only while a worker has work.
    idle.worker.ref();
    idle.worker.postMessage(pending.job);
  }
}

/** Runs one bcrypt job on the next idle worker. */
function run<T>(job: Job): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    queue.push({ job, resolve: resolve as (result: unknown) => void, reject });
    dispatch();
  });
}

/** A bcrypt hash of `password` at `cost`, computed off the main thread. */
export function bcryptHash(password: string, cost: number): Promise<string> {
  return run<string>({ op: 'hash', password, cost });
}

/** Whether `password` matches the bcrypt `hash`, computed off the main thread. */
export function bcryptCompare(password: string, hash: string): Promise<boolean> {
  return run<boolean>({ op: 'compare', password, hash });
}
