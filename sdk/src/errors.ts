/**
 * An answer a helper does not turn into a result of its own (401, 409, 422, 429, 5xx, ...): the
 * status, the service's `detail`, and the response itself (for `Retry-After` on a 429, say).
 */
export class ApiError extends Error {
  override readonly name = 'ApiError';

  constructor(
    readonly status: number,
    readonly detail: string,
    readonly response: Response,
  ) {
    super(`${status}: ${detail}`);
  }
}

/** The ApiError for an error answer openapi-fetch gave: `error` is its `{ detail }` body, if it had one. */
export function apiError(error: unknown, response: Response): ApiError {
  const detail =
    typeof error === 'object' && error !== null && 'detail' in error && typeof error.detail === 'string'
      ? error.detail
      : response.statusText;
  return new ApiError(response.status, detail, response);
}
