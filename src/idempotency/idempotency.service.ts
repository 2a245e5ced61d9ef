import { createHash } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { HttpError, ValidationFailed } from '../../plugins/http/errors.js';
import type { OperationId } from '../generated/operations.js';
import type { OperationResult } from '../operation-types.js';
import * as repository from './idempotency.repository.js';

/*
 * Idempotency-Key (openapi.yaml, "Idempotent retries"): a write sent with a key is applied at most
 * once per user, operation and key. Its answer is stored in the write's own transaction, so a write
 * that committed has its answer stored even when the answer never reached the client, and a retry
 * gets that answer again. A transaction holds the key's advisory lock from before it looks for a
 * stored answer until it commits: a second request with the key meanwhile is 409 at once (it never
 * waits, holding a connection), and one after the commit finds the answer. Nothing marks a key "in
 * progress" but that lock, so a request whose instance dies leaves nothing behind.
 */

export type IdempotencyDeps = Pick<FastifyInstance, 'db' | 'now' | 'config' | 'log'>;

const IN_PROGRESS = 'A request with this Idempotency-Key is in progress';
const REUSED = 'Idempotency-Key reused with a different request';
/** A keyed transaction of this service takes milliseconds, an import's about a second. */
const IN_PROGRESS_RETRY_AFTER_S = 1;
const HOUR_MS = 3_600_000;
/**
 * After a keyed write whose row id is a multiple of this, or whose answer is over LARGE_ANSWER_BYTES,
 * its owner's bounds are enforced and expired keys purged: one such pass per 64 keyed writes or so,
 * and at once after a large answer (an import's errors), so the bytes bound holds within one answer.
 */
const HOUSEKEEPING_EVERY = 64;
const LARGE_ANSWER_BYTES = 64 * 1024;

/** A write sent with an Idempotency-Key: the owner, the operation, the key and the hash of the request. */
export interface KeyedRequest<K extends OperationId> {
  ownerId: number;
  operation: K;
  key: string;
  requestHash: Buffer;
}

/** JSON text of `value` with every object's keys sorted: one text for one JSON value, however it was written. */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const object = value as Record<string, unknown>;
    const members = Object.keys(object)
      .sort()
      .map((name) => `${JSON.stringify(name)}:${canonicalJson(object[name])}`);
    return `{${members.join(',')}}`;
  }
  return JSON.stringify(value);
}

/**
 * The keyed request of a write, or undefined without a key. "The same request" is the same
 * operation (the key's scope), the same body media type and the same body: bytes as sent, or a
 * parsed JSON body's value (key order and whitespace aside). No other header counts.
 */
export function keyedRequest<K extends OperationId>(
  operation: K,
  ownerId: number,
  key: string | string[] | undefined,
  mediaType: string | undefined,
  body: unknown,
): KeyedRequest<K> | undefined {
  // The schema makes a sent key one string (openapi.yaml); Node joins repeated ones with ", ".
  if (typeof key !== 'string') return undefined;
  const hash = createHash('sha256').update(`${mediaType ?? ''}\n`);
  hash.update(body instanceof Uint8Array ? body : canonicalJson(body));
  return { ownerId, operation, key, requestHash: hash.digest() };
}

/** A stored answer sent again, marked as such; 422 when it answered another request than `keyed`'s. */
function replayOf<K extends OperationId>(keyed: KeyedRequest<K>, stored: repository.StoredAnswer): OperationResult<K> {
  if (!Buffer.from(stored.request_hash).equals(keyed.requestHash)) throw new ValidationFailed(REUSED);
  const answer = {
    status: stored.status,
    body: JSON.parse(stored.body) as unknown,
    headers: { ...stored.headers, 'Idempotent-Replayed': 'true' },
  };
  // Stored from an answer of this operation (writeOnce), so it is one again.
  return answer as unknown as OperationResult<K>;
}

/** Keys stored at or before this instant have expired (IDEMPOTENCY_KEY_HOURS, by the service's clock). */
function expiredBy(deps: IdempotencyDeps, now: Date): Date {
  return new Date(now.getTime() - deps.config.idempotencyKeyHours * HOUR_MS);
}

/**
 * The stored answer of the key, sent again, or undefined when there is none; 422 when the key
 * answered another request. Reads outside any transaction: for a write that would cost work before
 * its transaction (reading an import), so that a retry does not do that work again.
 */
export async function storedAnswer<K extends OperationId>(
  deps: IdempotencyDeps,
  keyed: KeyedRequest<K>,
): Promise<OperationResult<K> | undefined> {
  const stored = await repository.findAnswer(deps.db, keyed.ownerId, keyed.operation, keyed.key, expiredBy(deps, deps.now()));
  return stored && replayOf(keyed, stored);
}

/** What a keyed write answered, and whether it wrote anything: only then is the answer stored. */
export interface Written<K extends OperationId> {
  answer: OperationResult<K>;
  wrote: boolean;
}

/** A 64-bit advisory lock of the key: the two-key locks of the contacts (21, 22) are another space. */
function lockIdOf(keyed: KeyedRequest<OperationId>): bigint {
  return createHash('sha256')
    .update(JSON.stringify([keyed.ownerId, keyed.operation, keyed.key]))
    .digest()
    .readBigInt64BE(0);
}

/**
 * Runs `write` at most once for the key: in one transaction that takes the key's lock (409 with
 * Retry-After while another transaction holds it), answers the key's stored answer if there is
 * one (nothing written), else runs `write` on the transaction and, when it wrote, stores its answer
 * before the commit. `replayed` tells the caller that this request wrote nothing (so its caches
 * stay as they are). Every error of `write` rolls it back whole, key included.
 */
export async function writeOnce<K extends OperationId>(
  deps: IdempotencyDeps,
  keyed: KeyedRequest<K>,
  write: (db: IdempotencyDeps['db']) => Promise<Written<K>>,
): Promise<{ answer: OperationResult<K>; replayed: boolean }> {
  const now = deps.now();
  const expired = expiredBy(deps, now);
  const outcome = await deps.db.transaction().execute(async (trx) => {
    if (!(await repository.tryLock(trx, lockIdOf(keyed)))) {
      throw new HttpError(409, IN_PROGRESS, { 'Retry-After': IN_PROGRESS_RETRY_AFTER_S });
    }
    const stored = await repository.findAnswer(trx, keyed.ownerId, keyed.operation, keyed.key, expired);
    if (stored) return { answer: replayOf(keyed, stored), replayed: true };
    const { answer, wrote } = await write(trx);
    if (!wrote) return { answer, replayed: false };
    const body = JSON.stringify(answer.body);
    const headers = answer.headers ?? {};
    const answerBytes = Buffer.byteLength(body) + Buffer.byteLength(JSON.stringify(headers));
    const id = await repository.storeAnswer(
      trx,
      {
        owner_id: keyed.ownerId,
        operation: keyed.operation,
        key: keyed.key,
        request_hash: keyed.requestHash,
        status: Number(answer.status),
        headers,
        body,
        answer_bytes: answerBytes,
        created_at: now,
      },
      expired,
    );
    if (id === undefined) throw new Error(`Idempotency-Key of user ${keyed.ownerId} stored twice under its lock`);
    return { answer, replayed: false, housekeeping: id % HOUSEKEEPING_EVERY === 0 || answerBytes > LARGE_ANSWER_BYTES };
  });
  if ('housekeeping' in outcome && outcome.housekeeping) await housekeeping(deps, keyed.ownerId, expired);
  return { answer: outcome.answer, replayed: outcome.replayed };
}

/**
 * The owner's keys back within IDEMPOTENCY_KEYS_PER_USER and IDEMPOTENCY_USER_BYTES (the oldest
 * forgotten first), and the owner's expired keys purged: only the owner's, so the statement runs on
 * one shard on Citus (an expired key is never answered, and a user's keys are bounded). After the commit, so a failure
 * here costs only the bounds' timeliness, never the write's answer.
 */
async function housekeeping(deps: IdempotencyDeps, ownerId: number, expired: Date): Promise<void> {
  try {
    await repository.forgetOldest(deps.db, ownerId, deps.config.idempotencyKeysPerUser, deps.config.idempotencyUserBytes);
    await repository.forgetExpired(deps.db, ownerId, expired);
  } catch (error) {
    deps.log.warn({ err: error }, 'Idempotency-Key housekeeping failed; the next pass tries again');
  }
}
