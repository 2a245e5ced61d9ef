import type { OperationHandlers } from '../http/operation-types.js';
import * as auth from './auth.service.js';

export const authHandlers = {
  registerUser: async (request) => ({ status: 201, body: await auth.register(request.server, request.log, request.body) }),
  verifyEmail: async (request) => ({ status: 200, body: await auth.verifyEmail(request.server, request.query.token) }),
  requestVerification: async (request) => ({
    status: 202,
    body: await auth.requestVerification(request.server, request.log, request.body.email),
  }),
  login: async (request) => ({
    status: 200,
    body: await auth.login(request.server, request.log, request.body.username, request.body.password),
  }),
  refreshToken: async (request) => ({ status: 200, body: await auth.refresh(request.server, request.body.refresh_token) }),
  logout: async (request) => {
    await auth.logout(request.server, request.userId);
    return { status: 204, body: undefined };
  },
  forgotPassword: async (request) => ({ status: 202, body: await auth.forgotPassword(request.server, request.log, request.body.email) }),
  resetPassword: async (request) => ({
    status: 200,
    body: await auth.resetPassword(request.server, request.body.token, request.body.password),
  }),
} satisfies Partial<OperationHandlers>;
