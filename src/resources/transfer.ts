import { stringify as toYaml } from 'yaml';
import { resourceSchema } from '../kinds/derive.js';
import { KINDS } from '../kinds/index.js';
import type { Store } from '../store/types.js';
import { resolveLinksIn } from './links.js';
import { present } from './present.js';
import { stripReadOnly } from './service.js';

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
 * An org's resources as documents that `keel import` and `cpln apply -f` load: what clients
 * declared, without what Keel made (built-ins, deployments, commands) or server-owned fields
 * (status, id, version...), with links into the org made relative (`//gvc/prod`), secret values included.
 */
export async function exportOrg(store: Store, org: string): Promise<Document[]> {
  const docs: Document[] = [];
  const own = `/org/${org}`;
  for (const def of KINDS) {
    if (def.kind === 'org' || def.operations?.create !== undefined || def.writtenByService) continue;
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

/** Exported documents as a file's text: YAML documents separated by `---`, or a JSON array. */
export function documentsText(docs: Document[], format: 'yaml' | 'json'): string {
  return format === 'json' ? JSON.stringify(docs, null, 2) + '\n' : docs.map((d) => toYaml(d)).join('---\n');
}
