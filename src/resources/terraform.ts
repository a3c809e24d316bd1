// Terraform configuration for resources, as the terraform-exporter renders it for `cpln … -o tf`:
// one `resource "cpln_<kind>" "<label>"` block per resource, written from the resource's own
// fields the same way for every kind. Read-only fields (id, version, links, status, …) are left
// out; field names become the provider's snake_case; objects become nested blocks, arrays of
// objects repeated blocks, and maps (tags, or keys that are not identifiers) map attributes.
import type { Resource } from '../kinds/types.js';

/** Fields the API sets itself: never part of a configuration. */
export const READ_ONLY_FIELDS = ['kind', 'id', 'name', 'version', 'created', 'lastModified', 'links', 'status', 'origin', 'alias', 'gvc'];

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_-]*$/;
/** Fields whose value is a map from user-chosen keys, whatever its keys look like. */
const MAP_FIELDS = new Set(['tags']);

export function toTerraform(resources: Resource[]): string {
  return resources.map(resourceBlock).join('\n');
}

function resourceBlock(resource: Resource): string {
  const lines: string[] = [`resource "cpln_${resource.kind}" "${label(resource.name)}" {`];
  const gvc = resource.links.find((l) => l.rel === 'gvc')?.href.split('/').pop();
  if (gvc && resource.kind !== 'gvc') lines.push(`  gvc = ${literal(gvc)}`);
  lines.push(`  name = ${literal(resource.name)}`);
  for (const [key, value] of Object.entries(resource)) {
    if (READ_ONLY_FIELDS.includes(key)) continue;
    body(lines, key, value, 1);
  }
  lines.push('}');
  return lines.join('\n') + '\n';
}

/** Appends `key`'s attribute or block(s) at `depth` (two spaces each). */
function body(lines: string[], key: string, value: unknown, depth: number): void {
  if (value === undefined || value === null) return;
  const pad = '  '.repeat(depth);
  const name = snake(key);
  if (isObject(value) && !MAP_FIELDS.has(key) && Object.keys(value).every((k) => IDENTIFIER.test(k))) {
    lines.push(`${pad}${name} {`);
    for (const [k, v] of Object.entries(value)) body(lines, k, v, depth + 1);
    lines.push(`${pad}}`);
    return;
  }
  if (Array.isArray(value) && value.length > 0 && value.every(isObject)) {
    for (const item of value) body(lines, key, item, depth);
    return;
  }
  lines.push(`${pad}${name} = ${expression(value, depth)}`);
}

/** An HCL expression: a literal, a list, or a map (object constructor). */
function expression(value: unknown, depth: number): string {
  if (Array.isArray(value)) return `[${value.map((v) => expression(v, depth)).join(', ')}]`;
  if (isObject(value)) {
    const entries = Object.entries(value).filter(([, v]) => v !== undefined);
    if (entries.length === 0) return '{}';
    const pad = '  '.repeat(depth + 1);
    return `{\n${entries.map(([k, v]) => `${pad}${literal(k)} = ${expression(v, depth + 1)}`).join('\n')}\n${'  '.repeat(depth)}}`;
  }
  return literal(value);
}

function literal(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  // A quoted template: escape quotes and backslashes, and the `${` and `%{` that would start interpolation.
  const escaped = String(value)
    .replace(/\\/g, '\\\\')
    .replace(/"/g, '\\"')
    .replace(/\n/g, '\\n')
    .replace(/\r/g, '\\r')
    .replace(/\t/g, '\\t')
    .replace(/\$\{/g, () => '$${')
    .replace(/%\{/g, () => '%%{');
  return `"${escaped}"`;
}

/** A block label Terraform accepts: letters, digits, `_` and `-`, not starting with a digit. */
function label(name: string): string {
  const cleaned = name.replace(/[^A-Za-z0-9_-]/g, '_');
  return /^[A-Za-z_]/.test(cleaned) ? cleaned : `_${cleaned}`;
}

function snake(key: string): string {
  return IDENTIFIER.test(key) ? key.replace(/([a-z0-9])([A-Z])/g, '$1_$2').replace(/-/g, '_').toLowerCase() : literal(key);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
