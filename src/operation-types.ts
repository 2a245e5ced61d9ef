import type { Readable } from 'node:stream';
import type { FastifyRequest } from 'fastify';
import type { operations } from './generated/openapi.js';
import type { DefaultedQuery, OperationId, SuccessHeaders, operationTable } from './generated/operations.js';

/*
 * Handler types derived from openapi.yaml. A handler receives the validated request and returns
 * one of the operation's success responses; after an edit to openapi.yaml and a codegen, `tsc`
 * flags every handler whose input use or result no longer fits.
 */

type Operation<K extends OperationId> = operations[K];
type Parameters<K extends OperationId> = Operation<K>['parameters'];

type PathParams<K extends OperationId> = Parameters<K> extends { path: infer P } ? P : Record<string, never>;
type RawQuery<K extends OperationId> = Parameters<K> extends { query?: infer Q } ? Exclude<Q, undefined> : never;
type Query<K extends OperationId> = [RawQuery<K>] extends [never]
  ? Record<string, never>
  : Omit<RawQuery<K>, DefaultedQuery[K]> & Required<Pick<RawQuery<K>, DefaultedQuery[K] & keyof RawQuery<K>>>;
type Body<K extends OperationId> = Operation<K>['requestBody'] extends { content: infer C } ? C[keyof C] : undefined;

type SuccessStatus<K extends OperationId> = keyof SuccessHeaders[K] & keyof Operation<K>['responses'];
type ResponseBody<K extends OperationId, S extends SuccessStatus<K>> = Operation<K>['responses'][S] extends { content: infer C }
  ? Sendable<C[keyof C]>
  : undefined;
/** A text or binary body may also be a stream of it (an export): Fastify sends it as it comes. */
type Sendable<B> = [B] extends [string] ? B | Readable : [B] extends [Uint8Array] ? B | Readable : B;
type HeadersOf<H> = object extends H ? { headers?: H } : { headers: H };

/** One success response of operation K: its status, its body and the headers the spec makes the handler set. */
export type OperationResult<K extends OperationId> = {
  [S in SuccessStatus<K>]: { status: S; body: ResponseBody<K, S> } & HeadersOf<SuccessHeaders[K][S]>;
}[SuccessStatus<K>];

type Secured<K extends OperationId> = (typeof operationTable)[K]['secured'] extends true ? { userId: number } : unknown;

/** The request a handler of K sees: params, query and body as validated against openapi.yaml. */
export type OperationRequest<K extends OperationId> = FastifyRequest<{
  Params: PathParams<K>;
  Querystring: Query<K>;
  Body: Body<K>;
}> &
  Secured<K>;

export type OperationHandler<K extends OperationId> = (request: OperationRequest<K>) => Promise<OperationResult<K>>;

/** One handler per operationId: a missing or extra handler is a type error in src/app.ts. */
export type OperationHandlers = { [K in OperationId]: OperationHandler<K> };
