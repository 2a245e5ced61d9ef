import type { Kysely } from 'kysely';
import { createIndex, dropIndex } from './concurrent-index.js';
import { sql } from 'kysely';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/**
 * Expired Idempotency-Keys are purged per owner (src/idempotency/idempotency.service.ts), by the
 * owner's index of 026; the index on created_at alone served a purge over every owner, which on
 * Citus runs on every shard.
 */
export const transactional = false;

export async function up(db: Kysely<any>): Promise<void> {
  await dropIndex(db, 'idempotency_keys_created_at_idx');
}

export async function down(db: Kysely<any>): Promise<void> {
  await createIndex(db, 'idempotency_keys', 'idempotency_keys_created_at_idx', sql`(created_at)`);
}
