import type { Principal } from '../auth/principal.js';
import type { JsonSchema } from './schema.js';

export type Scope = 'org' | 'gvc';

export interface Link {
  rel: string;
  href: string;
}

/** A resource as the API shows it (common fields plus the kind's own). */
export interface Resource {
  id: string;
  kind: string;
  name: string;
  description?: string;
  version: number;
  tags: Record<string, unknown>;
  created: string;
  lastModified: string;
  links: Link[];
  [field: string]: unknown;
}

/** Where a resource lives: its org and, for gvc-scoped kinds, its GVC. */
export interface Place {
  org: string;
  gvc?: string;
}

export interface Permission {
  name: string;
  description: string;
}

export interface HookContext {
  place: Place;
  /** Who asks (absent for Keel's own writes). */
  principal?: Principal;
  /** Reads other resources of the same org inside the current transaction. */
  lookup(kind: string, name: string, gvc?: string): Promise<Resource | undefined>;
  /** Counts resources of a kind inside a GVC, inside the current transaction. */
  countInGvc(kind: string, gvc: string): Promise<number>;
  /** Revokes every key of a service account whose name is not in `keep`. */
  revokeKeysExcept(serviceAccount: string, keep: string[]): Promise<void>;
  /** The registry's definition of a kind (kind modules do not import the registry). */
  kind(kind: string): KindDef | undefined;
}

/**
 * A reference an item's spec makes to another item: the write that sets or changes it needs
 * `permission` on that item (checked by the resource service, as admission would).
 */
export interface Reference {
  kind: string;
  /** A link field's value (full, as stored); or else `name`. */
  link?: string;
  /** The name of an item in the referring item's org (and, for a gvc-scoped kind, its GVC). */
  name?: string;
  permission: string;
  /** Where the spec makes it, as error paths name fields (`spec.containers[0].image`). */
  path: string;
}

/** What a kind needs to know, beyond the item, to tell its references. */
export interface ReferenceContext {
  place: Place;
  /** The host:port forms this Keel's registry is reached at (its images name the item's org). */
  registryHosts: string[];
}

export interface KindDef {
  kind: string;
  scope: Scope;
  /** One line for docs and the OpenAPI document. */
  summary: string;
  /** The schema of names when the kind's differ from the common rule (users: emails, images: NAME:TAG). */
  name?: JsonSchema;
  /** JSON Schemas of the kind's own top-level fields (common fields are added by the registry). */
  fields: Record<string, JsonSchema>;
  /** Kind fields a create must carry. */
  required?: string[];
  permissions: Permission[];
  /** Implications beyond the generic ones (manage implies all; edit implies view). */
  implied?: Record<string, string[]>;
  /** Which operations clients may perform through the generic endpoints. */
  operations?: Partial<Record<'create' | 'update' | 'delete', false | string>>;
  /**
   * Items of this kind are written by Keel itself (a workload's deployments, the commands run for a
   * parent), not declared by clients: exports leave them out, as they leave out built-ins.
   */
  writtenByService?: true;
  /** Fills defaults in a new or replaced resource before validation. */
  defaults?(item: Record<string, unknown>, place: Place): void;
  /** Extra checks on a validated resource; throw an ApiError to reject. */
  check?(item: Record<string, unknown>, ctx: HookContext, previous?: Resource): Promise<void> | void;
  /** The references an item makes to other items (see Reference). */
  references?(item: Record<string, unknown>, ctx: ReferenceContext): Reference[];
  /** Refuses or prepares a delete inside its transaction; throw an ApiError to refuse. */
  beforeDelete?(item: Resource, ctx: HookContext): Promise<void> | void;
  /** Runs inside the write's transaction after it; `item` is undefined after a delete. */
  afterWrite?(name: string, item: Record<string, unknown> | undefined, ctx: HookContext): Promise<void>;
  /**
   * Status that follows from the item itself (its spec and place), shown on every read under
   * what Keel's reconcilers store (whose fields win): nothing to store, never stale.
   */
  derivedStatus?(item: Resource): Record<string, unknown>;
  /** Kind-specific links added to self/org/gvc. */
  links?(item: Resource, self: string): Link[];
  /**
   * Dotted paths of fields that a plain read never shows (secret `data`: only GET …/-reveal does).
   * Reads leave them out, and queries may neither name, match nor sort on them (src/query/paths.ts).
   */
  hidden?: readonly string[];
}
