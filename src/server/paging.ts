import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ApiError } from '../errors.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** The largest `?limit=` a page may ask for (KEEL_MAX_PAGE_SIZE). */
    maxPageSize: number;
  }
}

const DEFAULT_PAGE = 100;

export function installPaging(app: FastifyInstance, maxPageSize: number): void {
  app.decorate('maxPageSize', maxPageSize);
}

/** A page size within bounds: `limit` as given (1..max), or the default page. */
export function pageSizeOf(request: FastifyRequest, limit: string | undefined): number {
  const max = request.server.maxPageSize;
  if (limit === undefined) return Math.min(DEFAULT_PAGE, max);
  const n = Number(limit);
  if (!Number.isInteger(n) || n < 1 || n > max) throw ApiError.badRequest(`limit must be a whole number from 1 to ${max}`, [{ path: 'limit', message: `must be 1..${max}` }]);
  return n;
}
