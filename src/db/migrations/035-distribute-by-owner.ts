import { type Kysely, sql } from 'kysely';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/**
 * On a Citus coordinator (the `citus` extension exists), shards every table by its owner:
 * `users` by id and each per-user table by its owner column, co-located with `users`, so every
 * statement of one user runs on the one worker that holds that user's shard group (a router plan).
 * The uniqueness tables are sharded by the value they keep unique. Elsewhere (PostgreSQL without
 * Citus, PGlite) it does nothing. docs/performance.md ("Citus") says how to run on a cluster.
 *
 * Not in a transaction, and each table only if it is not distributed yet: distributing copies a
 * table's rows into its shards, and an interrupted run is finished by the next. A later migration
 * that creates a per-user table distributes it itself.
 */
export const transactional = false;

/** Per-user tables and the column naming their owner, distributed after `users` (foreign keys point at it). */
const CO_LOCATED_WITH_USERS = [
  ['address_books', 'owner_id'],
  ['contacts', 'owner_id'],
  ['contact_tombstones', 'owner_id'],
  ['tombstone_horizons', 'owner_id'],
  ['large_owners', 'owner_id'],
  ['book_properties', 'owner_id'],
  ['idempotency_keys', 'owner_id'],
  ['app_passwords', 'user_id'],
  ['avatars', 'user_id'],
] as const;

/** Tables sharded by the value they keep unique among all users, each its own co-location group. */
const KEYED_BY_VALUE = [
  ['user_names', 'name'],
  ['user_emails', 'email'],
  ['legacy_avatar_names', 'name'],
] as const;

export async function up(db: Kysely<any>): Promise<void> {
  if (!(await hasCitus(db))) return;
  // The contacts' row triggers write only rows of the same owner in co-located shards, which is
  // what Citus runs safely; it refuses triggers on distributed tables unless told so.
  await sql`set citus.enable_unsafe_triggers = on`.execute(db);
  try {
    await distribute(db, 'users', 'id', 'none');
    for (const [table, column] of CO_LOCATED_WITH_USERS) await distribute(db, table, column, 'users');
    for (const [table, column] of KEYED_BY_VALUE) await distribute(db, table, column, 'none');
  } finally {
    await sql`reset citus.enable_unsafe_triggers`.execute(db);
  }
}

export async function down(db: Kysely<any>): Promise<void> {
  if (!(await hasCitus(db))) return;
  const tables = [...KEYED_BY_VALUE, ...CO_LOCATED_WITH_USERS].map(([table]) => table).reverse();
  for (const table of [...tables, 'users']) {
    if (await isDistributed(db, table)) await sql`select undistribute_table(${table}, cascade_via_foreign_keys => true)`.execute(db);
  }
}

async function hasCitus(db: Kysely<any>): Promise<boolean> {
  const { rows } = await sql<{ citus: boolean }>`select exists (select from pg_extension where extname = 'citus') as citus`.execute(db);
  return rows[0]!.citus;
}

async function isDistributed(db: Kysely<any>, table: string): Promise<boolean> {
  const { rows } = await sql<{ distributed: boolean }>`
    select exists (select from pg_dist_partition where logicalrelid = to_regclass(${table})) as distributed`.execute(db);
  return rows[0]!.distributed;
}

async function distribute(db: Kysely<any>, table: string, column: string, colocateWith: string): Promise<void> {
  if (await isDistributed(db, table)) return;
  await sql`select create_distributed_table(${table}, ${column}, colocate_with => ${colocateWith})`.execute(db);
}
