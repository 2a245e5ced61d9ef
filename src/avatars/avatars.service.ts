import type { FastifyInstance } from 'fastify';
import { NotFound, Unauthorized } from '../../plugins/http/errors.js';
import { toUser, type User } from '../users/users.service.js';
import { avatarNameOwner, newAvatarName } from './avatar-names.js';
import * as repository from './avatars.repository.js';
import { checkUpload, renderAvatar } from './image.js';
import { RenderQueue } from './render-queue.js';

/** What the avatar operations need from the app. */
export type AvatarsDeps = Pick<FastifyInstance, 'db' | 'config'>;

/** Renders of this process: one at a time, the others waiting or refused (see RenderQueue). */
const renders = new RenderQueue();

/**
 * Replaces the user's avatar with the rendition of `upload` (422 when it is no usable image, 503 when
 * AVATAR_RENDER_QUEUE_LIMIT renders already wait); the user as they are now.
 */
export async function putAvatar(deps: AvatarsDeps, userId: number, upload: Uint8Array): Promise<User> {
  const bytes = await checkUpload(upload);
  const image = await renders.run(deps.config.avatarRenderQueueLimit, () => renderAvatar(bytes));
  const row = await repository.replaceAvatar(deps.db, userId, newAvatarName(userId), image);
  if (!row) throw new Unauthorized();
  return toUser(row, deps.config.publicBaseUrl);
}

/** Removes the user's avatar; removing none is no error. */
export async function removeAvatar(deps: AvatarsDeps, userId: number): Promise<void> {
  await repository.deleteAvatar(deps.db, userId);
}

/** The WebP stored under `name`; 404 for any name that is not a current avatar. */
export async function getAvatarImage(deps: AvatarsDeps, name: string): Promise<Buffer> {
  const named = avatarNameOwner(name);
  const owner = named === 'legacy' ? await repository.findLegacyAvatarOwner(deps.db, name) : named;
  const image = owner === null || owner === undefined ? undefined : await repository.findAvatarImage(deps.db, owner, name);
  if (!image) throw new NotFound('Avatar not found');
  return image;
}
