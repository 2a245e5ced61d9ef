import { clientOf } from '../../plugins/rate-limit.js';
import type { OperationHandlers } from '../operation-types.js';
import * as account from './account.service.js';
import { exportAccount } from './account-export.js';
import * as appPasswords from './app-passwords.service.js';
import * as users from './users.service.js';

/** Handlers of the users operations in openapi.yaml. */
export const usersHandlers = {
  async getCurrentUser(request) {
    return { status: 200, body: await users.getCurrentUser(request.server, request.userId) };
  },

  async deleteAccount(request) {
    await account.deleteAccount(request.server, request.userId, request.body.password, clientOf(request));
    return { status: 204, body: undefined };
  },

  async changePassword(request) {
    await account.changePassword(request.server, request.userId, request.body, clientOf(request));
    return { status: 204, body: undefined };
  },

  async exportAccount(request) {
    const archive = await exportAccount(request.server, request.userId);
    return {
      status: 200,
      body: archive.content,
      headers: {
        'Content-Type': 'application/zip',
        'Content-Disposition': 'attachment; filename="account.zip"',
        'Content-Length': String(archive.size),
      },
    };
  },

  async listAppPasswords(request) {
    return { status: 200, body: await appPasswords.listAppPasswords(request.server, request.userId) };
  },

  async createAppPassword(request) {
    const created = await appPasswords.createAppPassword(request.server, request.userId, request.body, clientOf(request));
    return { status: 201, body: created, headers: { Location: `/api/users/me/app-passwords/${created.id}` } };
  },

  async deleteAppPassword(request) {
    await appPasswords.deleteAppPassword(request.server, request.userId, request.params.app_password_id);
    return { status: 204, body: undefined };
  },
} satisfies Partial<OperationHandlers>;
