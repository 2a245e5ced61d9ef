import type { AppMigration } from '../../../plugins/migrate.js';
import * as users from './001-users.js';
import * as contacts from './002-contacts.js';
import * as ownerScopedIndexes from './003-owner-scoped-indexes.js';
import * as avatars from './004-avatars.js';
import * as sync from './005-sync.js';
import * as syncIndex from './006-sync-index.js';
import * as searchIndex from './007-search-index.js';
import * as contactCounts from './008-contact-counts.js';
import * as searchGrams from './009-search-grams.js';
import * as cards from './013-cards.js';
import * as cardIndexes from './014-card-indexes.js';
import * as appPasswords from './015-app-passwords.js';
import * as tombstoneCardNames from './016-tombstone-card-names.js';
import * as tombstoneHorizons from './017-tombstone-horizons.js';
import * as largeOwners from './018-large-owners.js';
import * as largeOwnerGrams from './019-large-owner-grams.js';
import * as countShards from './020-count-shards.js';
import * as insertChangeDefault from './021-insert-change-default.js';
import * as largeOwnerTrigrams from './022-large-owner-trigrams.js';
import * as oneInsertTrigger from './023-one-insert-trigger.js';
import * as resetTokenId from './025-reset-token-id.js';
import * as idempotencyKeys from './026-idempotency-keys.js';
import * as bookProperties from './031-book-properties.js';
import * as cardOctets from './032-card-octets.js';
import * as addressBooks from './033-address-books.js';
import * as accountKeys from './034-account-keys.js';
import * as distributeByOwner from './035-distribute-by-owner.js';
import * as idempotencyPurgeByOwner from './036-idempotency-purge-by-owner.js';

/** Every migration in order. Listed here (not read from disk) so they run the same from TS and built JS. */
export const migrations: Record<string, AppMigration> = {
  '001-users': users,
  '002-contacts': contacts,
  '003-owner-scoped-indexes': ownerScopedIndexes,
  '004-avatars': avatars,
  '005-sync': sync,
  '006-sync-index': syncIndex,
  '007-search-index': searchIndex,
  '008-contact-counts': contactCounts,
  '009-search-grams': searchGrams,
  '013-cards': cards,
  '014-card-indexes': cardIndexes,
  '015-app-passwords': appPasswords,
  '016-tombstone-card-names': tombstoneCardNames,
  '017-tombstone-horizons': tombstoneHorizons,
  '018-large-owners': largeOwners,
  '019-large-owner-grams': largeOwnerGrams,
  '020-count-shards': countShards,
  '021-insert-change-default': insertChangeDefault,
  '022-large-owner-trigrams': largeOwnerTrigrams,
  '023-one-insert-trigger': oneInsertTrigger,
  '025-reset-token-id': resetTokenId,
  '026-idempotency-keys': idempotencyKeys,
  '031-book-properties': bookProperties,
  '032-card-octets': cardOctets,
  '033-address-books': addressBooks,
  '034-account-keys': accountKeys,
  '035-distribute-by-owner': distributeByOwner,
  '036-idempotency-purge-by-owner': idempotencyPurgeByOwner,
};
