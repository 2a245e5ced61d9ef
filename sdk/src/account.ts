import type { ContactsClient } from './client.js';
import { apiError } from './errors.js';

/**
 * `DELETE /api/users/me` with the account password: the account and everything it holds are gone,
 * and every token and app password of it is refused from then on. Any error answer (403 `Invalid
 * password`, 401, 422, 429, ...) is thrown as an ApiError.
 */
export async function deleteAccount(client: ContactsClient, password: string): Promise<void> {
  const { error, response } = await client.DELETE('/api/users/me', { body: { password } });
  if (!response.ok) throw apiError(error, response);
}

/**
 * `POST /api/users/me/password`: every access token issued before is refused from then on, this
 * client's included; log in again with the new password. App passwords stay. Error answers are
 * thrown as an ApiError.
 */
export async function changePassword(client: ContactsClient, currentPassword: string, newPassword: string): Promise<void> {
  const { error, response } = await client.POST('/api/users/me/password', {
    body: { current_password: currentPassword, new_password: newPassword },
  });
  if (!response.ok) throw apiError(error, response);
}

/**
 * `GET /api/users/me/export`: the ZIP archive of everything the account holds (`profile.json`,
 * `contacts.vcf`, `contacts.json`, `app-passwords.json`, `avatar.webp` when there is one), as bytes.
 * Error answers are thrown as an ApiError.
 */
export async function exportAccount(client: ContactsClient): Promise<Uint8Array> {
  const { data, error, response } = await client.GET('/api/users/me/export', { parseAs: 'arrayBuffer' });
  if (!data) throw apiError(error, response);
  return new Uint8Array(data);
}
