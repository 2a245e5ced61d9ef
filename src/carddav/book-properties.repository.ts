import { type Kysely, sql } from 'kysely';
import type { Database } from '../db/database.js';

/** A stored dead property of a book: its name, its content as JSON, and the octets it counts. */
export interface BookPropertyRow {
  ns: string;
  name: string;
  value: string;
  bytes: number;
}

/** The owner's book's dead properties. */
export function listBookProperties(db: Kysely<Database>, ownerId: number): Promise<BookPropertyRow[]> {
  return db.selectFrom('book_properties').select(['ns', 'name', 'value', 'bytes']).where('owner_id', '=', ownerId).execute();
}

/**
 * Runs `change` on the owner's dead properties as they stand, with the owner's row locked so that
 * two PROPPATCHes of one book apply one after the other (each judges the bounds on what the other wrote).
 */
export function withBookPropertiesLocked<T>(
  db: Kysely<Database>,
  ownerId: number,
  change: (trx: Kysely<Database>, current: BookPropertyRow[]) => Promise<T>,
): Promise<T> {
  return db.transaction().execute(async (trx) => {
    await sql`select 1 from users where id = ${ownerId} for update`.execute(trx);
    return change(trx, await listBookProperties(trx, ownerId));
  });
}

/** Replaces (or adds) these dead properties and removes those named in `removed`. */
export async function writeBookProperties(
  db: Kysely<Database>,
  ownerId: number,
  set: BookPropertyRow[],
  removed: { ns: string; name: string }[],
): Promise<void> {
  for (const { ns, name } of removed) {
    await db.deleteFrom('book_properties').where('owner_id', '=', ownerId).where('ns', '=', ns).where('name', '=', name).execute();
  }
  if (set.length === 0) return;
  await db
    .insertInto('book_properties')
    .values(set.map((row) => ({ owner_id: ownerId, ...row })))
    .onConflict((conflict) =>
      conflict
        .columns(['owner_id', 'ns', 'name'])
        .doUpdateSet((eb) => ({ value: eb.ref('excluded.value'), bytes: eb.ref('excluded.bytes') })),
    )
    .execute();
}
