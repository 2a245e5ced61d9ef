/** A worker module for test/plugins/worker-pool.test.ts: blocks its thread for `ms`, then answers `ms`. */
export default function sleep(ms: number): number {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
  return ms;
}
