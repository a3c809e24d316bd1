// Queries (seed 2.3, api-semantics §8): parse, evaluate in memory, compile to SQL, paginate by keyset.
export { parseQuery } from './parse.js';
export { matchesQuery } from './evaluate.js';
export { compileQuery, type CompileOptions, type CompiledQuery } from './compile.js';
export { cursorOf } from './cursor.js';
export { asRows, pageInMemory, selects } from './memory.js';
export { sortItems } from './sort.js';
export { sortOf, DEFAULT_SORT, OPS } from './types.js';
export type { Match, Op, PropertyTerm, Query, QueryKind, QueryPlace, RelTerm, Sort, TagTerm, Term, TermValue } from './types.js';
