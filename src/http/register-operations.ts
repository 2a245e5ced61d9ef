import type { FastifyInstance, FastifyRequest, RouteHandlerMethod } from 'fastify';
import { BadRequest, HttpError, ValidationFailed } from '../errors.js';
import { operationTable, type OperationId } from '../generated/operations.js';
import { unstorableInput } from './input-guard.js';
import type { OperationHandlers } from './operation-types.js';

type Operation = (typeof operationTable)[OperationId];

declare module 'fastify' {
  interface FastifyContextConfig {
    operationId?: OperationId;
    /** Whether the operation requires an access token (`security` in openapi.yaml). */
    secured?: boolean;
    /** `x-rate-limit` of the operation in openapi.yaml. */
    rateLimitScope?: string | null;
  }
}

function mediaType(request: FastifyRequest): string | undefined {
  return request.headers['content-type']?.split(';', 1)[0]?.trim().toLowerCase();
}

/** 415 for a body in a content type the operation does not accept; 400 for a JSON operation sent no body. */
function checkContentType(operation: Operation) {
  const accepted: readonly string[] = operation.requestContentTypes;
  return async (request: FastifyRequest) => {
    const type = mediaType(request);
    const hasBody = type !== undefined || Number(request.headers['content-length'] ?? 0) > 0 || 'transfer-encoding' in request.headers;
    if (!hasBody) {
      if (accepted.includes('application/json')) throw new BadRequest('Malformed JSON body');
      return;
    }
    if (type === undefined || !accepted.includes(type)) {
      throw new HttpError(415, `Unsupported Media Type: ${type ?? 'none'}`);
    }
    if (type === 'multipart/form-data' && !/;\s*boundary=/i.test(request.headers['content-type'] ?? '')) {
      throw new HttpError(415, 'Unsupported Media Type: multipart/form-data without a boundary');
    }
  };
}

/** 422 for input no schema can refuse but the database cannot store (see input-guard.ts). */
async function refuseUnstorableInput(request: FastifyRequest) {
  const problem =
    unstorableInput('params', request.params) ?? unstorableInput('querystring', request.query) ?? unstorableInput('body', request.body);
  if (problem) throw new ValidationFailed(problem);
}

/** Trims the body fields marked `x-trim` before validation, so length bounds apply to the trimmed value. */
function trimFields(fields: readonly string[]) {
  return async (request: FastifyRequest) => {
    const body = request.body as Record<string, unknown> | null;
    if (typeof body !== 'object' || body === null) return;
    for (const field of fields) {
      const value = body[field];
      if (typeof value === 'string') body[field] = value.trim();
    }
  };
}

/** Registers every operation of openapi.yaml with its generated schemas and its handler. */
export function registerOperations(app: FastifyInstance, handlers: OperationHandlers): void {
  for (const [operationId, operation] of Object.entries(operationTable) as [OperationId, Operation][]) {
    const handle = handlers[operationId] as unknown as (request: FastifyRequest) => Promise<{
      status: number;
      body: unknown;
      headers?: Record<string, string | number>;
    }>;
    const handler: RouteHandlerMethod = async (request, reply) => {
      const result = await handle(request);
      reply.code(result.status);
      if (result.headers) reply.headers(result.headers);
      const contentType = (operation.successContentTypes as Record<string, string | null>)[result.status];
      if (contentType && contentType !== 'application/json') reply.type(contentType);
      return reply.send(result.body);
    };
    app.route({
      method: operation.method,
      url: operation.url,
      schema: operation.schema as object,
      config: { operationId, secured: operation.secured, rateLimitScope: operation.rateLimit },
      onRequest: operation.secured ? [app.authenticate] : [],
      preParsing: operation.requestContentTypes.length > 0 ? [checkContentType(operation)] : [],
      preValidation: [
        refuseUnstorableInput,
        ...(operation.trimmedBodyFields.length > 0 ? [trimFields(operation.trimmedBodyFields)] : []),
      ],
      handler,
    });
  }
}
