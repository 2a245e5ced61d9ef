import { clientOf } from '../../plugins/rate-limit.js';
import type { OperationHandlers } from '../operation-types.js';
import * as auth from './auth.service.js';

/** Answers that carry tokens must not be stored by any cache (RFC 6749 §5.1). */
const NO_STORE = { 'Cache-Control': 'no-store' } as const;

/** Handlers of the account operations in openapi.yaml. */
export const authHandlers = {
  async registerUser(request) {
    return { status: 201, body: await auth.registerUser(request.server, request.body, clientOf(request)) };
  },
  async verifyEmail(request) {
    return { status: 200, body: await auth.verifyEmail(request.server, request.query.token) };
  },
  async requestVerification(request) {
    return { status: 202, body: await auth.requestVerification(request.server, request.body.email) };
  },
  async login(request) {
    return {
      status: 200,
      body: await auth.login(request.server, request.body.username, request.body.password, clientOf(request)),
      headers: NO_STORE,
    };
  },
  async refreshToken(request) {
    return { status: 200, body: await auth.refreshToken(request.server, request.body.refresh_token), headers: NO_STORE };
  },
  async logout(request) {
    await auth.logout(request.server, request.userId);
    return { status: 204, body: undefined };
  },
  async forgotPassword(request) {
    return { status: 202, body: await auth.forgotPassword(request.server, request.body.email) };
  },
  async resetPassword(request) {
    return {
      status: 200,
      body: await auth.resetPassword(request.server, request.body.token, request.body.password, clientOf(request)),
    };
  },
} satisfies Partial<OperationHandlers>;
