import { createHash } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest, RouteHandlerMethod } from 'fastify';
import type { CachedAnswer } from '../cache.js';
import { namesTag, weakTagOf } from './conditional.js';
import { BadRequest, HttpError, ValidationFailed } from './errors.js';
import { unstorableInput } from './input-guard.js';
import { multipartReader } from './multipart.js';
import { compileValidator, formatSchemaError } from './validation.js';

/** One operation of the contract, as scripts/codegen.ts writes it into the generated route table. */
export interface OperationSpec {
  readonly method: string;
  readonly url: string;
  /** Whether the operation requires an access token (`security` in openapi.yaml). */
  readonly secured: boolean;
  /** `x-rate-limit`: the bucket the operation counts against, per user or per address (plugins/rate-limit.ts). */
  readonly rateLimit: { readonly scope: 'per-user' | 'per-address'; readonly bucket: string } | null;
  /** `x-cache-ttl`: seconds a success answer is cached per user; null when it is not. */
  readonly cacheTtl: number | null;
  /** `x-weak-etag`: 200 answers carry a weak ETag of what they send. */
  readonly weakEtag: boolean;
  readonly requestContentTypes: readonly string[];
  /** Request content types whose body is the bytes themselves: parsed as a Buffer. */
  readonly binaryContentTypes: readonly string[];
  /** Multipart fields that arrive as file parts. */
  readonly fileFields: readonly string[];
  /** `x-body-limit`: the largest body (or multipart file) in bytes; null for the app's default. */
  readonly bodyLimit: number | null;
  /** Body fields marked `x-trim`. */
  readonly trimmedBodyFields: readonly string[];
  /** Content type of each success response; null for an empty one (204). */
  readonly successContentTypes: Readonly<Record<string, string | null>>;
  readonly schema: object;
}

/** What a handler answers: a status, a body for the response schema, and headers. */
export interface OperationResult {
  status: number;
  body: unknown;
  headers?: Record<string, string | number>;
}

type Handler = (request: FastifyRequest) => Promise<OperationResult>;

declare module 'fastify' {
  interface FastifyContextConfig {
    operationId?: string;
    secured?: boolean;
    /** `x-rate-limit`'s bucket and scope (not `rateLimit`: @fastify/rate-limit reads that key itself). */
    rateLimitBucket?: string | null;
    rateLimitScope?: 'per-user' | 'per-address' | null;
  }
}

/** The request's media type, lower-cased, without parameters (`text/csv; charset=utf-8` → `text/csv`). */
export function mediaType(request: FastifyRequest): string | undefined {
  return request.headers['content-type']?.split(';', 1)[0]?.trim().toLowerCase();
}

/**
 * 415 for a body in a content type the operation does not accept; 400 for a JSON operation sent no
 * body. When the body schema depends on the content type (`schema.body.content`), a request without
 * a body has no schema to meet, so it is refused here: 422.
 */
function checkContentType(operation: OperationSpec) {
  const accepted = operation.requestContentTypes;
  const schemaByType = typeof (operation.schema as { body?: { content?: unknown } }).body?.content === 'object';
  return async function checkContentType(request: FastifyRequest) {
    const type = mediaType(request);
    const hasBody = type !== undefined || Number(request.headers['content-length'] ?? 0) > 0 || 'transfer-encoding' in request.headers;
    if (!hasBody) {
      if (accepted.includes('application/json')) throw new BadRequest('Malformed JSON body');
      if (schemaByType) throw new ValidationFailed('body is required');
      return;
    }
    if (type === undefined || !accepted.includes(type)) {
      throw new HttpError(415, `Unsupported Media Type: ${type ?? 'none'}`);
    }
    // RFC 2046: a boundary is 1 to 70 characters.
    if (
      type === 'multipart/form-data' &&
      !/;\s*boundary=("[^"]{1,70}"|[^";\s]{1,70})(;|\s|$)/i.test(request.headers['content-type'] ?? '')
    ) {
      throw new HttpError(415, 'Unsupported Media Type: multipart/form-data without a valid boundary');
    }
  };
}

/** 422 for input no schema can refuse but the database cannot store (see input-guard.ts). */
async function refuseUnstorableInput(request: FastifyRequest) {
  const problem =
    unstorableInput('params', request.params) ?? unstorableInput('querystring', request.query) ?? unstorableInput('body', request.body);
  if (problem) throw new ValidationFailed(problem);
}

/** Trims the string values of `fields` in `body` in place. */
function trimIn(body: Record<string, unknown>, fields: readonly string[]): void {
  for (const field of fields) {
    const value = body[field];
    if (typeof value === 'string') body[field] = value.trim();
  }
}

/** Trims the body fields marked `x-trim` before validation, so length bounds apply to the trimmed value. */
function trimFields(fields: readonly string[]) {
  return async function trimFields(request: FastifyRequest) {
    const body = request.body as Record<string, unknown> | null;
    if (typeof body === 'object' && body !== null) trimIn(body, fields);
  };
}

/**
 * A body checked outside a request as the operation's route checks its JSON body: `x-trim` fields
 * trimmed, unstorable text refused, then the body schema. Gives the body as checked, or the 422
 * `detail` the route would answer. For bodies that arrive inside another one (an import's entries).
 */
export function bodyCheckerOf(
  operation: OperationSpec,
): (body: Record<string, unknown>) => { body: Record<string, unknown> } | { detail: string } {
  const validate = compileValidator({ schema: (operation.schema as { body: object }).body, httpPart: 'body' });
  return (body) => {
    const checked = { ...body };
    trimIn(checked, operation.trimmedBodyFields);
    const unstorable = unstorableInput('body', checked);
    if (unstorable) return { detail: unstorable };
    if (!validate(checked)) return { detail: formatSchemaError(validate.errors ?? [], 'body').message };
    return { body: checked };
  };
}

const DAY_MS = 86_400_000;

/** Sends a success answer: the status, the headers, and the body in the operation's content type. */
function answer(operation: OperationSpec, reply: FastifyReply, result: OperationResult) {
  reply.code(result.status);
  if (result.headers) reply.headers(result.headers);
  const contentType = operation.successContentTypes[result.status];
  // A handler may name the type itself, e.g. when one status has several (an export's vCard or CSV).
  if (contentType && contentType !== 'application/json' && !reply.hasHeader('content-type')) reply.type(contentType);
  return reply.send(result.body);
}

/**
 * Sends an answer as the cache holds it (the body already serialized), or 304 with its ETag when
 * If-None-Match names that tag (X-Cache plays no part in it).
 */
function answerCached(request: FastifyRequest, reply: FastifyReply, cached: CachedAnswer, xCache: 'HIT' | 'MISS') {
  const etag = cached.headers.ETag;
  const ifNoneMatch = request.headers['if-none-match'];
  if (typeof etag === 'string' && ifNoneMatch !== undefined && namesTag(ifNoneMatch, etag))
    return reply.code(304).header('ETag', etag).send();
  return reply.code(200).headers(cached.headers).header('X-Cache', xCache).type('application/json; charset=utf-8').send(cached.body);
}

/**
 * The names of the path and query parameters an operation declares, each sorted: the parts of a
 * request that can change its answer.
 */
function declaredParameters(operation: OperationSpec): { params: string[]; query: string[] } {
  const { params, querystring } = operation.schema as { params?: { properties?: object }; querystring?: { properties?: object } };
  return { params: Object.keys(params?.properties ?? {}).sort(), query: Object.keys(querystring?.properties ?? {}).sort() };
}

/**
 * The cache key of a request: its declared parameters as validated (coerced, defaults filled in), in
 * a fixed order, hashed. So `skip=00`, `skip=0` and no `skip` at all are one key, whatever the order
 * of the parameters, and a key has a fixed size however long the URL.
 */
function cacheKeyOf(names: { params: string[]; query: string[] }, request: FastifyRequest): string {
  const params = request.params as Record<string, unknown>;
  const query = request.query as Record<string, unknown>;
  const values = [...names.params.map((name) => [name, params[name]]), ...names.query.map((name) => [name, query[name]])];
  return createHash('sha256').update(JSON.stringify(values)).digest('base64url');
}

/**
 * The handler of an operation with `x-cache-ttl`: a user's 200 answers are cached as sent, keyed by
 * the validated parameters (cacheKeyOf), for the TTL but never past the next UTC midnight (the date
 * is in the key, so a moved clock never reads yesterday's answer). Writes invalidate the user's
 * answers (app.cache). With `x-weak-etag`, each answer is tagged when it is made, so a cached page and
 * its tag always agree.
 */
function cachingHandler(app: FastifyInstance, operationId: string, operation: OperationSpec, handle: Handler): RouteHandlerMethod {
  const ttlMs = (operation.cacheTtl ?? 0) * 1000;
  const names = declaredParameters(operation);
  return async function cachedAnswer(request, reply) {
    const userId = request.userId!;
    const now = app.now().getTime();
    const key = `${operationId} ${new Date(now).toISOString().slice(0, 10)} ${cacheKeyOf(names, request)}`;
    const { answer: hit, generation } = await app.cache.read(userId, key);
    if (hit) return answerCached(request, reply, hit, 'HIT');
    const result = await handle(request);
    if (result.status !== 200) return answer(operation, reply, result);
    reply.code(200);
    // The route's response schema writes the JSON, as for any answer.
    const body = reply.serialize(result.body) as string;
    const headers = result.headers ?? {};
    const fresh = { body, headers: operation.weakEtag ? { ...headers, ETag: weakTagOf(body, headers) } : headers };
    if (generation !== null) void app.cache.write(userId, key, generation, fresh, Math.min(ttlMs, DAY_MS - (now % DAY_MS)));
    return answerCached(request, reply, fresh, 'MISS');
  };
}

/**
 * Bodies in the binary content types of the table arrive as Buffers (up to the route's body
 * limit). Only the operations that declare a type take it: the others answer 415 for it, as for any
 * type no parser knows (operations with a body already refused it before parsing, see checkContentType).
 */
function addBinaryParsers(app: FastifyInstance, table: Readonly<Record<string, OperationSpec>>): void {
  const takers = new Map<string, Set<string>>();
  for (const [operationId, operation] of Object.entries(table)) {
    for (const type of operation.binaryContentTypes) takers.set(type, (takers.get(type) ?? new Set()).add(operationId));
  }
  for (const [type, operationIds] of takers) {
    app.addContentTypeParser(type, { parseAs: 'buffer' }, (request, body, done) => {
      const { operationId } = request.routeOptions.config;
      // Unrouted requests (404) carry no operationId; their body is ignored, as any other.
      if (operationId !== undefined && !operationIds.has(operationId)) done(new HttpError(415, `Unsupported Media Type: ${type}`));
      else done(null, body);
    });
  }
}

/**
 * Registers every operation of the generated table with its schemas and its handler, joined by
 * operationId. Secured operations run `app.authenticate` first.
 */
export function registerOperations(
  app: FastifyInstance,
  table: Readonly<Record<string, OperationSpec>>,
  handlers: Readonly<Record<string, unknown>>,
): void {
  addBinaryParsers(app, table);
  for (const [operationId, operation] of Object.entries(table)) {
    const handle = handlers[operationId] as Handler;
    const handler: RouteHandlerMethod =
      operation.cacheTtl !== null && operation.secured
        ? cachingHandler(app, operationId, operation, handle)
        : async function operationHandler(request, reply) {
            return answer(operation, reply, await handle(request));
          };
    app.route({
      method: operation.method,
      url: operation.url,
      ...(operation.bodyLimit !== null && { bodyLimit: operation.bodyLimit }),
      schema: operation.schema,
      config: {
        operationId,
        secured: operation.secured,
        rateLimitBucket: operation.rateLimit?.bucket ?? null,
        rateLimitScope: operation.rateLimit?.scope ?? null,
      },
      onRequest: operation.secured ? [app.authenticate] : [],
      preParsing: operation.requestContentTypes.length > 0 ? [checkContentType(operation)] : [],
      preValidation: [
        ...(operation.requestContentTypes.includes('multipart/form-data')
          ? [multipartReader({ fileFields: operation.fileFields, maxFileSize: operation.bodyLimit ?? undefined })]
          : []),
        refuseUnstorableInput,
        ...(operation.trimmedBodyFields.length > 0 ? [trimFields(operation.trimmedBodyFields)] : []),
      ],
      handler,
    });
  }
}
