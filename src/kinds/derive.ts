import type { KindDef } from './types.js';
import { arr, descriptionSchema, int, nameSchema, obj, readOnly, str, tagsSchema, type JsonSchema } from './schema.js';

/** The server-owned fields every resource carries; ignored in request bodies. */
export const COMMON_READ_ONLY = ['id', 'kind', 'version', 'created', 'lastModified', 'links', 'status', 'origin', 'gvc'];

const linkSchema = obj({ rel: str(), href: str() }, { required: ['rel', 'href'] });

const schemaCache = new Map<string, JsonSchema>();

/** The complete JSON Schema of a stored resource of this kind (common fields + the kind's own). */
export function resourceSchema(def: KindDef): JsonSchema {
  let schema = schemaCache.get(def.kind);
  if (!schema) {
    schema = obj(
      {
        id: readOnly(str()),
        kind: readOnly(str()),
        name: def.name ?? nameSchema(),
        description: descriptionSchema(),
        tags: tagsSchema(),
        version: readOnly(int()),
        created: readOnly(str()),
        lastModified: readOnly(str()),
        links: readOnly(arr(linkSchema)),
        ...(def.scope === 'gvc' ? { gvc: readOnly({}) } : {}),
        ...def.fields,
      },
      { required: ['name', ...(def.required ?? [])], description: def.summary },
    );
    schemaCache.set(def.kind, schema);
  }
  return schema;
}

const impliedCache = new Map<string, Record<string, string[]>>();

/** For each permission, every permission it implies, transitively (manage lists all, itself included). */
export function impliedPermissions(def: KindDef): Record<string, string[]> {
  const cached = impliedCache.get(def.kind);
  if (cached) return cached;
  const names = def.permissions.map((p) => p.name);
  const direct = new Map<string, Set<string>>();
  const add = (from: string, to: string) => {
    if (from === to || !names.includes(from) || !names.includes(to)) return;
    if (!direct.has(from)) direct.set(from, new Set());
    direct.get(from)!.add(to);
  };
  for (const n of names) add('manage', n);
  if (names.includes('manage')) direct.set('manage', new Set(names));
  add('edit', 'view');
  for (const [from, tos] of Object.entries(def.implied ?? {})) for (const to of tos) add(from, to);
  const result: Record<string, string[]> = {};
  for (const from of [...direct.keys()].sort()) {
    const seen = new Set<string>();
    const stack = [...direct.get(from)!];
    while (stack.length) {
      const next = stack.pop()!;
      if (seen.has(next)) continue;
      seen.add(next);
      stack.push(...(direct.get(next) ?? []));
    }
    if (from !== 'manage') seen.delete(from);
    result[from] = [...seen].sort();
  }
  impliedCache.set(def.kind, result);
  return result;
}

/** Whether holding `held` grants `wanted` on this kind. */
export function grants(def: KindDef, held: string, wanted: string): boolean {
  return held === wanted || (impliedPermissions(def)[held]?.includes(wanted) ?? false);
}
