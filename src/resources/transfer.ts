import { SYSTEM_PRINCIPAL } from '../auth/system.js';
import { resourceSchema } from '../kinds/derive.js';
import { KINDS, findKind } from '../kinds/index.js';
import type { Store } from '../store/types.js';
import { resolveLinksIn } from './links.js';
import { present } from './present.js';
import { stripReadOnly, type Resources } from './service.js';

/** The order `cpln apply` uses, so that what an item refers to exists before it. */
const APPLY_ORDER = ['agent', 'secret', 'cloudaccount', 'gvc', 'identity', 'volumeset', 'policy', 'workload'];
/** Fields that cannot move between stores: keys exist only as hashes. */
const NOT_TRANSFERABLE: Record<string, string[]> = { serviceaccount: ['keys'] };

export type Document = Record<string, unknown> & { kind: string; name: string; gvc?: string };

function rank(kind: string): number {
  const i = APPLY_ORDER.indexOf(kind);
  return i < 0 ? APPLY_ORDER.length : i;
}

export function sortForApply<T extends { kind: string; name: string; gvc?: string }>(docs: T[]): T[] {
  return [...docs].sort((a, b) => rank(a.kind) - rank(b.kind) || a.kind.localeCompare(b.kind) || (a.gvc ?? '').localeCompare(b.gvc ?? '') || a.name.localeCompare(b.name));
}

/**
 * An org's resources as documents that `keel import` and `cpln apply -f` load: everything clients
 * created (built-ins are left out), without server-owned fields, with links into the org made
 * relative (`//gvc/prod`), secret values included.
 */
export async function exportOrg(store: Store, org: string): Promise<Document[]> {
  const docs: Document[] = [];
  const own = `/org/${org}`;
  for (const def of KINDS) {
    if (def.kind === 'org' || def.operations?.create !== undefined) continue;
    const rows = await store.list({ org, kind: def.kind, limit: 1_000_000, build: () => ({ where: '1 = 1', orderBy: 'r.gvc, r.name' }) });
    for (const row of rows) {
      if (row.data.origin === 'builtin') continue;
      const body = stripReadOnly(present(def, row, { reveal: true }), resourceSchema(def)) as Record<string, unknown>;
      // Links into the same org become relative, so the documents load into any org.
      resolveLinksIn(body, resourceSchema(def), (link) => (link.startsWith(`${own}/`) ? `/${link.slice(own.length)}` : link));
      for (const field of NOT_TRANSFERABLE[def.kind] ?? []) delete body[field];
      docs.push({ kind: def.kind, ...body, name: row.name, ...(def.scope === 'gvc' ? { gvc: row.gvc } : {}) });
    }
  }
  return sortForApply(docs);
}

export interface ImportResult {
  kind: string;
  name: string;
  gvc?: string;
  outcome: 'created' | 'updated' | 'failed';
  error?: string;
}

/** Applies documents in dependency order through the resource service (validation, hooks, audit). */
export async function importDocs(resources: Resources, org: string, docs: unknown[]): Promise<ImportResult[]> {
  const results: ImportResult[] = [];
  const valid: Document[] = [];
  for (const [i, doc] of docs.entries()) {
    const d = doc as Partial<Document> | null;
    if (!d || typeof d !== 'object' || typeof d.kind !== 'string' || typeof d.name !== 'string') {
      results.push({ kind: String(d?.kind ?? '?'), name: String(d?.name ?? `document ${i + 1}`), outcome: 'failed', error: 'a document needs kind and name' });
    } else valid.push(d as Document);
  }
  for (const doc of sortForApply(valid)) {
    const def = findKind(doc.kind);
    const base = { kind: doc.kind, name: doc.name, ...(doc.gvc ? { gvc: doc.gvc } : {}) };
    try {
      if (!def || def.kind === 'org') throw new Error(`kind '${doc.kind}' cannot be imported`);
      if (def.scope === 'gvc' && typeof doc.gvc !== 'string') throw new Error(`${doc.kind} '${doc.name}' needs a gvc`);
      const { resource, created } = await resources.apply({ ...SYSTEM_PRINCIPAL, org }, def, { org, gvc: doc.gvc }, doc);
      results.push({ ...base, name: resource.name, outcome: created ? 'created' : 'updated' });
    } catch (err) {
      results.push({ ...base, outcome: 'failed', error: err instanceof Error ? err.message : String(err) });
    }
  }
  return results;
}
