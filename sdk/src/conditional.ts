import type { ContactsClient } from './client.js';
import { apiError } from './errors.js';
import type { components } from './openapi.js';

export type Contact = components['schemas']['Contact'];
export type ContactCreate = components['schemas']['ContactCreate'];
export type ContactPatch = components['schemas']['ContactPatch'];

/** A conditional call that did nothing: the contact has another tag now (412), or is missing or not the user's (404). */
export type Refusal = { ok: false; reason: 'changed' } | { ok: false; reason: 'not-found' };

/** What `updateContactIfUnchanged` and `replaceContactIfUnchanged` resolve with. */
export type ConditionalWrite = { ok: true; contact: Contact; etag: string } | Refusal;

/** What `deleteContactIfUnchanged` resolves with; `contact` is the contact as it was. */
export type ConditionalDelete = { ok: true; contact: Contact } | Refusal;

/** What `getContactWithTag` resolves with. */
export type TaggedRead =
  | { ok: true; notModified: false; contact: Contact; etag: string }
  /** The contact still has the tag passed in. */
  | { ok: true; notModified: true; etag: string }
  | { ok: false; reason: 'not-found' };

/** The contact answer's `ETag`; the service always sends one, so its absence is a broken setup (CORS not exposing it, say). */
function etagOf(response: Response): string {
  const etag = response.headers.get('ETag');
  if (etag === null) throw new Error(`${response.url}: the answer carries no ETag header`);
  return etag;
}

/** 412 and 404 as results; any other error answer thrown as an ApiError. */
function refusal(error: unknown, response: Response): Refusal {
  if (response.status === 412) return { ok: false, reason: 'changed' };
  if (response.status === 404) return { ok: false, reason: 'not-found' };
  throw apiError(error, response);
}

/**
 * `GET /api/contacts/{id}` with its tag; given the tag held (`knownEtag`), sends `If-None-Match`
 * and reports a 304 as `notModified`. Errors other than 404 are thrown as ApiError.
 */
export async function getContactWithTag(client: ContactsClient, id: number, knownEtag?: string): Promise<TaggedRead> {
  const { data, error, response } = await client.GET('/api/contacts/{contact_id}', {
    params: { path: { contact_id: id }, header: knownEtag === undefined ? {} : { 'If-None-Match': knownEtag } },
  });
  if (data) return { ok: true, notModified: false, contact: data, etag: etagOf(response) };
  // A 304 is no `ok` response to fetch, so openapi-fetch gives it as an error with no body.
  if (response.status === 304) return { ok: true, notModified: true, etag: etagOf(response) };
  if (response.status === 404) return { ok: false, reason: 'not-found' };
  throw apiError(error, response);
}

/**
 * `PATCH /api/contacts/{id}` only if the contact still has tag `etag` (`If-Match`). A stale tag is
 * `changed` and nothing is written; other errors (409, 422, ...) are thrown as ApiError.
 */
export async function updateContactIfUnchanged(
  client: ContactsClient,
  id: number,
  etag: string,
  patch: ContactPatch,
): Promise<ConditionalWrite> {
  const { data, error, response } = await client.PATCH('/api/contacts/{contact_id}', {
    params: { path: { contact_id: id }, header: { 'If-Match': etag } },
    body: patch,
  });
  return data ? { ok: true, contact: data, etag: etagOf(response) } : refusal(error, response);
}

/** `PUT /api/contacts/{id}` only if the contact still has tag `etag`; results as `updateContactIfUnchanged`. */
export async function replaceContactIfUnchanged(
  client: ContactsClient,
  id: number,
  etag: string,
  contact: ContactCreate,
): Promise<ConditionalWrite> {
  const { data, error, response } = await client.PUT('/api/contacts/{contact_id}', {
    params: { path: { contact_id: id }, header: { 'If-Match': etag } },
    body: contact,
  });
  return data ? { ok: true, contact: data, etag: etagOf(response) } : refusal(error, response);
}

/** `DELETE /api/contacts/{id}` only if the contact still has tag `etag`; a stale tag deletes nothing. */
export async function deleteContactIfUnchanged(client: ContactsClient, id: number, etag: string): Promise<ConditionalDelete> {
  const { data, error, response } = await client.DELETE('/api/contacts/{contact_id}', {
    params: { path: { contact_id: id }, header: { 'If-Match': etag } },
  });
  return data ? { ok: true, contact: data } : refusal(error, response);
}
