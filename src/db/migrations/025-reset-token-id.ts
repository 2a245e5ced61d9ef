import type { Kysely } from 'kysely';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/**
 * The `jti` of the user's live reset token beside its digest. A token's issue time is its jti's
 * (a UUIDv7), so the service can sign the same token again and mail the same link once more, rather
 * than a new one that would void the link already in the owner's mailbox (docs/limits.md, "Mail").
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('users').addColumn('reset_token_jti', 'text').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('users').dropColumn('reset_token_jti').execute();
}
