import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * Where a sync client stands, carried in its opaque token. A round reads every change of the
 * owner's at positions from `since` on (see sync.service.ts for why that misses nothing);
 * `sinceAt` is when that frontier was taken, which decides whether the token outlived the tombstones.
 */
export type SyncState =
  /** Paging through every contact by id, after `afterId`; the delta rounds start at `since`. */
  | { phase: 'full'; since: string; sinceAt: number; afterId: number }
  /**
   * Reading changes from `since` on, in (position, id) order after `after` (null at the start).
   * `next`/`nextAt` is the frontier of the round after this one, taken when this round began.
   */
  | {
      phase: 'delta';
      since: string;
      sinceAt: number;
      after: { position: string; id: number } | null;
      next: string | null;
      nextAt: number | null;
    };

export class SyncTokenError extends Error {
  constructor(readonly expired: boolean) {
    super(expired ? 'Sync token expired; start a full sync' : 'Invalid sync token');
  }
}

const MAC_BYTES = 16;
/**
 * The key label of tokens that carry positions. Tokens signed under the one before carried
 * transaction ids, which no position can be compared with: they are refused as expired.
 */
const LABEL = 'contacts sync token: positions';
const TRANSACTION_ID_LABEL = 'contacts sync token';

function mac(secret: string, payload: string, label = LABEL): Buffer {
  // A key of its own, so a sync token can never pass for a JWT signature or the other way round.
  const key = createHmac('sha256', secret).update(label).digest();
  return createHmac('sha256', key).update(payload).digest().subarray(0, MAC_BYTES);
}

/** `payload.mac`, both base64url: the owner and the state, signed. */
export function encodeSyncToken(secret: string, ownerId: number, state: SyncState): string {
  const payload = Buffer.from(JSON.stringify({ u: ownerId, ...state })).toString('base64url');
  return `${payload}.${mac(secret, payload).toString('base64url')}`;
}

const POSITION = /^\d{1,20}$/;
const isId = (value: unknown): value is number => Number.isInteger(value) && (value as number) >= 0 && (value as number) <= 2_147_483_647;
const isTime = (value: unknown): value is number => Number.isSafeInteger(value) && (value as number) >= 0;
const isPosition = (value: unknown): value is string => typeof value === 'string' && POSITION.test(value);

/** The owner's claims in `token` if it is well-formed and signed with `secret` under `label`. */
function readClaims(secret: string, token: string, ownerId: number, label: string): Record<string, unknown> | null {
  const [payload, signature, ...rest] = token.split('.');
  if (!payload || !signature || rest.length > 0) return null;
  const given = Buffer.from(signature, 'base64url');
  if (given.length !== MAC_BYTES || !timingSafeEqual(given, mac(secret, payload, label))) return null;
  let claims: Record<string, unknown>;
  try {
    claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as Record<string, unknown>;
  } catch {
    return null;
  }
  return claims.u === ownerId ? claims : null;
}

/** The state in `token` if it is well-formed, signed with `secret` and issued to `ownerId`. */
function readState(secret: string, token: string, ownerId: number): SyncState | null {
  const claims = readClaims(secret, token, ownerId, LABEL);
  if (!claims || !isPosition(claims.since) || !isTime(claims.sinceAt)) return null;
  if (claims.phase === 'full' && isId(claims.afterId)) {
    return { phase: 'full', since: claims.since, sinceAt: claims.sinceAt, afterId: claims.afterId };
  }
  const after = claims.after as { position?: unknown; id?: unknown } | null;
  const validAfter = after === null || (typeof after === 'object' && isPosition(after.position) && isId(after.id));
  const validNext = (claims.next === null && claims.nextAt === null) || (isPosition(claims.next) && isTime(claims.nextAt));
  if (claims.phase === 'delta' && validAfter && validNext) {
    return {
      phase: 'delta',
      since: claims.since,
      sinceAt: claims.sinceAt,
      after: after && { position: after.position as string, id: after.id as number },
      next: claims.next as string | null,
      nextAt: claims.nextAt as number | null,
    };
  }
  return null;
}

/**
 * The state in a client's token; SyncTokenError when it is malformed, tampered with or another
 * user's (400), or older than `maxAgeMs` at `now`, or handed out before positions (410: deletions
 * since may be forgotten, or cannot be told apart).
 */
export function decodeSyncToken(secret: string, token: string, ownerId: number, now: number, maxAgeMs: number): SyncState {
  const state = readState(secret, token, ownerId);
  if (!state) throw new SyncTokenError(readClaims(secret, token, ownerId, TRANSACTION_ID_LABEL) !== null);
  if (now - state.sinceAt > maxAgeMs) throw new SyncTokenError(true);
  return state;
}
