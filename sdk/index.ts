/**
 * Typed TypeScript client for the Contacts service. `sdk/schema.d.ts` is generated from
 * openapi.yaml by `npm run sdk` (openapi-typescript); openapi-fetch turns it into typed calls.
 */
import createClient, { type Client } from 'openapi-fetch';
import type { paths } from './schema.js';

export type { components, operations, paths } from './schema.js';
export type ContactsClient = Client<paths>;

/** A client for `baseUrl`; `accessToken()` supplies the bearer token for each request, when there is one. */
export function createContactsClient(baseUrl: string, accessToken: () => string | null = () => null): ContactsClient {
  const client = createClient<paths>({ baseUrl });
  client.use({
    onRequest({ request }) {
      const token = accessToken();
      if (token) request.headers.set('Authorization', `Bearer ${token}`);
      return request;
    },
  });
  return client;
}

/** Login takes a form body, not JSON. */
export const formBody = (body: Record<string, string>) => new URLSearchParams(body);
