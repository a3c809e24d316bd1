import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ApiError, type ErrorCode } from '../errors.js';

const CODE_BY_STATUS: Record<number, ErrorCode> = {
  400: 'bad_request',
  401: 'unauthorized',
  403: 'forbidden',
  404: 'not_found',
  405: 'method_not_allowed',
  409: 'conflict',
  413: 'payload_too_large',
  415: 'unsupported_media_type',
  429: 'rate_limited',
  503: 'service_unavailable',
};

/** A path the clients know that Keel answers without doing what it asks: 400, saying why (never a 404: the path exists). */
export function notServed(request: FastifyRequest, why: string): ApiError {
  return ApiError.badRequest(`${request.method} ${request.url.split('?')[0]} is not served by Keel: ${why}`);
}

export function sendError(reply: FastifyReply, request: FastifyRequest, err: ApiError): FastifyReply {
  // A refusal that names when to ask again says so where clients look for it.
  if (typeof err.details.retryAfter === 'number') reply.header('retry-after', String(err.details.retryAfter));
  return reply
    .code(err.status)
    .type('application/json')
    .send(errorObject(err, request.id));
}

/** The API's error object for a refusal of the request `id`. */
export function errorObject(err: ApiError, id: string) {
  return { status: err.status, message: err.message, code: err.code, details: err.details, id };
}

/** Every failure leaves as the API's error object; anything unexpected is a logged 500 without internals. */
export function installErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((error: FastifyError | ApiError, request, reply) => sendError(reply, request, refusalOf(error, request)));
  app.setNotFoundHandler((request, reply) => sendError(reply, request, ApiError.notFound(`no such path: ${request.method} ${request.url.split('?')[0]}`)));
}

/** What a failure is answered as: an ApiError as it is, a client's error (4xx) as the API's, anything else a logged 500 without internals. */
export function refusalOf(error: unknown, request: FastifyRequest): ApiError {
  if (error instanceof ApiError) return error;
  const status = (error as FastifyError).statusCode;
  if (status && status >= 400 && status < 500) return new ApiError(CODE_BY_STATUS[status] ?? 'bad_request', clientMessage(error as FastifyError));
  request.log.error({ reqId: request.id, err: error }, 'unhandled error');
  return new ApiError('internal', 'internal error; quote the id when reporting it');
}

function clientMessage(error: FastifyError): string {
  switch (error.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return 'the request body is larger than the server accepts';
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return 'the request body must be JSON (Content-Type: application/json)';
    default:
      return error.message;
  }
}
