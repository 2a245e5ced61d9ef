import createClient, { type Client, type ClientOptions, type Middleware } from 'openapi-fetch';
import type { paths } from './openapi.js';
import { idempotencyKeys, type RetryOptions, retryingWrites } from './retries.js';

export type ContactsClient = Client<paths>;

/** Supplies the access token for a request, or null to send none. */
export type TokenGetter = () => string | null | Promise<string | null>;

export interface ContactsClientOptions extends Omit<ClientOptions, 'baseUrl'> {
  /**
   * Called when a request sent with a token is answered 401: resolves with a new access token (one
   * `getToken` returns from then on), or null to let the 401 through. Concurrent 401s share one call.
   */
  refresh?: (client: ContactsClient) => Promise<string | null>;
  /**
   * How creates and imports, each sent with an `Idempotency-Key`, are retried when their answer
   * may have been lost (a network error, 502/503/504, 409 in progress); `false` never retries
   * (the key is still sent). See RetryOptions for the defaults.
   */
  retry?: RetryOptions | false;
}

/** Their 401 means wrong credentials, not an expired access token: never refreshed, never retried. */
const CREDENTIAL_PATHS: ReadonlySet<string> = new Set<keyof paths>(['/api/auth/login', '/api/auth/refresh']);

/**
 * A typed client for the service at `baseUrl`. Each request carries `Authorization: Bearer` from
 * `getToken`; with `options.refresh`, a 401 gets one refresh and one retry. Creates and imports
 * carry an `Idempotency-Key` and are retried with it (`options.retry`).
 */
export function createContactsClient(
  baseUrl: string,
  getToken: TokenGetter = () => null,
  options: ContactsClientOptions = {},
): ContactsClient {
  const { refresh, retry = {}, ...clientOptions } = options;
  const client = createClient<paths>({ ...clientOptions, baseUrl });
  // In this order: every copy a retry sends carries the key, and the retries' copy the token too.
  client.use(idempotencyKeys());
  client.use(bearerAuth(getToken, refresh && (() => refresh(client))));
  client.use(retryingWrites(retry === false ? { retries: 0 } : retry));
  return client;
}

/** openapi-fetch middleware: sets the bearer token; on a 401, refreshes once and retries once. */
function bearerAuth(getToken: TokenGetter, refresh: (() => Promise<string | null>) | undefined): Middleware {
  // An unsent copy of each request that may be retried (a sent body cannot be read again), keyed
  // by openapi-fetch's request id, with the token it carried.
  const retryable = new Map<string, { copy: Request; token: string }>();
  let refreshing: Promise<string | null> | null = null;
  const refreshOnce = (refresh: () => Promise<string | null>) =>
    (refreshing ??= Promise.resolve()
      .then(refresh)
      .finally(() => {
        refreshing = null;
      }));

  return {
    async onRequest({ request, schemaPath, id }) {
      const token = await getToken();
      if (!token) return undefined;
      request.headers.set('Authorization', `Bearer ${token}`);
      if (refresh && !CREDENTIAL_PATHS.has(schemaPath)) retryable.set(id, { copy: request.clone(), token });
      return request;
    },
    async onResponse({ response, id, options }) {
      const sent = retryable.get(id);
      retryable.delete(id);
      if (!sent || !refresh || response.status !== 401) return undefined;
      // A request that left before another one's refresh finished needs no refresh of its own.
      const current = await getToken();
      const token = current && current !== sent.token ? current : await refreshOnce(refresh);
      if (!token) return undefined;
      await response.body?.cancel();
      sent.copy.headers.set('Authorization', `Bearer ${token}`);
      // Straight to fetch, not through the middleware again: one retry, whatever it answers.
      return options.fetch(sent.copy);
    },
    onError({ id }) {
      retryable.delete(id);
    },
  };
}
