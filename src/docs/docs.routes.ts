import type { OperationHandlers } from '../operation-types.js';

/** The contract itself, as served at /openapi.json and /openapi.yaml (the docs plugin reads it). */
export const docsHandlers = {
  async getOpenApiJson(request) {
    return { status: 200, body: request.server.openapi.document };
  },
  async getOpenApiYaml(request) {
    return { status: 200, body: request.server.openapi.yaml };
  },
} satisfies Partial<OperationHandlers>;
