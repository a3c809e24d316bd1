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
