import type { OperationHandlers } from '../http/operation-types.js';
import { getCurrentUser } from './users.service.js';

export const usersHandlers = {
  getCurrentUser: async (request) => ({ status: 200, body: await getCurrentUser(request.server.db, request.userId) }),
} satisfies Partial<OperationHandlers>;
