import type { Middleware } from 'openapi-fetch';
import type { paths } from './openapi.js';

/**
 * How a create or an import is retried when its answer may have been lost. Every such call carries
 * an `Idempotency-Key` (a random UUID, unless the call sets its own), and every retry the same
 * one, so the service applies the write at most once and answers a retry with the first answer.
 */
export interface RetryOptions {
  /** Retries after the first attempt (default 5); 0 sends the key and never retries. */
  retries?: number;
  /** The wait before the first retry (default 500 ms), doubled for each later one, then drawn between half and all of that. */
  baseDelayMs?: number;
  /** No wait is longer (default 30,000 ms): a longer backoff is cut to it, and an answer whose `Retry-After` asks for more is returned as it is. */
  maxDelayMs?: number;
}

/** The writes that take an `Idempotency-Key` (openapi.yaml, "Idempotent retries"). */
const KEYED_PATHS: ReadonlySet<string> = new Set<keyof paths>(['/api/contacts/', '/api/contacts/import']);
/** What the service answers a key whose first request is still being written. */
const IN_PROGRESS = 'A request with this Idempotency-Key is in progress';
/** Gateway answers that may hide a write that happened (a proxy lost the service's answer) or that will (the service is back soon). */
const GATEWAY_STATUSES = new Set([502, 503, 504]);

const isKeyed = (method: string, schemaPath: string) => method === 'POST' && KEYED_PATHS.has(schemaPath);

/** openapi-fetch middleware, first of the client's: a new `Idempotency-Key` on each create and import that has none. */
export function idempotencyKeys(): Middleware {
  return {
    onRequest({ request, schemaPath }) {
      if (isKeyed(request.method, schemaPath) && !request.headers.has('Idempotency-Key')) {
        request.headers.set('Idempotency-Key', crypto.randomUUID());
      }
      return request;
    },
  };
}

/** Whether a response says: the same request, sent again later, may well succeed. */
async function retryable(response: Response): Promise<boolean> {
  if (GATEWAY_STATUSES.has(response.status)) return true;
  if (response.status !== 409) return false;
  const body = (await response
    .clone()
    .json()
    .catch(() => null)) as { detail?: unknown } | null;
  return body?.detail === IN_PROGRESS;
}

/** `Retry-After` in milliseconds (seconds or an HTTP date), or undefined when absent or unreadable. */
function retryAfterMs(response: Response): number | undefined {
  const value = response.headers.get('Retry-After')?.trim();
  if (!value) return undefined;
  if (/^\d+$/.test(value)) return Number(value) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason as Error);
    const abort = () => {
      clearTimeout(timer);
      reject(signal.reason as Error);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', abort);
      resolve();
    }, ms);
    signal.addEventListener('abort', abort, { once: true });
  });
}

/**
 * openapi-fetch middleware, last of the client's: a create or an import answered 502, 503 or 504,
 * 409 "in progress", or not answered at all (a network error; not an abort) is sent again, the
 * same request with the same key, up to `retries` times, after a backoff that doubles from
 * `baseDelayMs` (with jitter) and is at least the answer's `Retry-After`. The last answer or
 * error is what the call gets.
 */
export function retryingWrites({ retries = 5, baseDelayMs = 500, maxDelayMs = 30_000 }: RetryOptions = {}): Middleware {
  // An unsent copy of each keyed request (a sent body cannot be read again), with its key and token.
  const copies = new Map<string, Request>();

  async function again(
    copy: Request,
    fetchOnce: (request: Request) => Promise<Response>,
    first: { response: Response } | { error: unknown },
  ): Promise<Response | Error> {
    let last = first;
    for (let retry = 1; retry <= retries; retry++) {
      const backoff = Math.min(maxDelayMs, baseDelayMs * 2 ** (retry - 1)) * (0.5 + Math.random() / 2);
      const asked = 'response' in last ? retryAfterMs(last.response) : undefined;
      if (asked !== undefined && asked > maxDelayMs) break;
      if ('response' in last) await last.response.body?.cancel();
      await sleep(Math.max(backoff, asked ?? 0), copy.signal);
      try {
        last = { response: await fetchOnce(copy.clone()) };
        if (!(await retryable(last.response))) break;
      } catch (error) {
        if (copy.signal.aborted) throw error;
        last = { error };
      }
    }
    if ('response' in last) return last.response;
    return last.error instanceof Error ? last.error : new Error(String(last.error));
  }

  return {
    onRequest({ request, schemaPath, id }) {
      if (retries > 0 && isKeyed(request.method, schemaPath)) copies.set(id, request.clone());
      return undefined;
    },
    async onResponse({ response, id, options }) {
      const copy = copies.get(id);
      copies.delete(id);
      if (!copy || !(await retryable(response))) return undefined;
      const last = await again(copy, options.fetch, { response });
      if (last instanceof Error) throw last;
      return last;
    },
    async onError({ error, id, options }) {
      const copy = copies.get(id);
      copies.delete(id);
      if (!copy || copy.signal.aborted) return undefined;
      return again(copy, options.fetch, { error });
    },
  };
}
