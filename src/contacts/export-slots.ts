import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { HttpError } from '../../plugins/http/errors.js';

/**
 * Exports in flight in this instance: each holds a spool file from its first row until the file
 * is sent or its client is gone (openapi.yaml, exportContacts; docs/limits.md).
 */

/** When an export ends is unknown beforehand; a few seconds is what a small one takes. */
const RETRY_AFTER_S = 5;

export interface ExportLimits {
  exportConcurrentPerUser: number;
  exportConcurrentPerInstance: number;
  exportSpoolMaxBytes: number;
}

/** One export's hold on the instance: a slot, and the bytes of its spool file. */
export interface ExportSlot {
  /** Counts `bytes` more of spool; 503 (the caller frees the spool) when the instance would hold more than its cap. */
  grow: (bytes: number) => void;
  /** Gives the slot and its bytes back; only the first call counts. */
  release: () => void;
}

declare module 'fastify' {
  interface FastifyInstance {
    /** This instance's exports in flight (src/contacts/export-slots.ts). */
    exportSlots: ExportSlots;
  }
}

export class ExportSlots {
  private inFlight = 0;
  private spoolBytes = 0;
  private readonly byUser = new Map<number, number>();

  constructor(private readonly limits: ExportLimits) {}

  /** A slot for an export of `ownerId`: 429 when they have their share in flight, 503 when the instance has. */
  take(ownerId: number): ExportSlot {
    const { exportConcurrentPerUser: perUser, exportConcurrentPerInstance: perInstance } = this.limits;
    const mine = this.byUser.get(ownerId) ?? 0;
    if (mine >= perUser) {
      throw new HttpError(429, `Too many exports in progress: at most ${perUser} at once per user; retry when one has finished`, {
        'Retry-After': RETRY_AFTER_S,
      });
    }
    if (this.inFlight >= perInstance)
      throw new HttpError(503, 'Too many exports in progress on this instance; try again later', { 'Retry-After': RETRY_AFTER_S });
    this.inFlight++;
    this.byUser.set(ownerId, mine + 1);
    let held = 0;
    let released = false;
    return {
      grow: (bytes) => {
        if (this.spoolBytes + bytes > this.limits.exportSpoolMaxBytes) {
          throw new HttpError(
            503,
            'Too much export data in flight on this instance; try again later, or export fewer contacts with `query`',
            {
              'Retry-After': RETRY_AFTER_S,
            },
          );
        }
        this.spoolBytes += bytes;
        held += bytes;
      },
      release: () => {
        if (released) return;
        released = true;
        this.inFlight--;
        this.spoolBytes -= held;
        const left = (this.byUser.get(ownerId) ?? 1) - 1;
        if (left === 0) this.byUser.delete(ownerId);
        else this.byUser.set(ownerId, left);
      },
    };
  }
}

/** Why an export's connection was cut: its client took nothing for the send timeout. */
export class ExportStalled extends Error {
  constructor(timeoutMs: number) {
    super(`export client took no bytes for ${timeoutMs} ms; connection closed`);
  }
}

/**
 * `file` as the answer's body, cut with ExportStalled when the client takes no bytes for
 * `timeoutMs` (the socket's buffers full, so nothing moves): Fastify then closes the connection.
 * `file` is destroyed however the answer ends, which closes the spool and calls `onClosed`.
 */
export function sentWithin(file: Readable, timeoutMs: number, onClosed: () => void): Readable {
  const timer = setTimeout(() => watched.destroy(new ExportStalled(timeoutMs)), timeoutMs).unref();
  const watched = new Transform({
    transform(chunk, _encoding, callback) {
      // A chunk comes through only when the socket took the previous ones.
      timer.refresh();
      callback(null, chunk);
    },
  });
  file.once('close', () => {
    clearTimeout(timer);
    onClosed();
  });
  // Either side ending early destroys the other; the outcome is Fastify's to answer.
  pipeline(file, watched).catch(() => undefined);
  return watched;
}
