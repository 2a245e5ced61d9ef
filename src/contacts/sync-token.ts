import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * Where a sync client stands, carried in its opaque token. A round reads every change of
 * transactions from `since` on (a transaction id: see sync.service.ts for why that misses nothing);
 * `sinceAt` is when that frontier was taken, which decides whether the token outlived the tombstones.
 */
export type SyncState =
  /** Paging through every contact by id, after `afterId`; the delta rounds start at `since`. */
  | { phase: 'full'; since: string; sinceAt: number; afterId: number }
  /**
   * Reading changes from `since` on, in (transaction, id) order after `after` (null at the start).
   * `next`/`nextAt` is the frontier of the round after this one, taken when this round began.
   */
  | {
      phase: 'delta';
      since: string;
      sinceAt: number;
      after: { xid: string; id: number } | null;
      next: string | null;
      nextAt: number | null;
    };

export class SyncTokenError extends Error {
  constructor(readonly expired: boolean) {
    super(expired ? 'Sync token expired; start a full sync' : 'Invalid sync token');
  }
}

const MAC_BYTES = 16;

function mac(secret: string, payload: string): Buffer {
  // A key of its own, so a sync token can never pass for a JWT signature or the other way round.
  const key = createHmac('sha256', secret).update('contacts sync token').digest();
  return createHmac('sha256', key).update(payload).digest().subarray(0, MAC_BYTES);
}

/** `payload.mac`, both base64url: the owner and the state, signed. */
export function encodeSyncToken(secret: string, ownerId: number, state: SyncState): string {
  const payload = Buffer.from(JSON.stringify({ u: ownerId, ...state })).toString('base64url');
  return `${payload}.${mac(secret, payload).toString('base64url')}`;
}

const XID = /^\d{1,20}$/;
const isId = (value: unknown): value is number => Number.isInteger(value) && (value as number) >= 0 && (value as number) <= 2_147_483_647;
const isTime = (value: unknown): value is number => Number.isSafeInteger(value) && (value as number) >= 0;
const isXid = (value: unknown): value is string => typeof value === 'string' && XID.test(value);

/** The state in `token` if it is well-formed, signed with `secret` and issued to `ownerId`. */
function readState(secret: string, token: string, ownerId: number): SyncState | null {
  const [payload, signature, ...rest] = token.split('.');
  if (!payload || !signature || rest.length > 0) return null;
  const given = Buffer.from(signature, 'base64url');
  if (given.length !== MAC_BYTES || !timingSafeEqual(given, mac(secret, payload))) return null;
  let claims: Record<string, unknown>;
  try {
    claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as Record<string, unknown>;
  } catch {
    return null;
  }
  if (claims.u !== ownerId || !isXid(claims.since) || !isTime(claims.sinceAt)) return null;
  if (claims.phase === 'full' && isId(claims.afterId)) {
    return { phase: 'full', since: claims.since, sinceAt: claims.sinceAt, afterId: claims.afterId };
  }
  const after = claims.after as { xid?: unknown; id?: unknown } | null;
  const validAfter = after === null || (typeof after === 'object' && isXid(after.xid) && isId(after.id));
  const validNext = (claims.next === null && claims.nextAt === null) || (isXid(claims.next) && isTime(claims.nextAt));
  if (claims.phase === 'delta' && validAfter && validNext) {
    return {
      phase: 'delta',
      since: claims.since,
      sinceAt: claims.sinceAt,
      after: after && { xid: after.xid as string, id: after.id as number },
      next: claims.next as string | null,
      nextAt: claims.nextAt as number | null,
    };
  }
  return null;
}

/**
 * The state in a client's token; SyncTokenError when it is malformed, tampered with or another
 * user's (400), or older than `maxAgeMs` at `now` (410: deletions since may be forgotten).
 */
export function decodeSyncToken(secret: string, token: string, ownerId: number, now: number, maxAgeMs: number): SyncState {
  const state = readState(secret, token, ownerId);
  if (!state) throw new SyncTokenError(false);
  if (now - state.sinceAt > maxAgeMs) throw new SyncTokenError(true);
  return state;
}
