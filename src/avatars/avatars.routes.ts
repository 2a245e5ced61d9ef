import type { OperationHandlers } from '../operation-types.js';
import * as avatars from './avatars.service.js';

/** A name's bytes never change, but a removed avatar must stop showing: caches keep it an hour at most (openapi.yaml). */
const CACHE_CONTROL = 'public, max-age=3600';

/** Handlers of the avatar operations in openapi.yaml. */
export const avatarsHandlers = {
  async putAvatar(request) {
    // The image is the body itself, or the multipart form's `file` part.
    const { body } = request;
    const upload = body instanceof Uint8Array ? body : body.file;
    return { status: 200, body: await avatars.putAvatar(request.server, request.userId, upload) };
  },
  async deleteAvatar(request) {
    await avatars.removeAvatar(request.server, request.userId);
    return { status: 204, body: undefined };
  },
  async getAvatar(request) {
    const image = await avatars.getAvatarImage(request.server, request.params.name);
    return { status: 200, body: image, headers: { 'Cache-Control': CACHE_CONTROL } };
  },
} satisfies Partial<OperationHandlers>;
