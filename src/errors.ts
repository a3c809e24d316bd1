// The API's one error shape: {status, message, code, details, id}. `id` is the request id,
// filled in by the server's error handler.

const STATUS = {
  bad_request: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  method_not_allowed: 405,
  request_timeout: 408,
  already_exists: 409,
  conflict: 409,
  gone: 410,
  payload_too_large: 413,
  unsupported_media_type: 415,
  headers_too_large: 431,
  quota_exceeded: 429,
  rate_limited: 429,
  service_unavailable: 503,
  internal: 500,
} as const;

export type ErrorCode = keyof typeof STATUS;

/** Every code an error object can carry (the OpenAPI document's enum is this list). */
export const ERROR_CODES = Object.keys(STATUS) as ErrorCode[];

/** One field-level problem: `path` is dotted from the body's root (`spec.terms[2].op`). */
export interface FieldError {
  path: string;
  message: string;
}

export class ApiError extends Error {
  readonly status: number;
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
    this.status = STATUS[code];
  }

  static badRequest(message: string, errors?: FieldError[]): ApiError {
    return new ApiError('bad_request', message, errors ? { errors } : {});
  }
  static notFound(message: string): ApiError {
    return new ApiError('not_found', message);
  }
  static forbidden(message: string): ApiError {
    return new ApiError('forbidden', message);
  }
  static conflict(message: string): ApiError {
    return new ApiError('conflict', message);
  }
}
