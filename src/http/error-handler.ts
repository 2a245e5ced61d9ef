import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { HttpError } from '../errors.js';

/** Fastify's own client errors, reworded; anything else 4xx keeps Fastify's message. */
const FASTIFY_DETAILS: Record<string, string> = {
  FST_ERR_CTP_EMPTY_JSON_BODY: 'Malformed JSON body',
  FST_ERR_CTP_INVALID_JSON_BODY: 'Malformed JSON body',
  FST_ERR_CTP_BODY_TOO_LARGE: 'Request body is too large',
};

/** The one place errors become `{detail}` bodies. 5xx details never carry internals. */
export function errorHandler(error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
  if (error instanceof HttpError) {
    return reply.code(error.statusCode).headers(error.headers).send({ detail: error.message });
  }
  if (error.validation) return reply.code(422).send({ detail: error.message });
  // A JSON parse failure surfaces as a SyntaxError with status 400.
  if (error instanceof SyntaxError && error.statusCode === 400) return reply.code(400).send({ detail: 'Malformed JSON body' });
  const status = error.statusCode ?? 500;
  if (status >= 400 && status < 500) {
    return reply.code(status).send({ detail: FASTIFY_DETAILS[error.code] ?? error.message });
  }
  request.log.error({ err: error }, 'unhandled error');
  return reply.code(500).send({ detail: 'Internal Server Error' });
}

export function notFoundHandler(_request: FastifyRequest, reply: FastifyReply) {
  return reply.code(404).send({ detail: 'Not Found' });
}
