import type { FastifyInstance } from 'fastify';
import { Unauthorized } from '../../plugins/http/errors.js';
import type { components } from '../generated/openapi.js';
import { findUserById, type UserRow } from './users.repository.js';

export type User = components['schemas']['User'];

/** What the users operations need from the app. */
export type UsersDeps = Pick<FastifyInstance, 'db' | 'config'>;

/** The public URL of an avatar (the `getAvatar` operation of openapi.yaml). */
function avatarUrl(publicBaseUrl: string, name: string): string {
  return `${publicBaseUrl}/avatars/${name}.webp`;
}

/** The API shape of a user: never the password hash or token hashes. */
export function toUser(row: UserRow, publicBaseUrl: string): User {
  return {
    id: row.id,
    username: row.username,
    email: row.email,
    created_at: row.created_at.toISOString(),
    avatar: row.avatar === null ? null : avatarUrl(publicBaseUrl, row.avatar),
    is_verified: row.is_verified,
  };
}

/** The authenticated user; 401 if the account vanished since the token was checked. */
export async function getCurrentUser(deps: UsersDeps, userId: number): Promise<User> {
  const row = await findUserById(deps.db, userId);
  if (!row) throw new Unauthorized();
  return toUser(row, deps.config.publicBaseUrl);
}
