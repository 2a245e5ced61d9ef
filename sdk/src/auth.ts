import type { FetchResponse } from 'openapi-fetch';
import type { ContactsClient } from './client.js';
import type { components, operations } from './openapi.js';

export type LoginForm = components['schemas']['LoginForm'];
export type TokenPair = components['schemas']['TokenPair'];
/** What `client.POST` gives for these operations: `data` (the pair) or `error` (`{ detail }`), and `response`. */
export type TokenResult = FetchResponse<operations['login'] | operations['refreshToken'], object, `${string}/${string}`>;

/** `POST /api/auth/login` with the form body the service takes (urlencoded, not JSON: openapi-fetch encodes it by its Content-Type); `data` is the token pair. */
export function login(client: ContactsClient, form: LoginForm): Promise<TokenResult> {
  return client.POST('/api/auth/login', {
    body: form,
    headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
  });
}

/** `POST /api/auth/refresh`: a new access token for the refresh token from the latest login. */
export function refreshTokens(client: ContactsClient, refreshToken: string): Promise<TokenResult> {
  return client.POST('/api/auth/refresh', { body: { refresh_token: refreshToken } });
}

/** The tokens of one logged-in user, with the two functions `createContactsClient` takes. */
export interface TokenSession {
  /** The pair held, or null when logged out. */
  readonly tokens: TokenPair | null;
  /** Holds the pair `login` returned, or forgets it (null). */
  set(tokens: TokenPair | null): void;
  /** The access token held: `createContactsClient`'s `getToken`. */
  getToken: () => string | null;
  /**
   * `createContactsClient`'s `refresh`: holds and resolves with a new access token, or null when
   * there is none to get; a refresh token the service refuses (401) is forgotten.
   */
  refresh: (client: ContactsClient) => Promise<string | null>;
}

/** An in-memory token store; pass `tokens` from your own storage to resume a session. */
export function tokenSession(tokens: TokenPair | null = null): TokenSession {
  let held = tokens;
  return {
    get tokens() {
      return held;
    },
    set(next) {
      held = next;
    },
    getToken: () => held?.access_token ?? null,
    async refresh(client) {
      const before = held;
      if (!before) return null;
      const { data, response } = await refreshTokens(client, before.refresh_token);
      // A login or `set` while this was under way wins over its answer.
      if (held !== before) return held?.access_token ?? null;
      if (data) held = data;
      else if (response.status === 401) held = null;
      return data?.access_token ?? null;
    },
  };
}
