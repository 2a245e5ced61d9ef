import { type Kysely, sql } from 'kysely';
import { preparedStatement } from '../../plugins/db.js';
import type { Database } from '../db/database.js';

/** A stored answer and the hash of the request that got it. */
export interface StoredAnswer {
  request_hash: Uint8Array;
  status: number;
  headers: Record<string, string | number>;
  body: string;
}

/** What a keyed write stores beside its key. */
export interface AnswerRow extends StoredAnswer {
  owner_id: number;
  operation: string;
  key: string;
  answer_bytes: number;
  created_at: Date;
}

/**
 * The database ends a transaction that waits this long for its next statement: a keyed write
 * never pauses between statements, so only an instance gone without closing its connection (a
 * lost machine, which TCP would notice only after hours) leaves one that idle, holding its key.
 */
const KEYED_WRITE_IDLE_MS = 60_000;

/** The owner's answer for the key stored after `since` (expired ones are none), or undefined. */
export async function findAnswer(
  db: Kysely<Database>,
  ownerId: number,
  operation: string,
  key: string,
  since: Date,
): Promise<StoredAnswer | undefined> {
  const [stored] = (await db.executeQuery(selectAnswer(db, { ownerId, operation, key, since }))).rows;
  return stored;
}

/**
 * The statements of every keyed write are prepared (plugins/db.ts): their text is fixed, and each
 * connection then parses and plans them once.
 */
const selectAnswer = preparedStatement(['ownerId', 'operation', 'key', 'since'], (db: Kysely<Database>, values) =>
  db
    .selectFrom('idempotency_keys')
    .select(['request_hash', 'status', 'headers', 'body'])
    .where('owner_id', '=', values.ownerId)
    .where('operation', '=', values.operation)
    .where('key', '=', values.key)
    .where('created_at', '>', values.since),
);

/**
 * Takes the advisory lock `lockId` for the rest of the caller's transaction, unless another
 * transaction holds it (false; never waits), and bounds how long the transaction may idle.
 * Advisory locks are the server's, so this holds across instances; PGlite has one session, whose
 * transactions never overlap.
 */
export async function tryLock(trx: Kysely<Database>, lockId: bigint): Promise<boolean> {
  const [row] = (await trx.executeQuery(lockKey(trx, { lockId: lockId.toString() }))).rows;
  return row!.locked;
}

const lockKey = preparedStatement(['lockId'], (db: Kysely<Database>, { lockId }) =>
  db.selectNoFrom([
    sql<boolean>`pg_try_advisory_xact_lock(${lockId}::bigint)`.as('locked'),
    sql<string>`set_config('idle_in_transaction_session_timeout', ${sql.lit(String(KEYED_WRITE_IDLE_MS))}, true)`.as('idle_limit'),
  ]),
);

/**
 * Stores an answer in the caller's transaction, in place of the key's row if that expired (stored
 * at or before `expiredBy`), with a new id. Returns the row's id; undefined when the key has a
 * live row (the caller holds the key's lock and found none, so never).
 */
export async function storeAnswer(trx: Kysely<Database>, row: AnswerRow, expiredBy: Date): Promise<number | undefined> {
  const [stored] = (await trx.executeQuery(insertAnswer(trx, { ...row, headers: JSON.stringify(row.headers), expiredBy }))).rows;
  return stored?.id;
}

const ANSWER_COLUMNS = [
  'owner_id',
  'operation',
  'key',
  'request_hash',
  'status',
  'headers',
  'body',
  'answer_bytes',
  'created_at',
] as const satisfies readonly (keyof AnswerRow)[];

const insertAnswer = preparedStatement([...ANSWER_COLUMNS, 'expiredBy'], (db: Kysely<Database>, { expiredBy, ...row }) =>
  db
    .insertInto('idempotency_keys')
    .values(row)
    .onConflict((conflict) =>
      conflict
        .columns(['owner_id', 'operation', 'key'])
        .doUpdateSet((eb) => ({
          id: eb.ref('excluded.id'),
          request_hash: eb.ref('excluded.request_hash'),
          status: eb.ref('excluded.status'),
          headers: eb.ref('excluded.headers'),
          body: eb.ref('excluded.body'),
          answer_bytes: eb.ref('excluded.answer_bytes'),
          created_at: eb.ref('excluded.created_at'),
        }))
        .where('idempotency_keys.created_at', '<=', expiredBy),
    )
    .returning('id'),
);

/**
 * Forgets the owner's oldest keys beyond the newest `maxKeys`, or beyond the newest whose answers
 * take `maxBytes` together; the newest key stays whatever its size. Reads the owner's entries of
 * one index, newest first.
 */
export async function forgetOldest(db: Kysely<Database>, ownerId: number, maxKeys: number, maxBytes: number): Promise<void> {
  await sql`
    delete from idempotency_keys
     where owner_id = ${ownerId}
       and id <= (select id from (select id, row_number() over newest as rank, sum(answer_bytes) over newest as bytes
                                    from idempotency_keys where owner_id = ${ownerId}
                                  window newest as (order by id desc)) ranked
                   where rank > 1 and (rank > ${maxKeys} or bytes > ${maxBytes})
                   order by id desc
                   limit 1)`.execute(db);
}

/** Deletes the owner's keys stored at or before `expiredBy` (at most IDEMPOTENCY_KEYS_PER_USER of them). */
export async function forgetExpired(db: Kysely<Database>, ownerId: number, expiredBy: Date): Promise<void> {
  await db.deleteFrom('idempotency_keys').where('owner_id', '=', ownerId).where('created_at', '<=', expiredBy).execute();
}
