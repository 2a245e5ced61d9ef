import { AsyncResource } from 'node:async_hooks';
import fp from 'fastify-plugin';
import type { Kysely } from 'kysely';
import type { Database } from '../db/database.js';

/**
 * Large owners (migrations 018, 019, 022 and 033): the search grams and the trigram indexes are kept only
 * for the contacts of owners with more than LARGE_OWNER_CONTACTS, so an ordinary owner's writes never
 * compute them. An owner is
 * promoted in the background once its count passes the threshold: at start-up, after an import, and
 * after a create that lands on a sampled id (about one create in PROMOTION_CHECK_EVERY checks).
 * Until its row in large_owners is ready, its searches test rows, which answers the same.
 */
export interface LargeOwners {
  /** Promotes the owner in the background if its count is past the threshold; never throws. */
  check(ownerId: number): void;
  /** Settles once every promotion started so far has ended (tests, shutdown). */
  settled(): Promise<void>;
}

declare module 'fastify' {
  interface FastifyInstance {
    largeOwners: LargeOwners;
  }
}

/** A create checks the owner's count when its id is a multiple of this: one read per ~100 creates. */
export const PROMOTION_CHECK_EVERY = 100;
/** Contacts marked per statement: each batch's row locks are held only for its own statement. */
const MARK_BATCH = 1000;

/** Whether the owner's contacts are all in the large-owner indexes (grams and trigrams), so a search may look them up there. */
export async function hasLargeOwnerIndexes(db: Kysely<Database>, ownerId: number): Promise<boolean> {
  const row = await db.selectFrom('large_owners').select('ready').where('owner_id', '=', ownerId).executeTakeFirst();
  return row?.ready === true;
}

/**
 * Makes the owner a large one: its row in large_owners (from then on, the insert trigger of 033
 * marks its new contacts), added in a transaction that then locks the owner's address book, which
 * every insert locks before it reads large_owners: once that lock is taken, each insert that could
 * not see the row has committed. Then every contact is marked in batches, and the row is `ready`.
 * Safe to repeat.
 */
export async function promoteOwner(db: Kysely<Database>, ownerId: number, stopping: () => boolean = () => false): Promise<void> {
  await db.transaction().execute(async (trx) => {
    await trx
      .insertInto('large_owners')
      .values({ owner_id: ownerId })
      .onConflict((conflict) => conflict.doNothing())
      .execute();
    await trx.selectFrom('address_books').select('owner_id').where('owner_id', '=', ownerId).forUpdate().execute();
  });
  for (;;) {
    if (stopping()) return;
    const marked = await db
      .updateTable('contacts')
      .set({ large_owner: true })
      .where('owner_id', '=', ownerId)
      .where('id', 'in', (eb) =>
        eb
          .selectFrom('contacts')
          .select('id')
          .where('owner_id', '=', ownerId)
          .where('large_owner', '=', false)
          .orderBy('id')
          .limit(MARK_BATCH),
      )
      .executeTakeFirst();
    if (marked.numUpdatedRows === 0n) break;
  }
  await db.updateTable('large_owners').set({ ready: true }).where('owner_id', '=', ownerId).execute();
}

/** Owners past `threshold` contacts (their address books' counts) that are not ready yet, `only` one if given. */
export async function ownersToPromote(db: Kysely<Database>, threshold: number, only?: number): Promise<number[]> {
  const rows = await db
    .selectFrom('address_books')
    .leftJoin('large_owners', 'large_owners.owner_id', 'address_books.owner_id')
    .select('address_books.owner_id')
    .$if(only !== undefined, (query) => query.where('address_books.owner_id', '=', only!))
    .where('address_books.contacts', '>', threshold)
    .where((eb) => eb.or([eb('large_owners.ready', 'is', null), eb('large_owners.ready', '=', false)]))
    .execute();
  return rows.map((row) => row.owner_id);
}

/** `app.largeOwners`; promotes at start-up the owners already past the threshold. */
export default fp(
  async (app) => {
    const threshold = app.config.largeOwnerContacts;
    let closing = false;
    /** Promotions run one at a time, in order: each is a long series of short statements. */
    let queue: Promise<void> = Promise.resolve();
    const enqueue = (find: () => Promise<number[]>) => {
      queue = queue
        .then(async () => {
          if (closing) return;
          for (const ownerId of await find()) {
            if (closing) return;
            const started = Date.now();
            await promoteOwner(app.db, ownerId, () => closing);
            if (!closing) app.log.info({ ownerId, ms: Date.now() - started }, 'large owner promoted: its searches use the grams');
          }
        })
        // The next trigger tries again; a failure costs only the speed of that owner's short searches.
        .catch((error: unknown) => app.log.warn({ err: error }, 'large owner promotion failed; it is retried at the next check'));
    };
    // A promotion is the instance's work, not the request's that asked for it: it runs in this
    // plugin's async context, outside that user's database share (plugins/db-share.ts).
    const detached = AsyncResource.bind((work: () => void) => work());
    app.decorate('largeOwners', {
      check(ownerId: number) {
        if (!closing) detached(() => enqueue(() => ownersToPromote(app.db, threshold, ownerId)));
      },
      settled: () => queue,
    });
    app.addHook('onReady', async () => enqueue(() => ownersToPromote(app.db, threshold)));
    app.addHook('onClose', async () => {
      closing = true;
      await queue;
    });
  },
  { name: 'large-owners', dependencies: ['db'] },
);
