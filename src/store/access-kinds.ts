/**
 * Kinds whose items authentication and authorization read (auth/policies.ts; a service account's
 * keys go with it): a change to one can change who may do what, so every decision and verified key
 * of its org is forgotten and every watcher of it checked again.
 */
export const ACCESS_KINDS: ReadonlySet<string> = new Set(['org', 'policy', 'group', 'user', 'serviceaccount']);
