import type { FastifyReply } from 'fastify';

/**
 * The response header that names the chain position a list, query or item GET reflects: the store
 * reads it in the same snapshot as the data (see AtPosition), so a watch from it misses nothing
 * and repeats nothing.
 */
export const POSITION_HEADER = 'keel-seq';

export function withPosition(reply: FastifyReply, seq: number): FastifyReply {
  return reply.header(POSITION_HEADER, String(seq));
}
