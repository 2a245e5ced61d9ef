/** Typed client for the Contacts service: openapi-fetch over the service's own OpenAPI types. */
export { createContactsClient, type ContactsClient, type ContactsClientOptions, type TokenGetter } from './client.js';
export { login, refreshTokens, tokenSession, type LoginForm, type TokenPair, type TokenResult, type TokenSession } from './auth.js';
export { changePassword, deleteAccount, exportAccount } from './account.js';
export {
  deleteContactIfUnchanged,
  getContactWithTag,
  replaceContactIfUnchanged,
  updateContactIfUnchanged,
  type ConditionalDelete,
  type ConditionalWrite,
  type Contact,
  type ContactCreate,
  type ContactPatch,
  type Refusal,
  type TaggedRead,
} from './conditional.js';
export {
  memorySyncStore,
  syncContacts,
  type MemorySyncStore,
  type SyncOptions,
  type SyncPage,
  type SyncResult,
  type SyncStore,
} from './sync.js';
export { ApiError } from './errors.js';
export type { RetryOptions } from './retries.js';
export type { components, operations, paths } from './openapi.js';
