import { createHash } from 'node:crypto';
import fp from 'fastify-plugin';
import { outageLog } from './outage-log.js';
import { lru } from './lru.js';

/** The mails anyone can have sent to an address of an account, each with an allowance of its own. */
export type AccountMail = 'verification' | 'reset';

export interface MailLimit {
  /**
   * Takes one `kind` mail to `address` (ignoring case) from the address's allowance of
   * MAIL_PER_RECIPIENT_PER_HOUR; false when none is left, and then nothing must be sent.
   */
  take(kind: AccountMail, address: string): Promise<boolean>;
}

declare module 'fastify' {
  interface FastifyInstance {
    mailLimit: MailLimit;
  }
}

/** A fixed hour from the first mail counted. */
const WINDOW_MS = 3_600_000;
/** Addresses the in-process fallback remembers; the least recently used go first. */
const FALLBACK_ADDRESSES = 100_000;

const TAKE = `
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return count`;

/**
 * `app.mailLimit`: verification and reset mails per recipient address and hour (docs/limits.md,
 * "Mail"), so that nobody can flood an address through the anonymous operations that mail it. Counted
 * in Redis when there is one (every instance shares the count), in this process while Redis refuses.
 * Keys hold a digest of the address, never the address.
 */
export default fp(
  async (app) => {
    const { mailPerRecipientPerHour: max, redisKeyPrefix } = app.config;
    const redis = app.redisClient;
    const outage = outageLog(
      app.log,
      { down: 'mail limit store unavailable; counting in this process', up: 'mail limit store reachable again' },
      1_000,
    );
    const local = lru<string, { count: number; endsAt: number }>(FALLBACK_ADDRESSES);

    function countHere(key: string): number {
      const now = Date.now();
      const window = local.get(key);
      const current = window && window.endsAt > now ? window : { count: 0, endsAt: now + WINDOW_MS };
      current.count++;
      local.set(key, current);
      return current.count;
    }

    app.decorate('mailLimit', {
      async take(kind, address) {
        const key = `mail:${kind}:${createHash('sha256').update(address.toLowerCase()).digest('hex')}`;
        if (redis) {
          try {
            const count = Number(await redis.eval(TAKE, 1, `${redisKeyPrefix}${key}`, WINDOW_MS));
            outage.answered();
            return count <= max;
          } catch (err) {
            outage.failed(err);
          }
        }
        return countHere(key) <= max;
      },
    } satisfies MailLimit);
  },
  { name: 'mail-limit', dependencies: ['config', 'redis'], fastify: '5.x' },
);
