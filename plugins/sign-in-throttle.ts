import fp from 'fastify-plugin';
import { HttpError } from './http/errors.js';
import { outageLog } from './outage-log.js';
import { lru } from './lru.js';

/** 429 for one more guess at an account that has had too many wrong passwords (docs/limits.md, "Sign-in"). */
export class SignInThrottled extends HttpError {
  constructor(retryAfterSeconds: number) {
    super(429, `Too many failed sign-ins for this account from this address, retry in ${retryAfterSeconds} seconds or reset the password`, {
      'Retry-After': retryAfterSeconds,
    });
  }
}

/** The account a user's failed sign-ins count against, whichever name was typed and wherever the password was asked for. */
export function userAccount(userId: number): string {
  return `user:${userId}`;
}

export interface SignInThrottle {
  /**
   * Throws SignInThrottled when `account` has had SIGN_IN_ACCOUNT_FAILURES failures in the current
   * window and SIGN_IN_ADDRESS_FAILURES of them came from `address`. An address with fewer is still
   * checked, so a flood from elsewhere plus a typo or two of the owner does not lock the owner out.
   */
  check(account: string, address: string): Promise<void>;
  /** Records a wrong password for `account` from `address`. */
  failed(account: string, address: string): Promise<void>;
  /** Forgets the account's failures (after a password reset by its owner). */
  clear(account: string): Promise<void>;
}

declare module 'fastify' {
  interface FastifyInstance {
    signInThrottle: SignInThrottle;
  }
}

interface Failures {
  /** Failures in the window, from any address. */
  total: number;
  /** How many of them came from the asking address. */
  fromAddress: number;
  /** Milliseconds until the window ends. */
  ttlMs: number;
}

/** The account's window: field `*` counts every failure, one field per address counts its own. */
const RECORD = `
local total = redis.call('HINCRBY', KEYS[1], '*', 1)
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
if total == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return total`;

/** Accounts the in-process fallback remembers; the least recently used go first. */
const FALLBACK_ACCOUNTS = 100_000;

/**
 * `app.signInThrottle`: failures per account in a fixed window from the first one, in Redis when
 * there is one (every instance sees them), counted in this process while Redis refuses.
 */
export default fp(
  async (app) => {
    const { signInAccountFailures: limit, signInAddressFailures: ownLimit, signInFailureWindowS, redisKeyPrefix } = app.config;
    const windowMs = signInFailureWindowS * 1000;
    const redis = app.redisClient;
    const outage = outageLog(
      app.log,
      { down: 'sign-in failure store unavailable; counting in this process', up: 'sign-in failure store reachable again' },
      1_000,
    );
    const local = lru<string, { addresses: Map<string, number>; total: number; endsAt: number }>(FALLBACK_ACCOUNTS);

    const keyOf = (account: string) => `${redisKeyPrefix}sign-in:${account}`;

    function localWindow(account: string) {
      const window = local.get(account);
      return window && window.endsAt > Date.now() ? window : undefined;
    }

    async function read(account: string, address: string): Promise<Failures> {
      if (redis) {
        try {
          const [[, total], [, own], [, ttl]] = (await redis
            .multi()
            .hget(keyOf(account), '*')
            .hget(keyOf(account), address)
            .pttl(keyOf(account))
            .exec()) as [[null, string | null], [null, string | null], [null, number]];
          outage.answered();
          return { total: Number(total ?? 0), fromAddress: Number(own ?? 0), ttlMs: ttl };
        } catch (err) {
          outage.failed(err);
        }
      }
      const window = localWindow(account);
      return {
        total: window?.total ?? 0,
        fromAddress: window?.addresses.get(address) ?? 0,
        ttlMs: window ? window.endsAt - Date.now() : 0,
      };
    }

    function recordHere(account: string, address: string): void {
      const window = localWindow(account) ?? { addresses: new Map<string, number>(), total: 0, endsAt: Date.now() + windowMs };
      window.total++;
      window.addresses.set(address, (window.addresses.get(address) ?? 0) + 1);
      local.set(account, window);
    }

    app.decorate('signInThrottle', {
      async check(account, address) {
        const failures = await read(account, address);
        if (failures.total >= limit && failures.fromAddress >= ownLimit)
          throw new SignInThrottled(Math.max(1, Math.ceil(failures.ttlMs / 1000)));
      },
      async failed(account, address) {
        if (redis) {
          try {
            await redis.eval(RECORD, 1, keyOf(account), address, windowMs);
            outage.answered();
            return;
          } catch (err) {
            outage.failed(err);
          }
        }
        recordHere(account, address);
      },
      async clear(account) {
        local.delete(account);
        if (!redis) return;
        try {
          await redis.del(keyOf(account));
        } catch (err) {
          outage.failed(err);
        }
      },
    } satisfies SignInThrottle);
  },
  { name: 'sign-in-throttle', dependencies: ['config', 'redis'], fastify: '5.x' },
);
