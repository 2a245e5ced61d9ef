import { randomUUID } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { isDatabaseUnavailable, isStatementTimeout, isTransactionConflict, referencedUserGone } from '../db.js';
import { HttpError, Unauthorized } from './errors.js';

/** Seconds a client is asked to wait when the database is away (a restart takes a few). */
const DATABASE_RETRY_AFTER_S = 5;

/** Seconds a client is asked to wait after its statement ran out of time (DB_STATEMENT_TIMEOUT_MS): the database is busy, or the request too costly. */
const STATEMENT_TIMEOUT_RETRY_AFTER_S = 5;
/** A write aborted to break a deadlock needs only the other transaction to end. */
const CONFLICT_RETRY_AFTER_S = 1;

/** Fastify's and its plugins' own client errors, reworded; anything else 4xx keeps its message. */
const FRAMEWORK_ERRORS: Record<string, { status: number; detail: string }> = {
  FST_ERR_CTP_BODY_TOO_LARGE: { status: 413, detail: 'Request body is too large' },
  // @fastify/multipart's limits: a form without file fields (login) takes no file part; a file
  // part larger than its operation allows is a body too large (http/multipart.ts).
  FST_FILES_LIMIT: { status: 422, detail: 'body must not contain files' },
  FST_REQ_FILE_TOO_LARGE: { status: 413, detail: 'Request body is too large' },
  FST_FIELDS_LIMIT: { status: 422, detail: 'body has too many fields' },
  FST_PARTS_LIMIT: { status: 422, detail: 'body has too many fields' },
  FST_PROTO_VIOLATION: { status: 422, detail: 'body/__proto__ is not an allowed property' },
};

/** Whether the error handler has its own answer for this framework error code. */
export function hasFrameworkAnswer(code: string): boolean {
  return code in FRAMEWORK_ERRORS;
}

/**
 * The answer to a database failure the client can retry, or null for any other error: the same on
 * both faces (this handler's `{detail}`, CardDAV's `D:error`).
 */
export function databaseFailure(error: unknown, request: FastifyRequest): HttpError | null {
  if (isDatabaseUnavailable(error)) {
    request.server.databaseOutage.failed(error);
    return new HttpError(503, 'Service unavailable: the database is not reachable', { 'Retry-After': DATABASE_RETRY_AFTER_S });
  }
  if (isStatementTimeout(error)) {
    request.log.warn({ err: error }, 'a statement ran past statement_timeout and was cancelled');
    return new HttpError(503, 'Service unavailable: the request took too long in the database', {
      'Retry-After': STATEMENT_TIMEOUT_RETRY_AFTER_S,
    });
  }
  if (isTransactionConflict(error)) {
    request.log.warn({ err: error }, 'the database aborted a transaction to break a conflict');
    return new HttpError(503, 'Service unavailable: the write met a concurrent one and was not applied; retry', {
      'Retry-After': CONFLICT_RETRY_AFTER_S,
    });
  }
  return null;
}

/** The one place errors become `{detail}` bodies. 5xx details never carry internals. */
export function errorHandler(error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
  if (error instanceof HttpError) {
    return reply.code(error.statusCode).headers(error.headers).send({ detail: error.message });
  }
  if (error.validation) return reply.code(422).send({ detail: error.message });
  const known = FRAMEWORK_ERRORS[error.code];
  if (known) return reply.code(known.status).send({ detail: known.detail });
  const status = error.statusCode ?? 500;
  if (status >= 400 && status < 500) return reply.code(status).send({ detail: error.message });
  // Its token was checked before the account was deleted: the user is gone, as any later request learns.
  if (referencedUserGone(error)) {
    const gone = new Unauthorized();
    return reply.code(gone.statusCode).headers(gone.headers).send({ detail: gone.message });
  }
  const failure = databaseFailure(error, request);
  if (failure) return reply.code(failure.statusCode).headers(failure.headers).send({ detail: failure.message });
  request.log.error({ err: error }, 'unhandled error');
  return reply.code(500).send({ detail: 'Internal Server Error' });
}

export function notFoundHandler(_request: FastifyRequest, reply: FastifyReply) {
  return reply.code(404).send({ detail: 'Not Found' });
}

/** Errors Fastify raises before routing (a malformed URL, say), which skip the error handler and the onRequest hooks. */
export function frameworkErrors(error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
  const status = error.statusCode && error.statusCode >= 400 && error.statusCode < 500 ? error.statusCode : 400;
  const detail = error.code === 'FST_ERR_BAD_URL' ? 'Malformed URL' : error.message;
  void reply.code(status).header('x-request-id', request.id).send({ detail });
}

/**
 * Requests Node's HTTP parser refuses (broken framing, oversized headers) never reach Fastify's
 * routing; they get a `{detail}` answer too, with a request id of their own, and the connection closes.
 */
export function clientErrorHandler(error: Error & { code?: string }, socket: Socket) {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  const [status, detail] =
    error.code === 'HPE_HEADER_OVERFLOW'
      ? [431, 'Request header fields too large']
      : error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? [408, 'Request timeout']
        : [400, 'Bad Request'];
  const body = JSON.stringify({ detail });
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nX-Request-Id: ${randomUUID()}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy(error);
}
