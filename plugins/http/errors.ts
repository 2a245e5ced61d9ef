/** Typed errors that services throw; the error handler (plugins/http/error-handler.ts) turns them into `{detail}` bodies. */
export class HttpError extends Error {
  constructor(
    readonly statusCode: number,
    detail: string,
    readonly headers: Record<string, string | number> = {},
  ) {
    super(detail);
    this.name = new.target.name;
  }
}

export class BadRequest extends HttpError {
  constructor(detail: string) {
    super(400, detail);
  }
}

/** 401 with the `WWW-Authenticate: Bearer` challenge every 401 of this API carries. */
export class Unauthorized extends HttpError {
  constructor(detail = 'Not authenticated') {
    super(401, detail, { 'WWW-Authenticate': 'Bearer' });
  }
}

export class Forbidden extends HttpError {
  constructor(detail: string) {
    super(403, detail);
  }
}

export class NotFound extends HttpError {
  constructor(detail: string) {
    super(404, detail);
  }
}

export class PreconditionFailed extends HttpError {
  constructor(detail: string) {
    super(412, detail);
  }
}

export class Conflict extends HttpError {
  constructor(detail: string) {
    super(409, detail);
  }
}

/** A rule the schema states in words but cannot check (e.g. a birthday before today). */
export class ValidationFailed extends HttpError {
  constructor(detail: string) {
    super(422, detail);
  }
}

export class TooManyRequests extends HttpError {
  constructor(retryAfterSeconds: number) {
    super(429, `Rate limit exceeded, retry in ${retryAfterSeconds} seconds`, { 'Retry-After': retryAfterSeconds });
  }
}

export class ServiceUnavailable extends HttpError {
  constructor(detail: string) {
    super(503, detail);
  }
}
