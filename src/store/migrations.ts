import type { Dialect } from './sql.js';

// Each step runs once, in order, inside one transaction, and is recorded in keel_migrations.
// `data` holds the resource as stored (no links: those are derived from its place).
// Text columns compare bytewise on both backends (COLLATE "C" on PostgreSQL) so keyset
// pagination orders the same everywhere. resource_tags mirrors tags so that tag terms are index lookups on both backends.
export const migrations: Array<{ version: number; name: string; sql: Record<Dialect, string> }> = [
  {
    version: 1,
    name: 'resources',
    sql: {
      sqlite: `
        CREATE TABLE resources (
          org TEXT NOT NULL, kind TEXT NOT NULL, gvc TEXT NOT NULL DEFAULT '', name TEXT NOT NULL,
          id TEXT NOT NULL UNIQUE, version INTEGER NOT NULL,
          created TEXT NOT NULL, last_modified TEXT NOT NULL,
          data TEXT NOT NULL,
          PRIMARY KEY (org, kind, gvc, name)
        ) WITHOUT ROWID;
        CREATE INDEX resources_by_name ON resources (org, kind, name, gvc);
        CREATE TABLE resource_tags (
          id TEXT NOT NULL, org TEXT NOT NULL, kind TEXT NOT NULL, gvc TEXT NOT NULL, name TEXT NOT NULL,
          key TEXT NOT NULL, value TEXT NOT NULL,
          PRIMARY KEY (id, key)
        ) WITHOUT ROWID;
        CREATE INDEX resource_tags_lookup ON resource_tags (org, kind, key, value, name, gvc);`,
      postgres: `
        CREATE TABLE resources (
          org TEXT NOT NULL, kind TEXT NOT NULL, gvc TEXT COLLATE "C" NOT NULL DEFAULT '', name TEXT COLLATE "C" NOT NULL,
          id TEXT NOT NULL UNIQUE, version INTEGER NOT NULL,
          created TEXT NOT NULL, last_modified TEXT NOT NULL,
          data JSONB NOT NULL,
          PRIMARY KEY (org, kind, gvc, name)
        );
        CREATE INDEX resources_by_name ON resources (org, kind, name, gvc);
        CREATE TABLE resource_tags (
          id TEXT NOT NULL, org TEXT NOT NULL, kind TEXT NOT NULL, gvc TEXT COLLATE "C" NOT NULL, name TEXT COLLATE "C" NOT NULL,
          key TEXT COLLATE "C" NOT NULL, value TEXT COLLATE "C" NOT NULL,
          PRIMARY KEY (id, key)
        );
        CREATE INDEX resource_tags_lookup ON resource_tags (org, kind, key, value, name, gvc);`,
    },
  },
  {
    version: 2,
    name: 'service account keys',
    sql: {
      sqlite: `
        CREATE TABLE service_account_keys (
          key_name TEXT PRIMARY KEY, org TEXT NOT NULL, service_account TEXT NOT NULL,
          secret_hash TEXT NOT NULL, created TEXT NOT NULL
        );
        CREATE INDEX service_account_keys_owner ON service_account_keys (org, service_account);`,
      postgres: `
        CREATE TABLE service_account_keys (
          key_name TEXT PRIMARY KEY, org TEXT NOT NULL, service_account TEXT NOT NULL,
          secret_hash TEXT NOT NULL, created TEXT NOT NULL
        );
        CREATE INDEX service_account_keys_owner ON service_account_keys (org, service_account);`,
    },
  },
];
