import type { FastifyBaseLogger } from 'fastify';

/** Reports a dependency's outages: `failed` and `answered` may be called on every request; only changes are logged. */
export interface OutageLog {
  /** A call failed for want of the dependency: a warning, unless the outage is already known. */
  failed(error: unknown): void;
  /** A call succeeded: an info line, when it ends an outage. */
  answered(): void;
}

/**
 * One warning when a dependency stops answering and one info line when it answers again, instead
 * of a warning (and a stack) per request for as long as it is away. With `settleMs`, the outage
 * ends only once that long has passed after a success with no failure: a pool of connections
 * recovers one connection at a time, and failures of the others would start a new outage each.
 */
export function outageLog(log: FastifyBaseLogger, messages: { down: string; up: string }, settleMs = 0): OutageLog {
  let down = false;
  let settling: NodeJS.Timeout | undefined;
  const end = () => {
    settling = undefined;
    down = false;
    log.info(messages.up);
  };
  return {
    failed(error) {
      clearTimeout(settling);
      settling = undefined;
      if (down) return;
      down = true;
      log.warn({ err: error }, messages.down);
    },
    answered() {
      if (!down || settling) return;
      if (settleMs === 0) end();
      else settling = setTimeout(end, settleMs).unref();
    },
  };
}
