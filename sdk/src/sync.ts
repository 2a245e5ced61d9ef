import type { ContactsClient } from './client.js';
import type { Contact } from './conditional.js';
import { apiError } from './errors.js';
import type { components } from './openapi.js';

export type SyncPage = components['schemas']['SyncPage'];

/**
 * Where `syncContacts` applies pages. Any method may return a promise, which is awaited before the
 * next step. Run one sync at a time per store.
 */
export interface SyncStore {
  /** The token saved last, or null for none (the next sync is a full one). */
  getToken: () => string | null | Promise<string | null>;
  /** Adds the contact, or replaces the one held with the same id. */
  put: (contact: Contact) => void | Promise<void>;
  /** Forgets the contact with this id, if one is held. */
  remove: (id: number) => void | Promise<void>;
  /** Forgets every contact: a full sync is about to put them all again. */
  clear: () => void | Promise<void>;
  /** Saves a page's `next_token`; called only once the page's puts and removes are done. */
  setToken: (token: string) => void | Promise<void>;
}

export interface SyncOptions {
  /** Changes per page, 1–1000 (the service's default is 100). */
  limit?: number;
  /** A full sync whatever token the store holds: the way back after a 400 `Invalid sync token`. */
  full?: boolean;
}

export interface SyncResult {
  /** The token saved last: the next sync asks for what changed since. */
  token: string;
  /**
   * Whether this call started a full sync (and cleared the store): no token held, `full` asked, or
   * the token expired (410). Finishing one an earlier call began is not starting one.
   */
  full: boolean;
  /** Pages applied, contacts put and ids removed. */
  pages: number;
  put: number;
  removed: number;
}

/**
 * Brings `store` up to date: `GET /api/contacts/sync` from the token it holds, each page applied
 * (puts, removes, then the page's token saved, so a sync cut short resumes where it stopped and
 * skips nothing) until `has_more` is false. A full sync clears the store when its first page
 * arrives. An expired token (410) starts a full sync, once per call. Any other error answer
 * (400 `Invalid sync token`, 401, 429, ...) is thrown as an ApiError, with the store as the last
 * applied page left it.
 */
export async function syncContacts(client: ContactsClient, store: SyncStore, options: SyncOptions = {}): Promise<SyncResult> {
  let token = options.full ? null : await store.getToken();
  let restarted = false;
  const result: Omit<SyncResult, 'token'> = { full: token === null, pages: 0, put: 0, removed: 0 };
  for (;;) {
    const {
      data: page,
      error,
      response,
    } = await client.GET('/api/contacts/sync', {
      params: { query: { token: token ?? undefined, limit: options.limit } },
    });
    if (!page) {
      if (response.status !== 410 || restarted) throw apiError(error, response);
      restarted = true;
      token = null;
      result.full = true;
      continue;
    }
    // Cleared only now, so a store keeps what it held when the full sync cannot even start.
    if (token === null) await store.clear();
    for (const contact of page.contacts) await store.put(contact);
    for (const id of page.deleted) await store.remove(id);
    await store.setToken(page.next_token);
    token = page.next_token;
    result.pages++;
    result.put += page.contacts.length;
    result.removed += page.deleted.length;
    if (!page.has_more) return { token, ...result };
  }
}

/** A SyncStore in memory: `contacts` by id and the `token`, for tests and short-lived clients. */
export interface MemorySyncStore extends SyncStore {
  readonly contacts: ReadonlyMap<number, Contact>;
  readonly token: string | null;
  getToken: () => string | null;
  put: (contact: Contact) => void;
  remove: (id: number) => void;
  clear: () => void;
  setToken: (token: string) => void;
}

/** An empty MemorySyncStore. */
export function memorySyncStore(): MemorySyncStore {
  const contacts = new Map<number, Contact>();
  let token: string | null = null;
  return {
    contacts,
    get token() {
      return token;
    },
    getToken: () => token,
    put: (contact) => void contacts.set(contact.id, contact),
    remove: (id) => void contacts.delete(id),
    clear: () => contacts.clear(),
    setToken: (next) => {
      token = next;
    },
  };
}
