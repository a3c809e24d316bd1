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
  {
    version: 3,
    name: 'audit events',
    // Each org's events form a hash chain: hash(n) = sha256(hash(n-1) + "\n" + seq + "\n" + body).
    // audit_heads holds each org's last seq and hash; appending updates it last in the writing
    // transaction, so per-org seq order is commit order (what the change stream relies on).
    // audit_prunes anchors the chain after retention removed its oldest events.
    sql: {
      sqlite: `
        CREATE TABLE audit_heads (org TEXT PRIMARY KEY, last_seq INTEGER NOT NULL, last_hash TEXT NOT NULL);
        CREATE TABLE audit_prunes (org TEXT PRIMARY KEY, up_to_seq INTEGER NOT NULL, hash TEXT NOT NULL);
        CREATE TABLE audit_events (
          org TEXT NOT NULL, seq INTEGER NOT NULL, id TEXT NOT NULL UNIQUE, context TEXT NOT NULL,
          event_time TEXT NOT NULL, resource_type TEXT NOT NULL, resource_name TEXT NOT NULL, resource_id TEXT NOT NULL,
          subject_name TEXT NOT NULL, action_type TEXT NOT NULL, hash TEXT NOT NULL, body TEXT NOT NULL,
          PRIMARY KEY (org, seq)
        ) WITHOUT ROWID;
        CREATE INDEX audit_events_context ON audit_events (org, context, seq);
        CREATE INDEX audit_events_resource ON audit_events (org, resource_id, seq);
        CREATE INDEX audit_events_time ON audit_events (org, event_time);`,
      postgres: `
        CREATE TABLE audit_heads (org TEXT PRIMARY KEY, last_seq BIGINT NOT NULL, last_hash TEXT NOT NULL);
        CREATE TABLE audit_prunes (org TEXT PRIMARY KEY, up_to_seq BIGINT NOT NULL, hash TEXT NOT NULL);
        CREATE TABLE audit_events (
          org TEXT NOT NULL, seq BIGINT NOT NULL, id TEXT NOT NULL UNIQUE, context TEXT NOT NULL,
          event_time TEXT NOT NULL, resource_type TEXT NOT NULL, resource_name TEXT NOT NULL, resource_id TEXT NOT NULL,
          subject_name TEXT NOT NULL, action_type TEXT NOT NULL, hash TEXT NOT NULL, body TEXT NOT NULL,
          PRIMARY KEY (org, seq)
        );
        CREATE INDEX audit_events_context ON audit_events (org, context, seq);
        CREATE INDEX audit_events_resource ON audit_events (org, resource_id, seq);
        CREATE INDEX audit_events_time ON audit_events (org, event_time);`,
    },
  },
  {
    version: 4,
    name: 'audit events pending their place in the chain',
    // PostgreSQL: a writing transaction only inserts its event here (no lock shared by the org's
    // writers); right after it commits, a sealer gives pending events their seq and hash in one
    // short transaction per org and batch, in commit order. SQLite has one writer and seals inline.
    sql: {
      sqlite: `SELECT 1;`,
      postgres: `
        CREATE TABLE audit_pending (
          pending_id BIGSERIAL PRIMARY KEY, org TEXT NOT NULL, id TEXT NOT NULL UNIQUE, context TEXT NOT NULL,
          event_time TEXT NOT NULL, resource_type TEXT NOT NULL, resource_name TEXT NOT NULL, resource_id TEXT NOT NULL,
          subject_name TEXT NOT NULL, action_type TEXT NOT NULL, body TEXT NOT NULL
        );
        CREATE INDEX audit_pending_org ON audit_pending (org, pending_id);`,
    },
  },
  {
    version: 5,
    name: 'audit events appended at the end of their table; a context index for custom contexts only',
    // SQLite: a rowid table (events are appended, so their large bodies fill pages in order instead
    // of splitting a WITHOUT ROWID b-tree). Both: almost every event is in the platform context
    // 'cpln', which the (org, seq) key already serves, so only custom contexts are indexed.
    sql: {
      sqlite: `
        CREATE TABLE audit_events_appended (
          org TEXT NOT NULL, seq INTEGER NOT NULL, id TEXT NOT NULL UNIQUE, context TEXT NOT NULL,
          event_time TEXT NOT NULL, resource_type TEXT NOT NULL, resource_name TEXT NOT NULL, resource_id TEXT NOT NULL,
          subject_name TEXT NOT NULL, action_type TEXT NOT NULL, hash TEXT NOT NULL, body TEXT NOT NULL,
          PRIMARY KEY (org, seq)
        );
        INSERT INTO audit_events_appended SELECT * FROM audit_events ORDER BY org, seq;
        DROP TABLE audit_events;
        ALTER TABLE audit_events_appended RENAME TO audit_events;
        CREATE INDEX audit_events_resource ON audit_events (org, resource_id, seq);
        CREATE INDEX audit_events_time ON audit_events (org, event_time);
        CREATE INDEX audit_events_custom_context ON audit_events (org, context, seq) WHERE context <> 'cpln';`,
      postgres: `
        DROP INDEX audit_events_context;
        CREATE INDEX audit_events_custom_context ON audit_events (org, context, seq) WHERE context <> 'cpln';`,
    },
  },
  {
    version: 6,
    name: 'pending audit events without a unique index on their id',
    // Every change inserted into it and every seal deleted from it; audit_events.id stays unique,
    // and ids are Keel's own (UUID v7), never a client's.
    sql: {
      sqlite: `SELECT 1;`,
      postgres: `ALTER TABLE audit_pending DROP CONSTRAINT audit_pending_id_key;`,
    },
  },
  {
    version: 7,
    name: 'SQLite: audit lookups by resource and time, kept in batches',
    // Keeping (org, resource_id, seq) and (org, event_time) indexes cost every SQLite change about
    // as much again as the change itself (random b-tree pages written at each commit). Their
    // entries now go to audit_lookup in sorted batches ('r:' resource id, 't:' event time), for
    // the events appended after audit_lookup_through's rowid (see sqlite/lookup.ts).
    sql: {
      sqlite: `
        CREATE TABLE audit_lookup (org TEXT NOT NULL, key TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (org, key, seq)) WITHOUT ROWID;
        INSERT INTO audit_lookup SELECT org, 'r:' || resource_id, seq FROM audit_events UNION ALL SELECT org, 't:' || event_time, seq FROM audit_events ORDER BY 1, 2, 3;
        CREATE TABLE audit_lookup_through (rowid_through INTEGER NOT NULL);
        INSERT INTO audit_lookup_through SELECT COALESCE(MAX(rowid), 0) FROM audit_events;
        DROP INDEX audit_events_resource;
        DROP INDEX audit_events_time;`,
      postgres: `SELECT 1;`,
    },
  },
  {
    version: 8,
    name: 'SQLite: audit events placed by their org number and seq; lookups kept by a background thread',
    // An event's row is found by pos = org_no * 2^40 + seq, its rowid, so appending writes the table
    // and no index (the (org, seq) and id indexes were a third of an event's cost). Lookups by
    // resource, time and id move to a database file of their own (see sqlite/lookup.ts), which a
    // worker thread keeps up to date without taking this file's write lock.
    sql: {
      sqlite: `
        ALTER TABLE audit_heads ADD COLUMN org_no INTEGER;
        UPDATE audit_heads SET org_no = (SELECT COUNT(*) FROM audit_heads h WHERE h.org <= audit_heads.org);
        CREATE UNIQUE INDEX audit_heads_org_no ON audit_heads (org_no);
        CREATE TABLE audit_events_placed (
          pos INTEGER PRIMARY KEY, org TEXT NOT NULL, seq INTEGER NOT NULL, id TEXT NOT NULL, context TEXT NOT NULL,
          event_time TEXT NOT NULL, resource_type TEXT NOT NULL, resource_name TEXT NOT NULL, resource_id TEXT NOT NULL,
          subject_name TEXT NOT NULL, action_type TEXT NOT NULL, hash TEXT NOT NULL, body TEXT NOT NULL
        );
        INSERT INTO audit_events_placed
          SELECT h.org_no * 1099511627776 + e.seq, e.org, e.seq, e.id, e.context, e.event_time, e.resource_type, e.resource_name,
                 e.resource_id, e.subject_name, e.action_type, e.hash, e.body
          FROM audit_events e JOIN audit_heads h ON h.org = e.org ORDER BY 1;
        DROP TABLE audit_events;
        ALTER TABLE audit_events_placed RENAME TO audit_events;
        CREATE INDEX audit_events_custom_context ON audit_events (context, pos) WHERE context <> 'cpln';
        DROP TABLE audit_lookup;
        DROP TABLE audit_lookup_through;`,
      postgres: `SELECT 1;`,
    },
  },
  {
    version: 9,
    name: 'SQLite: audit events sealed by the housekeeping thread; event rows hold pos, context and body',
    // The chain's hashes move from the rows to audit_seals (see sqlite/seals.ts), each event sealed
    // so far becoming a seal of one; the other fields are read from the bodies into the lookup file.
    sql: {
      sqlite: `
        ALTER TABLE audit_heads ADD COLUMN sealed_seq INTEGER NOT NULL DEFAULT 0;
        UPDATE audit_heads SET sealed_seq = last_seq;
        CREATE TABLE audit_seals (pos_to INTEGER PRIMARY KEY, pos_from INTEGER NOT NULL, hashes TEXT NOT NULL);
        INSERT INTO audit_seals SELECT pos, pos, hash FROM audit_events ORDER BY pos;
        CREATE TABLE audit_events_slim (pos INTEGER PRIMARY KEY, context TEXT NOT NULL, body TEXT NOT NULL);
        INSERT INTO audit_events_slim SELECT pos, context, body FROM audit_events ORDER BY pos;
        DROP TABLE audit_events;
        ALTER TABLE audit_events_slim RENAME TO audit_events;
        CREATE INDEX audit_events_custom_context ON audit_events (context, pos) WHERE context <> 'cpln';`,
      postgres: `SELECT 1;`,
    },
  },
  {
    version: 10,
    name: 'PostgreSQL: audit seals hash with a running aggregate and take pending events by one index',
    // chainHash (audit/chain.ts) as an aggregate's step, so a seal hashes its events in one pass
    // over them in seq order (a window with an unbounded start) instead of by a recursive CTE,
    // whose join scanned the whole batch at every step. `head` is the hash before the first event.
    // audit_pending is a queue: one index, in (org, pending_id) order, serves both the insert and the
    // seal's scan for an org's oldest events (the org index and the pending_id key were two).
    sql: {
      sqlite: `SELECT 1;`,
      postgres: `
        ALTER TABLE audit_pending DROP CONSTRAINT audit_pending_pkey, ADD PRIMARY KEY (org, pending_id);
        DROP INDEX audit_pending_org;
        CREATE FUNCTION keel_chain_step(previous TEXT, head TEXT, seq BIGINT, body TEXT) RETURNS TEXT
          LANGUAGE sql IMMUTABLE PARALLEL SAFE
          AS $$ SELECT encode(sha256(convert_to(COALESCE(previous, head) || E'\\n' || seq::text || E'\\n' || body, 'UTF8')), 'hex') $$;
        CREATE AGGREGATE keel_chain(TEXT, BIGINT, TEXT) (SFUNC = keel_chain_step, STYPE = TEXT);`,
    },
  },
  {
    version: 11,
    name: 'log lines of the simulated platform',
    // One row per line, its labels as columns ('' when a line has no such label). `ts` is the
    // line's time in nanoseconds since the epoch as 19 digits, so text order is time order on both
    // backends and no value passes through a JavaScript number. Reads scan an org's time range, or
    // one workload's (the selector `cpln logs` is used with most).
    sql: {
      sqlite: `
        CREATE TABLE log_lines (
          id INTEGER PRIMARY KEY, org TEXT NOT NULL, ts TEXT NOT NULL,
          gvc TEXT NOT NULL, workload TEXT NOT NULL, location TEXT NOT NULL, container TEXT NOT NULL,
          replica TEXT NOT NULL, volumeset TEXT NOT NULL, line TEXT NOT NULL
        );
        CREATE INDEX log_lines_time ON log_lines (org, ts, id);
        CREATE INDEX log_lines_workload ON log_lines (org, gvc, workload, ts, id);`,
      postgres: `
        CREATE TABLE log_lines (
          id BIGSERIAL PRIMARY KEY, org TEXT NOT NULL, ts TEXT COLLATE "C" NOT NULL,
          gvc TEXT COLLATE "C" NOT NULL, workload TEXT COLLATE "C" NOT NULL, location TEXT COLLATE "C" NOT NULL,
          container TEXT COLLATE "C" NOT NULL, replica TEXT COLLATE "C" NOT NULL, volumeset TEXT COLLATE "C" NOT NULL, line TEXT NOT NULL
        );
        CREATE INDEX log_lines_time ON log_lines (org, ts, id);
        CREATE INDEX log_lines_workload ON log_lines (org, gvc, workload, ts, id);`,
    },
  },
  {
    version: 12,
    name: 'bytes of log lines per org',
    // What each org's lines take (text and labels, see LINE_BYTES in logs-sql.ts), as rows of
    // changes: each write of lines adds a row and each removal a negative one, so that no writer
    // waits on another's lock; the cap's pass sums them and folds them into one row per org.
    sql: {
      sqlite: `
        CREATE TABLE log_lines_usage (org TEXT NOT NULL, bytes INTEGER NOT NULL);
        CREATE INDEX log_lines_usage_org ON log_lines_usage (org);
        INSERT INTO log_lines_usage (org, bytes)
          SELECT org, SUM(length(CAST(line AS BLOB)) + length(CAST(gvc AS BLOB)) + length(CAST(workload AS BLOB)) + length(CAST(location AS BLOB))
            + length(CAST(container AS BLOB)) + length(CAST(replica AS BLOB)) + length(CAST(volumeset AS BLOB))) FROM log_lines GROUP BY org;`,
      postgres: `
        CREATE TABLE log_lines_usage (org TEXT NOT NULL, bytes BIGINT NOT NULL);
        CREATE INDEX log_lines_usage_org ON log_lines_usage (org);
        INSERT INTO log_lines_usage (org, bytes)
          SELECT org, SUM(octet_length(line) + octet_length(gvc) + octet_length(workload) + octet_length(location)
            + octet_length(container) + octet_length(replica) + octet_length(volumeset)) FROM log_lines GROUP BY org;`,
    },
  },
  {
    version: 13,
    name: 'sign-in records of people',
    // What signing people in keeps between requests, by what it is and its key: invitations,
    // directory passwords, device and authorization codes, Keel's token signing key (see
    // auth/sign-in-records.ts). `expires` is milliseconds since the epoch (0: never); an expired
    // record reads as absent and is removed when next written or taken.
    sql: {
      sqlite: `
        CREATE TABLE signin_records (
          what TEXT NOT NULL, key TEXT NOT NULL, data TEXT NOT NULL, expires INTEGER NOT NULL,
          PRIMARY KEY (what, key)
        ) WITHOUT ROWID;`,
      postgres: `
        CREATE TABLE signin_records (
          what TEXT NOT NULL, key TEXT NOT NULL, data TEXT NOT NULL, expires BIGINT NOT NULL,
          PRIMARY KEY (what, key)
        );`,
    },
  },
  {
    version: 14,
    name: 'replica tokens (CPLN_TOKEN)',
    // A running replica's token, by the SHA-256 of the token (the token itself is never stored):
    // whose identity it acts as, and which replica of which data directory (scope) holds it, so
    // the replica's teardown, or the next start of that runtime, deletes it.
    sql: {
      sqlite: `
        CREATE TABLE replica_tokens (
          token_hash TEXT PRIMARY KEY, org TEXT NOT NULL, gvc TEXT NOT NULL, identity TEXT NOT NULL,
          scope TEXT NOT NULL, replica TEXT NOT NULL, created TEXT NOT NULL
        );
        CREATE INDEX replica_tokens_replica ON replica_tokens (scope, replica);`,
      postgres: `
        CREATE TABLE replica_tokens (
          token_hash TEXT PRIMARY KEY, org TEXT NOT NULL, gvc TEXT NOT NULL, identity TEXT NOT NULL,
          scope TEXT NOT NULL, replica TEXT NOT NULL, created TEXT NOT NULL
        );
        CREATE INDEX replica_tokens_replica ON replica_tokens (scope, replica);`,
    },
  },
  {
    version: 15,
    name: 'change feed of the read cache',
    // PostgreSQL only: every committed transaction that changes items takes the next place in one
    // total order (keel_cache_epoch.n, taken at commit by a deferred trigger, so a writer holds that
    // row only while it commits, never while it holds an item's lock, and the order is the commit
    // order), and leaves a row per item it touched in keel_cache_changes. The first firing in a
    // transaction takes the place; the others reuse it (a bulk change costs one bump, not one per
    // row). A process's read cache catches up by reading the position and the rows after its own in
    // one statement (postgres/read-cache.ts). A row naming no item (a TRUNCATE) drops everything.
    sql: {
      sqlite: `SELECT 1;`,
      postgres: `
        CREATE TABLE keel_cache_epoch (one BOOLEAN PRIMARY KEY DEFAULT true CHECK (one), n BIGINT NOT NULL, pruned BIGINT NOT NULL);
        INSERT INTO keel_cache_epoch VALUES (true, 0, 0);
        CREATE TABLE keel_cache_changes (n BIGINT NOT NULL, org TEXT, kind TEXT, gvc TEXT, name TEXT);
        CREATE INDEX keel_cache_changes_n ON keel_cache_changes (n);
        CREATE FUNCTION keel_cache_note() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE pos BIGINT;
        BEGIN
          pos := NULLIF(current_setting('keel.cache_n', true), '')::bigint;
          IF pos IS NULL THEN
            UPDATE keel_cache_epoch SET n = n + 1 RETURNING n INTO pos;
            PERFORM set_config('keel.cache_n', pos::text, true);
          END IF;
          IF TG_OP = 'TRUNCATE' THEN
            INSERT INTO keel_cache_changes (n) VALUES (pos);
          ELSE
            IF TG_OP <> 'INSERT' THEN INSERT INTO keel_cache_changes VALUES (pos, OLD.org, OLD.kind, OLD.gvc, OLD.name); END IF;
            IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND (OLD.org, OLD.kind, OLD.gvc, OLD.name) IS DISTINCT FROM (NEW.org, NEW.kind, NEW.gvc, NEW.name)) THEN
              INSERT INTO keel_cache_changes VALUES (pos, NEW.org, NEW.kind, NEW.gvc, NEW.name);
            END IF;
          END IF;
          RETURN NULL;
        END $$;
        CREATE CONSTRAINT TRIGGER keel_cache_resources AFTER INSERT OR UPDATE OR DELETE ON resources DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION keel_cache_note();
        CREATE TRIGGER keel_cache_resources_truncate AFTER TRUNCATE ON resources FOR EACH STATEMENT EXECUTE FUNCTION keel_cache_note();`,
    },
  },
  {
    version: 16,
    name: 'keys in the change feed of the read cache',
    // PostgreSQL only: a removed (or changed) service-account key or replica token takes its place in
    // the same order as item changes and leaves a row naming its org and no kind, so every process's
    // catch-up forgets the org's verified tokens before the requests waiting on it are authenticated
    // (postgres/read-cache.ts). A new key or token needs no row: no process holds it yet.
    sql: {
      sqlite: `SELECT 1;`,
      postgres: `
        CREATE FUNCTION keel_cache_note_key() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE pos BIGINT;
        BEGIN
          pos := NULLIF(current_setting('keel.cache_n', true), '')::bigint;
          IF pos IS NULL THEN
            UPDATE keel_cache_epoch SET n = n + 1 RETURNING n INTO pos;
            PERFORM set_config('keel.cache_n', pos::text, true);
          END IF;
          IF TG_OP = 'TRUNCATE' THEN
            INSERT INTO keel_cache_changes (n) VALUES (pos);
          ELSE
            INSERT INTO keel_cache_changes (n, org) VALUES (pos, OLD.org);
          END IF;
          RETURN NULL;
        END $$;
        CREATE CONSTRAINT TRIGGER keel_cache_keys AFTER UPDATE OR DELETE ON service_account_keys DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION keel_cache_note_key();
        CREATE TRIGGER keel_cache_keys_truncate AFTER TRUNCATE ON service_account_keys FOR EACH STATEMENT EXECUTE FUNCTION keel_cache_note_key();
        CREATE CONSTRAINT TRIGGER keel_cache_replica_tokens AFTER UPDATE OR DELETE ON replica_tokens DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION keel_cache_note_key();
        CREATE TRIGGER keel_cache_replica_tokens_truncate AFTER TRUNCATE ON replica_tokens FOR EACH STATEMENT EXECUTE FUNCTION keel_cache_note_key();`,
    },
  },
  {
    version: 17,
    name: 'audit chain changes in the change feed of the read cache',
    // PostgreSQL only: an org's chain head moves only when a seal chains events that waited in
    // audit_pending, so an event entering audit_pending takes a place in the read cache's order too
    // (and audit_heads rows added or removed other than by a seal, as a restore does). A catch-up
    // that finds the position unmoved then knows every head it read at that position still holds,
    // and reads only the position (postgres/read-cache.ts). Such a place leaves no row in
    // keel_cache_changes: no item changed. The position-taking lines that migrations 15 and 16
    // each repeated become one function the three trigger functions share.
    sql: {
      sqlite: `SELECT 1;`,
      postgres: `
        CREATE FUNCTION keel_cache_position() RETURNS BIGINT LANGUAGE plpgsql AS $$
        DECLARE pos BIGINT;
        BEGIN
          pos := NULLIF(current_setting('keel.cache_n', true), '')::bigint;
          IF pos IS NULL THEN
            UPDATE keel_cache_epoch SET n = n + 1 RETURNING n INTO pos;
            PERFORM set_config('keel.cache_n', pos::text, true);
          END IF;
          RETURN pos;
        END $$;
        CREATE OR REPLACE FUNCTION keel_cache_note() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE pos BIGINT := keel_cache_position();
        BEGIN
          IF TG_OP = 'TRUNCATE' THEN
            INSERT INTO keel_cache_changes (n) VALUES (pos);
          ELSE
            IF TG_OP <> 'INSERT' THEN INSERT INTO keel_cache_changes VALUES (pos, OLD.org, OLD.kind, OLD.gvc, OLD.name); END IF;
            IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND (OLD.org, OLD.kind, OLD.gvc, OLD.name) IS DISTINCT FROM (NEW.org, NEW.kind, NEW.gvc, NEW.name)) THEN
              INSERT INTO keel_cache_changes VALUES (pos, NEW.org, NEW.kind, NEW.gvc, NEW.name);
            END IF;
          END IF;
          RETURN NULL;
        END $$;
        CREATE OR REPLACE FUNCTION keel_cache_note_key() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE pos BIGINT := keel_cache_position();
        BEGIN
          IF TG_OP = 'TRUNCATE' THEN
            INSERT INTO keel_cache_changes (n) VALUES (pos);
          ELSE
            INSERT INTO keel_cache_changes (n, org) VALUES (pos, OLD.org);
          END IF;
          RETURN NULL;
        END $$;
        CREATE FUNCTION keel_cache_note_chain() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          PERFORM keel_cache_position();
          RETURN NULL;
        END $$;
        CREATE CONSTRAINT TRIGGER keel_cache_audit_pending AFTER INSERT ON audit_pending DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION keel_cache_note_chain();
        CREATE CONSTRAINT TRIGGER keel_cache_audit_heads AFTER INSERT OR DELETE ON audit_heads DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION keel_cache_note_chain();
        CREATE TRIGGER keel_cache_audit_heads_truncate AFTER TRUNCATE ON audit_heads FOR EACH STATEMENT EXECUTE FUNCTION keel_cache_note_chain();`,
    },
  },
  {
    version: 18,
    name: 'read leases',
    // PostgreSQL only: a process holding a read lease answers reads from its cache without asking
    // the database for its position, and a writer answers only once every live lease has applied
    // its change (postgres/leases.ts). A transaction taking a position now tells the listening
    // processes at commit (the payload names the schema: channels are per database), so they catch
    // up at once instead of at their next read. Leases are unlogged: after a crash of the database
    // every process has lost its connection, and with it its lease, anyway.
    sql: {
      sqlite: `SELECT 1;`,
      postgres: `
        CREATE UNLOGGED TABLE keel_cache_leases (id TEXT PRIMARY KEY, applied BIGINT NOT NULL, expires TIMESTAMPTZ NOT NULL);
        CREATE FUNCTION keel_cache_notice() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          PERFORM pg_notify('keel_cache', current_schema());
          RETURN NULL;
        END $$;
        CREATE TRIGGER keel_cache_notice AFTER UPDATE OF n ON keel_cache_epoch FOR EACH ROW WHEN (NEW.n <> OLD.n) EXECUTE FUNCTION keel_cache_notice();`,
    },
  },
];
