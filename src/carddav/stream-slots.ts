import { HttpError } from '../../plugins/http/errors.js';

/**
 * CardDAV answers written batch by batch in flight in this instance (docs/limits.md, "CardDAV"):
 * each holds a batch of cards and a client's socket until its client has read it or is gone.
 */

/** A multiget of a few hundred cards takes a second or two; when one ends is unknown beforehand. */
const RETRY_AFTER_S = 5;

export interface StreamLimits {
  davStreamsPerUser: number;
  davStreamsPerInstance: number;
}

declare module 'fastify' {
  interface FastifyInstance {
    /** This instance's streamed CardDAV answers in flight (src/carddav/stream-slots.ts). */
    davStreamSlots: StreamSlots;
  }
}

export class StreamSlots {
  private inFlight = 0;
  private readonly byUser = new Map<number, number>();

  constructor(private readonly limits: StreamLimits) {}

  /** A slot for an answer to `userId`, and how to give it back (only the first call counts): 429 past the user's share, 503 past the instance's. */
  take(userId: number): () => void {
    const { davStreamsPerUser: perUser, davStreamsPerInstance: perInstance } = this.limits;
    const mine = this.byUser.get(userId) ?? 0;
    if (mine >= perUser) {
      throw new HttpError(429, `Too many reads in progress: at most ${perUser} at once per user; retry when one has finished`, {
        'Retry-After': RETRY_AFTER_S,
      });
    }
    if (this.inFlight >= perInstance)
      throw new HttpError(503, 'Too many reads in progress on this instance; try again later', { 'Retry-After': RETRY_AFTER_S });
    this.inFlight++;
    this.byUser.set(userId, mine + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.inFlight--;
      const left = (this.byUser.get(userId) ?? 1) - 1;
      if (left === 0) this.byUser.delete(userId);
      else this.byUser.set(userId, left);
    };
  }
}
