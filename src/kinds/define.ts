import { ApiError, type FieldError } from '../errors.js';
import { parseQuery, type QueryKind } from '../query/index.js';
import { anyObject, readOnly } from './schema.js';
import type { KindDef } from './types.js';

/** Declares a kind; the registry (index.ts) derives schemas and permission tables from it. */
export function defineKind(def: KindDef): KindDef {
  return def;
}

/** The permissions that are ordinarily listed for a kind, with the kind's plural noun in the text. */
export function standardPermissions(noun: string, extra: Array<{ name: string; description: string }> = []) {
  return [
    { name: 'create', description: `Create new ${noun}` },
    { name: 'delete', description: `Delete existing ${noun}` },
    { name: 'edit', description: `Modify existing ${noun}` },
    { name: 'manage', description: 'Full access' },
    { name: 'view', description: 'Read-only access' },
    ...extra,
  ].sort((a, b) => a.name.localeCompare(b.name));
}

/**
 * A kind with no public schema (projections and internal kinds): any object as spec, any status,
 * and the two permissions every kind has.
 */
export function opaqueKind(kind: string, summary: string, options: Pick<KindDef, 'operations'> = {}): KindDef {
  return defineKind({
    kind,
    scope: 'org',
    summary,
    fields: { spec: anyObject(), status: readOnly(anyObject()) },
    permissions: [
      { name: 'manage', description: 'Full access' },
      { name: 'view', description: 'Read-only access' },
    ],
    ...options,
  });
}

/**
 * Refuses a stored query (a policy's targetQuery) that a -query on `kind` would refuse, hidden
 * fields included, with error paths under `field`: one that does not parse would silently grant
 * nothing.
 */
export function checkQuery(body: unknown, kind: QueryKind, field: string): void {
  try {
    parseQuery(body, kind);
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    const errors = ((err.details.errors as FieldError[] | undefined) ?? [{ path: '', message: err.message }]).map((e) => ({
      path: e.path ? `${field}.${e.path}` : field,
      message: e.message,
    }));
    throw ApiError.badRequest(`invalid ${field}: ${errors[0].path}: ${errors[0].message}`, errors);
  }
}
