import type { OperationHandlers } from '../operation-types.js';
import * as users from './users.service.js';

/** Handlers of the users operations in openapi.yaml. */
export const usersHandlers = {
  async getCurrentUser(request) {
    return { status: 200, body: await users.getCurrentUser(request.server, request.userId) };
  },
} satisfies Partial<OperationHandlers>;
