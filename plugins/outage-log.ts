import type { FastifyBaseLogger } from 'fastify';

/** Reports a dependency's outages: `failed` and `answered` may be called on every request; only changes are logged. */
export interface OutageLog {
  /** A call failed for want of the dependency: a warning, unless the outage is already known. */
  failed(error: unknown, fields?: Record<string, unknown>): void;
  /** A call succeeded: an info line, when it ends an outage. */
  answered(): void;
}

/**
 * One warning when a dependency stops answering and one info line when it answers again, instead
 * of a warning (and a stack) per request for as long as it is away.
 */
export function outageLog(log: FastifyBaseLogger, messages: { down: string; up: string }): OutageLog {
  let down = false;
  return {
    failed(error, fields = {}) {
      if (down) return;
      down = true;
      log.warn({ err: error, ...fields }, messages.down);
    },
    answered() {
      if (!down) return;
      down = false;
      log.info(messages.up);
    },
  };
}
