// The distribution spec's error object: `{"errors":[{code, message, detail}]}`, used on /v2/ only.
import type { FastifyReply } from 'fastify';
import { ApiError } from '../errors.js';

export type RegistryCode =
  | 'BLOB_UNKNOWN'
  | 'BLOB_UPLOAD_INVALID'
  | 'BLOB_UPLOAD_UNKNOWN'
  | 'DIGEST_INVALID'
  | 'MANIFEST_BLOB_UNKNOWN'
  | 'MANIFEST_INVALID'
  | 'MANIFEST_UNKNOWN'
  | 'NAME_INVALID'
  | 'NAME_UNKNOWN'
  | 'SIZE_INVALID'
  | 'UNAUTHORIZED'
  | 'DENIED'
  | 'UNSUPPORTED'
  | 'TOOMANYREQUESTS';

export class RegistryError extends Error {
  constructor(
    readonly code: RegistryCode,
    message: string,
    readonly status: number,
    readonly detail?: unknown,
  ) {
    super(message);
  }
}

/** The registry code for one of the API's own errors (authentication, limits, timeouts). */
function fromApiError(err: ApiError): RegistryError {
  switch (err.code) {
    case 'unauthorized':
      return new RegistryError('UNAUTHORIZED', err.message, 401);
    case 'forbidden':
      return new RegistryError('DENIED', err.message, 403);
    case 'not_found':
      return new RegistryError('NAME_UNKNOWN', err.message, 404);
    case 'rate_limited':
      return new RegistryError('TOOMANYREQUESTS', err.message, 429, err.details);
    case 'payload_too_large':
      return new RegistryError('SIZE_INVALID', err.message, 413);
    default:
      return new RegistryError('UNSUPPORTED', err.message, err.status, err.details);
  }
}

export function toRegistryError(err: unknown): RegistryError | undefined {
  if (err instanceof RegistryError) return err;
  if (err instanceof ApiError) return fromApiError(err);
  return undefined;
}

export function sendRegistryError(reply: FastifyReply, err: RegistryError): FastifyReply {
  if (err.code === 'TOOMANYREQUESTS' && typeof (err.detail as { retryAfter?: unknown })?.retryAfter === 'number') reply.header('retry-after', String((err.detail as { retryAfter: number }).retryAfter));
  return reply
    .code(err.status)
    .type('application/json')
    .send({ errors: [{ code: err.code, message: err.message, detail: err.detail ?? null }] });
}
