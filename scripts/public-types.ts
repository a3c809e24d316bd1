// Compiles Keel's catalogue of the public types' fields (test/fixtures/public-types/catalogue.json)
// from local checkouts of controlplane-com/types-ts and controlplane-com/terraform-provider-cpln:
//
//   node --import tsx scripts/public-types.ts TYPES_TS_DIR PROVIDER_DIR [OUT]
//
// Each directory is a checkout (git rev-parse names its commit) or an unpacked archive (then set
// TYPES_TS_COMMIT / PROVIDER_COMMIT). Only field paths, their JSON types, enum values and
// required-ness are written, never the sources' text; re-running it after the sources move and
// diffing the catalogue shows which fields came and went.
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';

/** Keel's kinds with a public type: the types-ts file and interface, and the provider's client struct. */
const KINDS: Record<string, { file: string; type: string; struct?: string }> = {
  agent: { file: 'agent', type: 'Agent', struct: 'Agent' },
  auditctx: { file: 'auditctx', type: 'AuditContext', struct: 'AuditContext' },
  cloudaccount: { file: 'cloudaccount', type: 'CloudAccount', struct: 'CloudAccount' },
  dbcluster: { file: 'dbcluster', type: 'DbCluster' },
  domain: { file: 'domain', type: 'Domain', struct: 'Domain' },
  group: { file: 'group', type: 'Group', struct: 'Group' },
  gvc: { file: 'gvc', type: 'Gvc', struct: 'Gvc' },
  identity: { file: 'identity', type: 'Identity', struct: 'Identity' },
  image: { file: 'image', type: 'Image', struct: 'Image' },
  ipset: { file: 'ipSet', type: 'IpSet', struct: 'IpSet' },
  location: { file: 'location', type: 'Location', struct: 'Location' },
  memcachecluster: { file: 'memcache', type: 'MemcacheCluster' },
  mk8s: { file: 'mk8s', type: 'Mk8sCluster', struct: 'Mk8s' },
  org: { file: 'org', type: 'Org', struct: 'Org' },
  policy: { file: 'policy', type: 'Policy', struct: 'Policy' },
  quota: { file: 'quota', type: 'Quota' },
  secret: { file: 'secret', type: 'Secret', struct: 'Secret' },
  serviceaccount: { file: 'serviceaccount', type: 'ServiceAccount', struct: 'ServiceAccount' },
  spicedbcluster: { file: 'spicedb', type: 'SpicedbCluster' },
  tenant: { file: 'tenant', type: 'Tenant' },
  user: { file: 'user', type: 'User' },
  volumeset: { file: 'volumeSet', type: 'VolumeSet', struct: 'VolumeSet' },
  workload: { file: 'workload', type: 'Workload', struct: 'Workload' },
};

/** Fields every resource carries that only the server sets, and the server-written status. */
const SERVER_OWNED = new Set(['id', 'kind', 'version', 'created', 'lastModified', 'links', 'status', 'health']);
/** Paths deeper than this are left out: only the open Envoy filter trees go that deep. */
const MAX_DEPTH = 9;

export interface FieldEntry {
  type: 'string' | 'number' | 'boolean' | 'object' | 'array' | 'map' | 'any';
  enum?: Array<string | number | boolean>;
  required?: true;
  /** Which source names the field: the types (`types`), the provider (`terraform`), or both. */
  from: Array<'types' | 'terraform'>;
}

function commitOf(dir: string, variable: string): string {
  if (process.env[variable]) return process.env[variable]!;
  return execFileSync('git', ['-C', dir, 'rev-parse', 'HEAD'], { encoding: 'utf8' }).trim();
}

// ---- types-ts: walked with the TypeScript checker, so aliases, imports and unions resolve ----

function typesCatalogue(dir: string): Record<string, Record<string, FieldEntry>> {
  const folder = join(dir, 'src', 'interfaces');
  const files = readdirSync(folder).filter((f) => f.endsWith('.ts')).map((f) => join(folder, f));
  const program = ts.createProgram(files, { strict: true, target: ts.ScriptTarget.ES2020, module: ts.ModuleKind.ESNext, moduleResolution: ts.ModuleResolutionKind.Bundler });
  const checker = program.getTypeChecker();
  const result: Record<string, Record<string, FieldEntry>> = {};

  for (const [kind, { file, type }] of Object.entries(KINDS)) {
    const source = program.getSourceFile(join(folder, `${file}.ts`));
    const decl = source?.statements.find((s): s is ts.InterfaceDeclaration => ts.isInterfaceDeclaration(s) && s.name.text === type);
    if (!decl) throw new Error(`types-ts: ${file}.ts has no interface ${type}`);
    const fields: Record<string, FieldEntry> = {};
    walkObject(checker, checker.getTypeAtLocation(decl), '', fields, [], true);
    result[kind] = fields;
  }
  return result;
}

function walkObject(checker: ts.TypeChecker, type: ts.Type, prefix: string, out: Record<string, FieldEntry>, stack: ts.Type[], root = false) {
  const branches = type.isUnion() ? type.types.filter((t) => t.flags & ts.TypeFlags.Object) : [type];
  for (const branch of branches) {
    for (const prop of checker.getPropertiesOfType(branch)) {
      if (root && SERVER_OWNED.has(prop.name)) continue;
      const decl = prop.valueDeclaration ?? prop.declarations?.[0];
      if (!decl) continue;
      const propType = checker.getTypeOfSymbolAtLocation(prop, decl);
      const optional = (prop.flags & ts.SymbolFlags.Optional) !== 0 || branches.length > 1;
      walkValue(checker, propType, prefix ? `${prefix}.${prop.name}` : prop.name, !optional, out, stack);
    }
  }
}

function walkValue(checker: ts.TypeChecker, type: ts.Type, path: string, required: boolean, out: Record<string, FieldEntry>, stack: ts.Type[]) {
  const parts = (type.isUnion() ? type.types : [type]).filter((t) => !(t.flags & (ts.TypeFlags.Undefined | ts.TypeFlags.Null)));
  const entry: FieldEntry = { type: 'any', from: ['types'] };
  if (required) entry.required = true;
  const literals = parts.filter((t) => t.isLiteral() || t.flags & ts.TypeFlags.BooleanLiteral);
  const objects = parts.filter((t) => t.flags & ts.TypeFlags.Object);
  if (parts.some((t) => t.flags & (ts.TypeFlags.Any | ts.TypeFlags.Unknown))) {
    entry.type = 'any';
  } else if (objects.length && objects.every((t) => checker.isArrayType(t))) {
    entry.type = 'array';
  } else if (objects.length) {
    const named = objects.find((t) => t.getSymbol()?.name === 'Date');
    if (named) entry.type = 'string';
    else if (objects.every((t) => checker.getIndexInfosOfType(t).length > 0 && checker.getPropertiesOfType(t).length === 0)) entry.type = 'map';
    else entry.type = 'object';
  } else if (parts.every((t) => t.flags & (ts.TypeFlags.Boolean | ts.TypeFlags.BooleanLiteral))) {
    entry.type = 'boolean';
  } else if (parts.every((t) => t.flags & (ts.TypeFlags.NumberLike))) {
    entry.type = 'number';
  } else if (parts.every((t) => t.flags & ts.TypeFlags.StringLike)) {
    entry.type = 'string';
  }
  if (literals.length === parts.length && entry.type !== 'boolean') {
    entry.enum = literals.map((t) => (t as ts.LiteralType).value as string | number);
  }
  out[path] = entry;

  const depth = path.split(/\.|\[\]/).length;
  if (depth >= MAX_DEPTH) return;
  if (entry.type === 'array') {
    const element = checker.getTypeArguments(objects[0] as ts.TypeReference)[0];
    walkValue(checker, element, `${path}[]`, false, out, stack);
  } else if (entry.type === 'object') {
    const union = objects.length > 1 ? objects : [objects[0]];
    if (union.some((t) => stack.includes(t))) return;
    for (const t of union) walkObject(checker, t, path, out, [...stack, t]);
    if (union.length > 1) for (const [p, e] of Object.entries(out)) if (p.startsWith(`${path}.`) && p.indexOf('.', path.length + 1) < 0) delete e.required;
  }
}

// ---- the provider's client: Go structs and their json tags, read line by line ----

interface GoField {
  json: string;
  goType: string;
  /** Values a comment beside the field lists (`// Enum: "a", "b"`). */
  values?: string[];
}

function goStructs(dir: string): Map<string, { fields: GoField[]; embeds: string[] }> {
  const folder = join(dir, 'internal', 'provider', 'client');
  const structs = new Map<string, { fields: GoField[]; embeds: string[] }>();
  for (const file of readdirSync(folder).filter((f) => f.endsWith('.go'))) {
    let current: { fields: GoField[]; embeds: string[] } | undefined;
    for (const line of readFileSync(join(folder, file), 'utf8').split('\n')) {
      const start = /^type (\w+) struct \{/.exec(line);
      if (start) {
        current = { fields: [], embeds: [] };
        structs.set(start[1], current);
        continue;
      }
      if (!current) continue;
      if (/^\}/.test(line)) {
        current = undefined;
        continue;
      }
      const field = /^\s+\w+\s+(\S+)\s+`json:"([^",]+)[^`]*`(?:\s*\/\/.*Enum:\s*(.*?)(?:\s+-|$))?/.exec(line);
      if (field && field[2] !== '-') {
        const values = field[3] ? [...field[3].matchAll(/"([^"]*)"/g)].map((m) => m[1]) : undefined;
        current.fields.push({ goType: field[1], json: field[2], ...(values?.length ? { values } : {}) });
      }
      else if (/^\s+(\w+)\s*$/.test(line)) current.embeds.push(line.trim());
    }
  }
  return structs;
}

function goType(goTypeName: string): { type: FieldEntry['type']; element?: string; struct?: string } {
  const t = goTypeName.replace(/^\*/, '');
  if (t.startsWith('[]')) return { type: 'array', element: t.slice(2) };
  if (t.startsWith('map[')) return { type: 'map' };
  if (t === 'string') return { type: 'string' };
  if (/^(u?int(8|16|32|64)?|float(32|64))$/.test(t)) return { type: 'number' };
  if (t === 'bool') return { type: 'boolean' };
  if (t === 'any' || t === 'interface{}') return { type: 'any' };
  return { type: 'object', struct: t };
}

function providerCatalogue(dir: string): Record<string, Record<string, FieldEntry>> {
  const structs = goStructs(dir);
  const result: Record<string, Record<string, FieldEntry>> = {};
  const walk = (name: string, prefix: string, out: Record<string, FieldEntry>, stack: string[], root: boolean) => {
    const struct = structs.get(name);
    if (!struct) return;
    for (const embed of struct.embeds) if (embed !== 'Base') walk(embed, prefix, out, stack, root);
    for (const field of struct.fields) {
      // Patch directives ($replace/…, $drop/…) address fields listed under their own names.
      if (field.json.startsWith('$') || (root && SERVER_OWNED.has(field.json))) continue;
      let path = prefix ? `${prefix}.${field.json}` : field.json;
      let shape = goType(field.goType);
      out[path] = { type: shape.type, ...(field.values ? { enum: field.values } : {}), from: ['terraform'] };
      while (shape.type === 'array' && shape.element) {
        path = `${path}[]`;
        shape = goType(shape.element);
        out[path] = { type: shape.type, from: ['terraform'] };
      }
      if (shape.struct && !stack.includes(shape.struct)) walk(shape.struct, path, out, [...stack, shape.struct], false);
    }
  };
  for (const [kind, { struct }] of Object.entries(KINDS)) {
    if (!struct) continue;
    const out: Record<string, FieldEntry> = {};
    walk(struct, '', out, [struct], true);
    result[kind] = out;
  }
  return result;
}

function main() {
  const [typesDir, providerDir, out = 'test/fixtures/public-types/catalogue.json'] = process.argv.slice(2);
  if (!typesDir || !providerDir) {
    console.error('usage: node --import tsx scripts/public-types.ts TYPES_TS_DIR PROVIDER_DIR [OUT]');
    process.exit(2);
  }
  const fromTypes = typesCatalogue(typesDir);
  const fromProvider = providerCatalogue(providerDir);
  const kinds: Record<string, Record<string, FieldEntry>> = {};
  for (const kind of Object.keys(KINDS).sort()) {
    const merged: Record<string, FieldEntry> = { ...fromTypes[kind] };
    for (const [path, entry] of Object.entries(fromProvider[kind] ?? {})) {
      const known = merged[path];
      if (!known) merged[path] = entry;
      else known.from = ['types', 'terraform'];
    }
    kinds[kind] = Object.fromEntries(Object.keys(merged).sort().map((p) => [p, merged[p]]));
  }
  const catalogue = {
    sources: {
      'types-ts': { repository: 'controlplane-com/types-ts', commit: commitOf(typesDir, 'TYPES_TS_COMMIT') },
      'terraform-provider-cpln': { repository: 'controlplane-com/terraform-provider-cpln', commit: commitOf(providerDir, 'PROVIDER_COMMIT') },
    },
    kinds,
  };
  writeFileSync(out, `${JSON.stringify(catalogue, null, 1)}\n`);
  const count = Object.values(kinds).reduce((n, k) => n + Object.keys(k).length, 0);
  console.log(`${out}: ${Object.keys(kinds).length} kinds, ${count} fields`);
}

main();
