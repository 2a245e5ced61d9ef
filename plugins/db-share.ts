import { AsyncLocalStorage } from 'node:async_hooks';
import type { PostgresPool } from 'kysely';
import { HttpError } from './http/errors.js';

/** Seconds a user over their share is asked to wait: their requests ahead of it take about that long. */
const SHARE_RETRY_AFTER_S = 1;

/** 429: too many of one user's requests are already using or waiting for the database. */
export class DatabaseShareExceeded extends HttpError {
  constructor() {
    super(429, `Too many of your requests are waiting for the database, retry in ${SHARE_RETRY_AFTER_S} seconds`, {
      'Retry-After': SHARE_RETRY_AFTER_S,
    });
  }
}

/** One request's claim on its user's share: one place, however many connections the request takes at once. */
interface Claim {
  readonly userId: number;
  /** Connections the request is taking or holding; the place is given back when this falls to 0. */
  holders: number;
  /** The place, once asked for; shared by the request's concurrent connects. */
  place: Promise<void> | null;
}

/**
 * Places of each user, per instance: `inUse` requests of a user may hold database connections at
 * once, `waiting` more wait in order, and any further one is refused (DatabaseShareExceeded). A
 * request counts once however many connections it takes (a transaction and a read beside it), so
 * it can never wait for a place of its own user while holding one.
 */
export class UserShares {
  readonly #users = new Map<number, { inUse: number; queue: (() => void)[] }>();
  readonly #claims = new AsyncLocalStorage<Claim>();

  constructor(
    private readonly inUse: number,
    private readonly waiting: number,
  ) {}

  /** Runs `next` (the rest of a request) with its database connections counted in `userId`'s share. */
  runAs(userId: number, next: () => void): void {
    this.#claims.run({ userId, holders: 0, place: null }, next);
  }

  /** `pool` with each connection taken inside runAs counted in its user's share; others (start-up, timers, sign-in) are not. */
  pool(pool: PostgresPool): PostgresPool {
    return {
      connect: async () => {
        const claim = this.#claims.getStore();
        if (!claim) return pool.connect();
        claim.holders++;
        try {
          claim.place ??= this.#take(claim.userId);
          await claim.place;
          const client = await pool.connect();
          let released = false;
          return {
            query: client.query.bind(client),
            release: () => {
              if (released) return;
              released = true;
              client.release();
              this.#letGo(claim);
            },
          };
        } catch (error) {
          this.#letGo(claim);
          throw error;
        }
      },
      end: () => pool.end(),
      options: pool.options,
    };
  }

  async #take(userId: number): Promise<void> {
    let user = this.#users.get(userId);
    if (!user) this.#users.set(userId, (user = { inUse: 0, queue: [] }));
    if (user.inUse < this.inUse) {
      user.inUse++;
      return;
    }
    if (user.queue.length >= this.waiting) throw new DatabaseShareExceeded();
    // The place is handed over by #give: inUse stays counted for the waiter.
    await new Promise<void>((resolve) => user.queue.push(resolve));
  }

  #letGo(claim: Claim): void {
    if (--claim.holders > 0) return;
    const place = claim.place;
    claim.place = null;
    // A place refused (429) was never held; one granted goes to the next waiter or back.
    place?.then(
      () => this.#give(claim.userId),
      () => undefined,
    );
  }

  #give(userId: number): void {
    const user = this.#users.get(userId)!;
    const next = user.queue.shift();
    if (next) return next();
    if (--user.inUse === 0) this.#users.delete(userId);
  }
}
