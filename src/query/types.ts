// The query object of seed 2.3, as parseQuery normalizes it.

export const OPS = ['=', '!=', '>', '>=', '<', '<=', '~', 'exists', '!exists'] as const;
export type Op = (typeof OPS)[number];
export type Match = 'all' | 'any' | 'none';
export type TermValue = string | number | boolean;

interface TermBase {
  op: Op;
  value?: TermValue;
}
/** A dotted path into the item (`spec.x.y`), or `*` for any top-level property. */
export type PropertyTerm = TermBase & { property: string };
/** A tag key, or `*` for any tag. */
export type TagTerm = TermBase & { tag: string };
/** `gvc`, or `<rel>` for a `<rel>Link` field at the top level or in spec. */
export type RelTerm = TermBase & { rel: string };
export type Term = PropertyTerm | TagTerm | RelTerm;

export interface Sort {
  by: string;
  order: 'asc' | 'desc';
}

export interface Query {
  kind: string;
  fetch: 'items' | 'links';
  spec: { match: Match; terms: Term[]; sort?: Sort };
  /** The kind's hidden paths (KindDef.hidden): no term or sort names them, and `*` skips them. */
  hidden?: readonly string[];
}

/** What a query needs to know of the kind it runs on (a KindDef is one). */
export interface QueryKind {
  kind: string;
  hidden?: readonly string[];
}

/** Where an item lives, as far as queries care: its GVC ('' or absent for org-scoped kinds). */
export interface QueryPlace {
  gvc?: string;
}

export const DEFAULT_SORT: Sort = { by: 'name', order: 'asc' };

export function sortOf(query: Query): Sort {
  return query.spec.sort ?? DEFAULT_SORT;
}
