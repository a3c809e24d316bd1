// Seed on start (KEEL_INIT): a file or a directory of the documents `cpln apply -f` takes, applied
// to the first org in dependency order with apply semantics (an unchanged document writes nothing
// and records no event), all in one transaction: a bad document stops the run and nothing of it
// stays.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { SystemAuthorizer, SYSTEM_PRINCIPAL } from '../auth/system.js';
import { ApiError } from '../errors.js';
import { findKind } from '../kinds/index.js';
import { accountLinkOf } from '../resources/orgs.js';
import { Resources } from '../resources/service.js';
import { sortForApply } from '../resources/transfer.js';
import { inOneTransaction } from '../store/in-transaction.js';
import type { Store } from '../store/types.js';

export interface SeedDocument {
  /** The file it came from, and its place there (1 for the first document). */
  file: string;
  index: number;
  body: Record<string, unknown> & { kind: string; name: string; gvc?: string };
}

export interface SeedOutcome {
  kind: string;
  name: string;
  gvc?: string;
  outcome: 'created' | 'updated' | 'unchanged';
}

/** A seed that cannot be applied: the message names the file, the document and the field. */
export class SeedError extends Error {
  constructor(
    message: string,
    /** The API's error code, when the resource service refused the document. */
    readonly code?: string,
  ) {
    super(message);
  }
}

/** Several Keel processes may start at once on one database: one's seed can race another's. */
const SEED_ATTEMPTS = 3;

const SEED_FILE = /\.(ya?ml|json)$/i;

/**
 * Reads every document of a file, or of the .yaml/.yml/.json files under a directory (in name
 * order); `source` (the setting or command that named the path) starts the message when it cannot be read.
 */
export function readSeed(path: string, source = 'KEEL_INIT'): SeedDocument[] {
  let files: string[];
  try {
    files = statSync(path).isDirectory() ? filesUnder(path).filter((f) => SEED_FILE.test(f)) : [path];
  } catch (err) {
    throw new SeedError(`${source}: cannot read ${path}: ${(err as Error).message}`);
  }
  const docs: SeedDocument[] = [];
  for (const file of files) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      throw new SeedError(`${file}: cannot read: ${(err as Error).message}`);
    }
    for (const [i, body] of parseDocuments(file, text).entries()) docs.push({ file, index: i + 1, body: checkShape(file, i + 1, body) });
  }
  return docs;
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .map((f) => join(dir, f))
    .filter((f) => statSync(f).isFile())
    .sort((a, b) => relative(dir, a).localeCompare(relative(dir, b)));
}

/** JSON: one document, an array of them or a `{kind: list, items}`; YAML: documents separated by `---` (empty ones skipped). */
function parseDocuments(file: string, text: string): unknown[] {
  if (/\.json$/i.test(file)) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (err) {
      throw new SeedError(`${file}: document 1: not valid JSON: ${(err as Error).message}`);
    }
    if (Array.isArray(parsed)) return parsed;
    const list = parsed as { kind?: unknown; items?: unknown };
    return list && list.kind === 'list' && Array.isArray(list.items) ? list.items : [parsed];
  }
  const out: unknown[] = [];
  for (const [i, doc] of parseAllDocuments(text).entries()) {
    if (doc.errors.length) throw new SeedError(`${file}: document ${i + 1}: not valid YAML: ${doc.errors[0].message}`);
    const value = doc.toJS() as unknown;
    if (value !== null && value !== undefined) out.push(value);
  }
  return out;
}

export function checkShape(file: string, index: number, body: unknown): SeedDocument['body'] {
  const fail = (path: string, message: string) => new SeedError(`${file}: document ${index}: ${path}: ${message}`);
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw fail('(document)', 'must be an object with kind and name');
  const doc = body as Record<string, unknown>;
  if (typeof doc.kind !== 'string') throw fail('kind', 'is required');
  const def = findKind(doc.kind);
  if (!def) throw fail('kind', `'${doc.kind}' is not a kind`);
  if (def.kind === 'org' || def.operations?.create !== undefined || def.writtenByService) throw fail('kind', `${doc.kind} items cannot be applied (Keel writes them itself)`);
  if (typeof doc.name !== 'string') throw fail('name', 'is required');
  if (def.scope === 'gvc' && typeof doc.gvc !== 'string') throw fail('gvc', `is required for a ${doc.kind} (the gvc it belongs to)`);
  return doc as SeedDocument['body'];
}

/**
 * Applies the documents to `org` in dependency order (a gvc before its workloads, a secret before
 * the identity that links it) in one transaction, through the resource service (the same
 * validation, hooks, links and audit events as `cpln apply -f`).
 */
export async function applySeed(store: Store, org: string, docs: SeedDocument[]): Promise<SeedOutcome[]> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await inOneTransaction(store, (inner) => applySeedIn(inner, org, docs));
    } catch (err) {
      const raced = err instanceof SeedError && (err.code === 'already_exists' || err.code === 'conflict');
      if (!raced || attempt === SEED_ATTEMPTS) throw err;
    }
  }
}

/** applySeed inside a transaction already open (`inner`, see InTransaction): a reset's, say. */
export async function applySeedIn(inner: Store, org: string, docs: SeedDocument[]): Promise<SeedOutcome[]> {
  const ordered = sortForApply(docs.map((d) => ({ ...d, kind: d.body.kind, name: d.body.name, gvc: d.body.gvc })));
  const resources = new Resources(inner, new SystemAuthorizer(inner), () => {}, { audit: true, accountLink: accountLinkOf(org) });
  const outcomes: SeedOutcome[] = [];
  for (const doc of ordered) {
    const def = findKind(doc.kind)!;
    const place = { org, gvc: doc.gvc };
    const where = { kind: doc.kind, name: doc.name, ...(doc.gvc !== undefined ? { gvc: doc.gvc } : {}) };
    try {
      const before = await inner.get({ org, kind: def.kind, gvc: def.scope === 'gvc' ? doc.gvc! : '', name: doc.name });
      const { resource, created } = await resources.apply({ ...SYSTEM_PRINCIPAL, org }, def, place, doc.body);
      outcomes.push({ ...where, outcome: created ? 'created' : resource.version === before?.version ? 'unchanged' : 'updated' });
    } catch (err) {
      // Anything else (a store's request to run the transaction again, say) is not the document's fault.
      if (!(err instanceof ApiError)) throw err;
      const field = (err.details.errors as Array<{ path: string; message: string }> | undefined)?.[0];
      const what = field ? `${field.path || '(document)'}: ${field.message}` : err.message;
      throw new SeedError(`${doc.file}: document ${doc.index} (${doc.kind} '${doc.name}'): ${what}`, err.code);
    }
  }
  return outcomes;
}
