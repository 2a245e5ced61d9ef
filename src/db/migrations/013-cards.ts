import { type Kysely, sql } from 'kysely';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/**
 * CardDAV (docs/carddav.md). A card stored over CardDAV needs only a name, so `email`, `phone` and
 * `birthday` (and the birthday's key) may be null. Three nullable columns keep what only such a card
 * has: `card` (the vCard as the client sent it; null for a contact written only over REST, whose
 * card is rendered from its fields), `card_name` (the client's resource name; null means
 * `{uid uuid}.vcf`) and `uid` (the card's UID; null means the UID derived from the contact's id,
 * src/carddav/card-identity.ts). Dropping NOT NULL and adding nullable columns without defaults
 * rewrites no row, and no existing row needs a value: filling UIDs would update every row, which
 * moves every row's sync position (migration 005's trigger) and makes every sync client fetch
 * every contact again, for a value that can be computed.
 */
export async function up(db: Kysely<any>): Promise<void> {
  for (const column of ['email', 'phone', 'birthday', 'birthday_key']) {
    await sql`alter table contacts alter column ${sql.id(column)} drop not null`.execute(db);
  }
  await sql`alter table contacts add column card text, add column card_name text, add column uid text`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`alter table contacts drop column card, drop column card_name, drop column uid`.execute(db);
}
