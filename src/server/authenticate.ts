import type { Principal } from '../auth/principal.js';
import type { KindDef } from '../kinds/types.js';

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal;
  }
  interface FastifyContextConfig {
    /** Served without credentials. */
    public?: boolean;
    /** The 405 answer of a path for the methods it does not have (not an operation). */
    methodNotAllowed?: boolean;
    /** A write that needs one of these permissions on its kind (on the item the path parameter `item` names, if any): checked before its body is read. */
    bodyPermission?: BodyPermission;
  }
}

export interface BodyPermission {
  def: KindDef;
  permissions: string[];
  item?: string;
}
