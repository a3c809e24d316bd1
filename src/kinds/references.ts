import type { Reference } from './types.js';

/** A link field a kind declares as a reference: where it is (`[]` steps into every element of an array) and what it needs. */
export interface LinkField {
  at: string;
  kind: string;
  permission: string;
}

/** The references the declared link fields of `item` make, each with its concrete path (`spec.ports[0].routes[1].workloadLink`). */
export function linksAt(item: Record<string, unknown>, fields: readonly LinkField[]): Reference[] {
  const out: Reference[] = [];
  for (const field of fields) {
    for (const { value, path } of valuesAt(item, field.at.split('.'), '')) {
      // Link fields are validated as links; in blocks stored as sent (mk8s providers) text that is no link names nothing.
      if (typeof value === 'string' && value.startsWith('/')) out.push({ kind: field.kind, link: value, permission: field.permission, path });
    }
  }
  return out;
}

function* valuesAt(value: unknown, steps: string[], path: string): Generator<{ value: unknown; path: string }> {
  if (steps.length === 0) {
    yield { value, path };
    return;
  }
  if (!value || typeof value !== 'object' || Array.isArray(value)) return;
  const [step, ...rest] = steps;
  const array = step.endsWith('[]');
  const key = array ? step.slice(0, -2) : step;
  if (!Object.hasOwn(value, key)) return;
  const child = (value as Record<string, unknown>)[key];
  const here = path ? `${path}.${key}` : key;
  if (!array) {
    yield* valuesAt(child, rest, here);
    return;
  }
  if (!Array.isArray(child)) return;
  for (const [i, element] of child.entries()) yield* valuesAt(element, rest, `${here}[${i}]`);
}

/** The secrets an org's or a GVC's tracing sends its spans with. */
export const TRACING_SECRET_LINKS: readonly LinkField[] = ['spec.tracing.lightstep.credentials', 'spec.tracing.provider.lightstep.credentials'].map((at) => ({
  at,
  kind: 'secret',
  permission: 'use',
}));
