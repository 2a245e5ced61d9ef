import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { HttpError } from '../../plugins/http/errors.js';
import { referencedUserGone } from '../../plugins/db.js';
import { databaseFailure } from '../../plugins/http/error-handler.js';
import { DAV, type PropertyName, qualified, xmlDocument, type XmlNode, xmlText } from './xml.js';

/** A precondition or postcondition element of a `D:error` body (RFC 4918 §16), optionally holding hrefs or other content. */
export interface Condition extends PropertyName {
  hrefs?: string[];
  content?: XmlNode;
}

/** An answer of the CardDAV face other than success: a status, a human sentence and, where one applies, the condition element. */
export class DavError extends Error {
  constructor(
    readonly statusCode: number,
    detail: string,
    readonly condition?: Condition,
    readonly headers: Record<string, string | number> = {},
  ) {
    super(detail);
  }
}

export const XML_TYPE = 'application/xml; charset=utf-8';
/** The challenge of every 401 on the CardDAV face: HTTP Basic with an app password. */
export const BASIC_CHALLENGE = 'Basic realm="contacts", charset="UTF-8"';

const QUOTED_MAX_CHARS = 64;

/** A client's value as a sentence quotes it: at most 64 characters, so an error body stays small. */
export function shortened(value: string): string {
  const chars = [...value];
  return chars.length > QUOTED_MAX_CHARS ? `${chars.slice(0, QUOTED_MAX_CHARS).join('')}…` : value;
}

/** A `D:error` body holding the condition element (if any) and an `X:detail` with the sentence. */
export function errorBody(detail: string, condition?: Condition): string {
  const content: XmlNode = {};
  if (condition) {
    const { key, declaration } = qualified(condition, 0);
    content[key] = condition.hrefs ? { ...declaration, 'D:href': condition.hrefs.map(xmlText) } : { ...declaration, ...condition.content };
  }
  content['X:detail'] = xmlText(detail);
  return xmlDocument(DAV, 'error', content);
}

/** Sends `error` as an XML `D:error` answer. */
export function sendDavError(reply: FastifyReply, error: DavError): FastifyReply {
  return reply.code(error.statusCode).headers(error.headers).type(XML_TYPE).send(errorBody(error.message, error.condition));
}

/** Whether a request URL is the CardDAV face's (`/dav`, `/dav/…`, `/.well-known/carddav`). */
function isDavUrl(url: string): boolean {
  const path = url.split('?', 1)[0]!;
  return path === '/dav' || path.startsWith('/dav/') || path === '/.well-known/carddav';
}

type FrameworkErrors = (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => void;

/**
 * Fastify's `frameworkErrors` (errors before routing, such as a URL that does not percent-decode)
 * answering the CardDAV face's URLs with a `D:error`, and every other URL as `fallback` does.
 */
export function withDavFrameworkErrors(fallback: FrameworkErrors): FrameworkErrors {
  return (error, request, reply) => {
    if (!isDavUrl(request.url)) return fallback(error, request, reply);
    const status = error.statusCode && error.statusCode >= 400 && error.statusCode < 500 ? error.statusCode : 400;
    void sendDavError(reply, new DavError(status, error.code === 'FST_ERR_BAD_URL' ? 'Malformed URL' : error.message));
  };
}

const FRAMEWORK_ANSWERS: Record<string, { status: number; detail: string }> = {
  FST_ERR_CTP_BODY_TOO_LARGE: { status: 413, detail: 'Request body is too large' },
  FST_ERR_CTP_INVALID_MEDIA_TYPE: { status: 415, detail: 'Unsupported Media Type' },
};

/**
 * The error handler of the CardDAV face: every error becomes a `D:error` body; the `/api` handler's
 * typed errors (401, 429) keep their status, sentence and headers; 5xx never carry internals.
 */
export function davErrorHandler(error: FastifyError | Error, request: FastifyRequest, reply: FastifyReply) {
  if (error instanceof DavError) return sendDavError(reply, error);
  if (error instanceof HttpError) return sendDavError(reply, new DavError(error.statusCode, error.message, undefined, error.headers));
  const code = (error as FastifyError).code;
  const known = code ? FRAMEWORK_ANSWERS[code] : undefined;
  if (known) return sendDavError(reply, new DavError(known.status, known.detail));
  const status = (error as FastifyError).statusCode ?? 500;
  if (status >= 400 && status < 500) return sendDavError(reply, new DavError(status, error.message));
  // Signed in before the account was deleted: the user is gone, as any later request learns.
  if (referencedUserGone(error)) {
    return sendDavError(reply, new DavError(401, 'Not authenticated', undefined, { 'WWW-Authenticate': BASIC_CHALLENGE }));
  }
  const failure = databaseFailure(error, request);
  if (failure) return sendDavError(reply, new DavError(failure.statusCode, failure.message, undefined, failure.headers));
  request.log.error({ err: error }, 'unhandled error');
  return sendDavError(reply, new DavError(500, 'Internal Server Error'));
}
