import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { parseIssuers, type TrustedIssuer } from './auth/issuers.js';

export interface Config {
  host: string;
  port: number;
  auditPort: number;
  dataDir: string;
  /** The base URL clients reach the Core API at (discovery, status.remote, CORS); unset: a trusted Host header, else the listen address. */
  publicUrl?: string;
  /** postgres://… selects PostgreSQL; empty means SQLite in dataDir. */
  databaseUrl?: string;
  /** On PostgreSQL, the estimated MB of items each process holds in its read cache at most (0 turns it off). */
  readCacheMb: number;
  /** On PostgreSQL, how long a read lease lasts in ms (0: every read asks the database for its position). */
  readLeaseMs: number;
  /** The org created on first start. */
  org: string;
  logLevel: string;
  /** Which requests get a log line: `errors` (answers of 400 and above, and slow ones), `all` or `off`. */
  accessLog: 'errors' | 'all' | 'off';
  /** With accessLog `errors`, a request answered after this many milliseconds is logged too. */
  slowRequestMs: number;
  /** Largest accepted request body, in bytes. */
  bodyLimit: number;
  /** Largest `?limit=` a list, query or audit page accepts. */
  maxPageSize: number;
  /** Requests per second each principal (or, before authentication, each address) may make; 0 turns it off. */
  rateLimit: number;
  /** How many requests above the rate a principal may burst. */
  rateBurst: number;
  /** Requests open at once (receiving their body, waiting for a seat or running); more are refused with 503 until some finish. */
  maxInFlight: number;
  /** A request still unanswered after this long gets 503. */
  requestTimeoutMs: number;
  /** On SIGTERM, how long in-flight requests get to finish. */
  shutdownTimeoutMs: number;
  /** A request whose headers and body have not all arrived after this long gets 408 and its connection is closed. */
  bodyTimeoutMs: number;
  /** Requests one principal (or, before authentication, one address) may have in flight at once. */
  maxInFlightPerPrincipal: number;
  /** Requests one principal may have whose body is still arriving; more are refused with 429 before their body is read. */
  maxBodiesPerPrincipal: number;
  /** The same for a caller that presents no valid credential, counted by its address (its small share). */
  maxBodiesPerAddress: number;
  /** Longest a list or query may run in the database before it is refused (400). */
  queryBudgetMs: number;
  /** Seats of each priority level (changes; item reads; lists and queries; history, audit and log reads and replays), server-wide, and what one principal may have waiting for one (see server/fairness.ts). */
  maxMutationsInFlight: number;
  mutationsQueuedPerPrincipal: number;
  maxReadsInFlight: number;
  readsQueuedPerPrincipal: number;
  maxListsInFlight: number;
  listsQueuedPerPrincipal: number;
  maxLongReadsInFlight: number;
  longReadsQueuedPerPrincipal: number;
  shortReadSeats: number;
  heavyReadSeats: number;
  /** Failed authentications per minute each source address may make (429 above); 0 turns it off. */
  authFailureLimit: number;
  /** Who may create orgs through the API: `superusers` (of the first org), `anyone`, principal links and emails. */
  orgCreators: string[];
  /** Orgs one principal may hold as a superuser and still create another through the API (0 = no limit). */
  maxOrgsPerPrincipal: number;
  /** Record an audit event with every change (off only to measure its cost). */
  audit: boolean;
  /** Audit retention: events older than this many days, or beyond this many per org, are pruned (0 = keep). */
  auditMaxAgeDays: number;
  auditMaxEvents: number;
  /** Log lines older than this many days are removed (0 = keep; an org's shorter logsRetentionDays wins). */
  logsMaxAgeDays: number;
  /** Time one logs read may spend matching lines against its query (400 above). */
  logsQueryBudgetMs: number;
  /** Bytes of output a replica's lines may bring into the logs each second; the rest is dropped and counted (runc). */
  logBytesPerSecond: number;
  /** Bytes of log lines an org keeps at most; its oldest lines go first. */
  logMaxBytesPerOrg: number;
  /** Bytes a replica may write into its root filesystem and scratch volumes together (runc; ENOSPC above). */
  replicaDiskBytes: number;
  /** Identity providers whose JWTs are accepted. */
  jwtIssuers?: TrustedIssuer[];
  /** Lifetime of the access tokens Keel issues to people (KEEL_USER_TOKEN_TTL, default 12h). */
  userTokenTtlMs: number;
  /** Lifetime of a device code of `keel login` (KEEL_DEVICE_CODE_TTL, default 10m). */
  deviceCodeTtlMs: number;
  /** An upstream OpenID provider proves who people are instead of Keel's directory (all three set). */
  oidcIssuer?: string;
  oidcClientId?: string;
  oidcClientSecret?: string;
  // The reconcilers (living resources): absent in an embedding config (tests) means off, so a test drives them itself.
  /** Run the reconcilers that fill status (KEEL_RECONCILE, default on). */
  reconcile?: boolean;
  /** Duration of one simulated lifecycle step in ms (KEEL_RECONCILE_SPEED, default 1000). */
  reconcileStepMs?: number;
  /** What runs workloads' replicas (KEEL_RUNTIME): the simulation, or runc containers on this host (docs/runtime.md). */
  runtime: 'simulated' | 'runc';
  /** The port workload traffic is served on, with KEEL_RUNTIME=runc (KEEL_INGRESS_PORT). */
  ingressPort: number;
  /** Client connections the ingress keeps open at once (KEEL_INGRESS_MAX_CONNECTIONS); more are closed as they come. */
  ingressMaxConnections: number;
  /** The least time between two HAProxy reloads (KEEL_HAPROXY_RELOAD_MIN_MS); changes in between are gathered into the next. */
  haproxyReloadMinMs: number;
  /** The longest grace period a stopping replica gets under the runc runtime, whatever its workload asks (KEEL_MAX_TERMINATION_GRACE_SECONDS). */
  maxTerminationGraceSeconds: number;
  /** What serves the ingress port (KEEL_INGRESS_PROXY): Keel's own ingress, or HAProxy in front of it. */
  ingressProxy: 'keel' | 'haproxy';
  /** Whether workloads' firewallConfig is applied with KEEL_RUNTIME=runc (KEEL_FIREWALL): enforce, or open for demos. */
  firewall: 'enforce' | 'open';
  /** The private IPv4 range replicas' network namespaces take addresses from (KEEL_RUNTIME_SUBNET). */
  runtimeSubnet: string;
  /** Terminal sessions (exec, connect, cp) one principal may have open at once on one process. */
  terminalSessionsPerPrincipal: number;
  /** Terminal sessions all principals together may have open at once on one process. */
  maxTerminalSessions: number;
  /** A quiet watch gets a bookmark event carrying its position this often. */
  watchBookmarkMs: number;
  /** Watch streams one principal may hold open at once on one process (429 above). */
  watchStreamsPerPrincipal: number;
  /** Watches of one principal that may replay stored history at once (429 above). */
  watchReplaysPerPrincipal: number;
  /** Bytes a watch may have waiting for a slow client; past them nothing more is written until the client takes them. */
  watchBufferBytes: number;
  /** How long a watch client may stay more than watchBufferBytes behind before it is disconnected with its position. */
  watchBehindMs: number;
  /** Bytes all watch streams of a process together may hold for clients that have not read them. */
  watchBufferTotalBytes: number;
  // Keel for CI and local development (docs/ci.md).
  /** The first org's superuser key, fixed instead of minted (KEEL_ADMIN_KEY; checked when the server starts). */
  adminKey?: string;
  /** A file or directory of `cpln apply` documents applied on every start (KEEL_INIT). */
  init?: string;
  /** POST /-admin/reset and `keel reset` work (KEEL_ALLOW_RESET=on). */
  allowReset?: boolean;
  /** The snapshot routes and `keel snapshot` work (KEEL_ALLOW_SNAPSHOTS=on). */
  allowSnapshots?: boolean;
  /** POST /-admin/sandboxes and the create_sandbox tool work (KEEL_ALLOW_SANDBOXES=on). */
  allowSandboxes?: boolean;
  /** Sandbox orgs that may exist at once (KEEL_MAX_SANDBOXES). */
  maxSandboxes: number;
  /** Longest TTL a sandbox may be given, in seconds (KEEL_SANDBOX_MAX_TTL). */
  sandboxMaxTtlSeconds: number;
  /** Largest blob the registry accepts, in bytes (KEEL_REGISTRY_MAX_BLOB_BYTES). */
  registryMaxBlobBytes: number;
  /** Bytes of PostgreSQL registry content each process keeps on local disk (KEEL_REGISTRY_CACHE_BYTES; 0 = none). */
  registryCacheBytes: number;
  /** Bytes of registry content and upload sessions each org may hold (KEEL_REGISTRY_MAX_BYTES_PER_ORG). */
  registryMaxBytesPerOrg: number;
  /** Open registry upload sessions per principal (KEEL_REGISTRY_MAX_UPLOADS). */
  registryMaxUploads: number;
  /** A registry upload session untouched this long is dropped with its bytes (KEEL_REGISTRY_UPLOAD_IDLE_MS). */
  registryUploadIdleMs: number;
  /** Fault injection: the /-admin/faults rules and their request hook (KEEL_FAULTS=on). */
  faults?: boolean;
  /** A JSON or YAML file of fault rules loaded at start (KEEL_FAULTS_FILE; needs KEEL_FAULTS=on). */
  faultsFile?: string;
}

type Parser<T> = (value: unknown, name: string) => T;

const text: Parser<string> = (v, name) => {
  if (typeof v !== 'string' || v === '') throw new Error(`${name} must be a non-empty string`);
  return v;
};
const whole = (min: number, max: number): Parser<number> => (v, name) => {
  const n = typeof v === 'number' ? v : typeof v === 'string' && /^\d+$/.test(v.trim()) ? Number(v) : NaN;
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`${name} must be a whole number from ${min} to ${max}, got '${String(v)}'`);
  return n;
};
/** 0 (off), or a whole number from `min` to `max`. */
const offOr = (min: number, max: number): Parser<number> => (v, name) => {
  const n = whole(0, max)(v, name);
  if (n !== 0 && n < min) throw new Error(`${name} must be 0 (off) or a whole number from ${min} to ${max}, got '${String(v)}'`);
  return n;
};
const oneOf = (values: string[]): Parser<string> => (v, name) => {
  if (typeof v !== 'string' || !values.includes(v)) throw new Error(`${name} must be one of ${values.join(', ')}, got '${String(v)}'`);
  return v;
};
/** An IPv4 prefix of 8 to 28 bits given by its network address (`10.213.0.0/16`). */
const subnet: Parser<string> = (v, name) => {
  const s = text(v, name).trim();
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/.exec(s);
  const octets = m ? m.slice(1, 5).map(Number) : [];
  const bits = m ? Number(m[5]) : NaN;
  if (!m || octets.some((o) => o > 255) || !(bits >= 8 && bits <= 28)) throw new Error(`${name} must be an IPv4 prefix from /8 to /28 such as 10.213.0.0/16, got '${s}'`);
  const address = octets.reduce((a, o) => a * 256 + o, 0);
  if (address % 2 ** (32 - bits) !== 0) throw new Error(`${name} must name the network's first address (${s} has host bits set)`);
  return s;
};
const onOff: Parser<boolean> = (v, name) => (typeof v === 'boolean' ? v : oneOf(['on', 'off'])(v, name) === 'on');
const orgName: Parser<string> = (v, name) => {
  const s = text(v, name);
  if (!/^[a-z]([-a-z0-9])*[a-z0-9]$/.test(s) || s.length > 64) throw new Error(`${name} '${s}' is not a valid org name (lowercase letters, digits and '-', 2 to 64 characters)`);
  return s;
};
const databaseUrl: Parser<string> = (v, name) => {
  const s = typeof v === 'string' ? v : text(v, name);
  if (s !== '' && !/^postgres(ql)?:\/\//.test(s)) throw new Error(`${name} must be a postgres:// URL (or empty for SQLite), got '${s}'`);
  return s;
};
/** An http(s) URL of a host (and port, and perhaps a path prefix), kept without a trailing slash. */
const publicUrl: Parser<string> = (v, name) => {
  const s = text(v, name).trim();
  let url: URL;
  try {
    url = new URL(s);
  } catch {
    throw new Error(`${name} must be an http:// or https:// URL, got '${s}'`);
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.username || url.password || url.search || url.hash) {
    throw new Error(`${name} must be an http:// or https:// URL without credentials, query or fragment, got '${s}'`);
  }
  return `${url.origin}${url.pathname.replace(/\/+$/, '')}`;
};
/** A comma-separated list (or a config file's array) of `superusers`, `anyone`, principal links (/org/O/serviceaccount/S) and emails. */
const creators: Parser<string[]> = (v, name) => {
  const items = (Array.isArray(v) ? v : text(v, name).split(',')).map((x) => String(x).trim()).filter(Boolean);
  const bad = items.find((x) => x !== 'superusers' && x !== 'anyone' && !/^\/org\/[^/]+\/(serviceaccount|user)\/[^/]+$/.test(x) && !/^[^@\s/]+@[^@\s/]+$/.test(x));
  if (items.length === 0 || bad !== undefined) throw new Error(`${name} must list superusers, anyone, principal links (/org/ORG/serviceaccount/NAME) or emails, got '${bad ?? String(v)}'`);
  return items;
};
/** A duration as `90s`, `10m`, `12h`, `7d` or a number of seconds, in milliseconds. */
const duration = (min: number, max: number): Parser<number> => (v, name) => {
  const m = /^(\d+)(s|m|h|d)?$/.exec(String(v).trim());
  const ms = m ? Number(m[1]) * { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[(m[2] ?? 's') as 's'] : NaN;
  if (!(ms >= min && ms <= max)) throw new Error(`${name} must be a duration such as 90s, 10m or 12h, from ${min / 1000}s to ${max / 1000}s, got '${String(v)}'`);
  return ms;
};
const issuers: Parser<TrustedIssuer[]> = (v, name) => parseIssuers(typeof v === 'string' ? v : JSON.stringify(v), name);

interface Option<K extends keyof Config = keyof Config> {
  key: K;
  env: string;
  flag: string;
  describe: string;
  parse: Parser<Config[K]>;
}

function option<K extends keyof Config>(key: K, env: string, flag: string, parse: Parser<Config[K]>, describe: string): Option {
  return { key, env, flag, parse, describe } as unknown as Option;
}

/** Every setting, by config-file key, environment variable and flag. */
export const OPTIONS: Option[] = [
  option('host', 'KEEL_HOST', '--host', text, 'address both APIs listen on'),
  option('port', 'KEEL_PORT', '--port', whole(0, 65535), 'Core API port'),
  option('auditPort', 'KEEL_AUDIT_PORT', '--audit-port', whole(0, 65535), 'Audit API port (/discovery endpoints.audit)'),
  option('publicUrl', 'KEEL_PUBLIC_URL', '--public-url', publicUrl, 'the URL clients reach the Core API at (discovery, status.remote, CORS); unset: a loopback or listen-address Host, else the listen address'),
  option('dataDir', 'KEEL_DATA_DIR', '--data-dir', text, 'SQLite file (keel.db) and admin.token'),
  option('databaseUrl', 'KEEL_DATABASE_URL', '--database-url', databaseUrl, 'a postgres:// URL selects PostgreSQL; several Keel processes may share it'),
  option('readCacheMb', 'KEEL_READ_CACHE_MB', '--read-cache-mb', whole(0, 1_000_000), 'on PostgreSQL: estimated MB of items held in the read cache at most, the least recently read dropped first (0 turns it off; see docs/storage.md)'),
  // A lease shorter than the margin a process keeps (100 ms) and its renewals would never hold.
  option('readLeaseMs', 'KEEL_READ_LEASE_MS', '--read-lease-ms', offOr(300, 60_000), 'on PostgreSQL: reads come from the cache with no round trip while a lease of this many ms holds (300 to 60000), and writes wait for every live lease (0: every read asks the database; see docs/storage.md)'),
  option('org', 'KEEL_ORG', '--org', orgName, 'org created on the first start of an empty store'),
  option('logLevel', 'KEEL_LOG_LEVEL', '--log-level', oneOf(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']), 'log level (JSON lines on stdout)'),
  option('accessLog', 'KEEL_ACCESS_LOG', '--access-log', oneOf(['errors', 'all', 'off']) as Parser<Config['accessLog']>, 'request lines: errors (status >= 400, and slow requests), all, or off'),
  option('slowRequestMs', 'KEEL_SLOW_REQUEST_MS', '--slow-request-ms', whole(1, 3_600_000), 'with --access-log errors, requests slower than this are logged too'),
  option('bodyLimit', 'KEEL_BODY_LIMIT', '--body-limit', whole(1024, 64 * 1024 * 1024), 'largest request body in bytes (413 above)'),
  option('maxPageSize', 'KEEL_MAX_PAGE_SIZE', '--max-page-size', whole(1, 10_000), 'largest ?limit= of a page'),
  option('rateLimit', 'KEEL_RATE_LIMIT', '--rate-limit', whole(0, 1_000_000), 'requests per second per key (0 = unlimited; 429 above)'),
  option('rateBurst', 'KEEL_RATE_BURST', '--rate-burst', whole(0, 10_000_000), 'requests a key may make at once above its rate'),
  option('maxInFlight', 'KEEL_MAX_IN_FLIGHT', '--max-in-flight', whole(1, 1_000_000), 'requests open at once, receiving their body, queued or running (503 above)'),
  option('requestTimeoutMs', 'KEEL_REQUEST_TIMEOUT_MS', '--request-timeout-ms', whole(100, 3_600_000), 'a request unanswered after this gets 503'),
  option('shutdownTimeoutMs', 'KEEL_SHUTDOWN_TIMEOUT_MS', '--shutdown-timeout-ms', whole(0, 600_000), 'on SIGTERM, time given to in-flight requests'),
  option('bodyTimeoutMs', 'KEEL_BODY_TIMEOUT_MS', '--body-timeout-ms', whole(100, 3_600_000), 'a request whose headers and body take longer to arrive gets 408'),
  option('maxInFlightPerPrincipal', 'KEEL_MAX_IN_FLIGHT_PER_PRINCIPAL', '--max-in-flight-per-principal', whole(1, 1_000_000), 'requests one key, user or address may have in flight (503 above)'),
  option('maxBodiesPerPrincipal', 'KEEL_MAX_BODIES_PER_PRINCIPAL', '--max-bodies-per-principal', whole(1, 1_000_000), 'requests one key or user may have whose body is still arriving (429 above)'),
  option('maxBodiesPerAddress', 'KEEL_MAX_BODIES_PER_ADDRESS', '--max-bodies-per-address', whole(1, 1_000_000), 'requests without a valid credential one address may have whose body is still arriving (429 above)'),
  option('queryBudgetMs', 'KEEL_QUERY_BUDGET_MS', '--query-budget-ms', whole(10, 3_600_000), 'a list or query running longer in the database is refused (400)'),
  option('maxMutationsInFlight', 'KEEL_MAX_MUTATIONS_IN_FLIGHT', '--max-mutations-in-flight', whole(1, 1_000_000), 'creates, changes and deletes running at once; more wait, shared fairly among principals'),
  option('mutationsQueuedPerPrincipal', 'KEEL_MUTATIONS_QUEUED_PER_PRINCIPAL', '--mutations-queued-per-principal', whole(0, 1_000_000), 'changes one principal may have waiting for a seat (429 above)'),
  option('maxReadsInFlight', 'KEEL_MAX_READS_IN_FLIGHT', '--max-reads-in-flight', whole(1, 1_000_000), 'item reads running at once; more wait, shared fairly among principals'),
  option('readsQueuedPerPrincipal', 'KEEL_READS_QUEUED_PER_PRINCIPAL', '--reads-queued-per-principal', whole(0, 1_000_000), 'item reads one principal may have waiting for a seat (429 above)'),
  option('maxListsInFlight', 'KEEL_MAX_LISTS_IN_FLIGHT', '--max-lists-in-flight', whole(1, 10_000), 'lists and queries running at once; more wait, shared fairly among principals'),
  option('listsQueuedPerPrincipal', 'KEEL_LISTS_QUEUED_PER_PRINCIPAL', '--lists-queued-per-principal', whole(0, 1_000_000), 'lists and queries one principal may have waiting for a seat (429 above)'),
  option('maxLongReadsInFlight', 'KEEL_MAX_LONG_READS_IN_FLIGHT', '--max-long-reads-in-flight', whole(1, 10_000), 'history, audit and log reads and watch replay reads running at once; more wait, shared fairly among principals'),
  option('shortReadSeats', 'KEEL_SHORT_READ_SEATS', '--short-read-seats', whole(0, 10_000), 'seats besides those, in each of the two levels above, kept for short work (of a principal whose work there usually takes at most half the mean of those asking): a quick list is not queued behind heavy queries, nor a history page behind replays'),
  option('heavyReadSeats', 'KEEL_HEAVY_READ_SEATS', '--heavy-read-seats', whole(1, 10_000), 'of the seats of lists and of long reads, how many may hold heavy work at once (of a principal whose work there usually takes a quarter of queryBudgetMs or more): the others take lighter work, and a core stays for everyone else'),
  option('longReadsQueuedPerPrincipal', 'KEEL_LONG_READS_QUEUED_PER_PRINCIPAL', '--long-reads-queued-per-principal', whole(0, 1_000_000), 'long reads one principal may have waiting for a seat (429 above)'),
  option('authFailureLimit', 'KEEL_AUTH_FAILURE_LIMIT', '--auth-failure-limit', whole(0, 1_000_000), 'failed authentications per minute per address (0 = unlimited; 429 above)'),
  option('orgCreators', 'KEEL_ORG_CREATORS', '--org-creators', creators, 'who may POST /org: superusers (of the first org), anyone, principal links, emails'),
  option('maxOrgsPerPrincipal', 'KEEL_MAX_ORGS_PER_PRINCIPAL', '--max-orgs-per-principal', whole(0, 1_000_000), 'a principal superuser of this many orgs may create no more (0 = no limit)'),
  option('audit', 'KEEL_AUDIT', '--audit', onOff, 'on/off: record an audit event with every change'),
  option('auditMaxAgeDays', 'KEEL_AUDIT_MAX_AGE_DAYS', '--audit-max-age-days', whole(0, 100_000), 'prune audit events older than this (0 = keep)'),
  option('auditMaxEvents', 'KEEL_AUDIT_MAX_EVENTS', '--audit-max-events', whole(0, 1_000_000_000), 'keep at most this many audit events per org (0 = all)'),
  option('logsMaxAgeDays', 'KEEL_LOGS_MAX_AGE_DAYS', '--logs-max-age-days', whole(0, 100_000), 'remove log lines older than this (0 = keep; see docs/logs.md)'),
  option('logsQueryBudgetMs', 'KEEL_LOGS_QUERY_BUDGET_MS', '--logs-query-budget-ms', whole(10, 3_600_000), 'time one logs read may spend matching lines against its query (400 above)'),
  option('logBytesPerSecond', 'KEEL_LOG_BYTES_PER_SECOND', '--log-bytes-per-second', whole(1024, Number.MAX_SAFE_INTEGER), "with --runtime runc: bytes of a replica's output taken into its logs each second; the rest is dropped and counted in one line a second (see docs/logs.md)"),
  option('logMaxBytesPerOrg', 'KEEL_LOG_MAX_BYTES_PER_ORG', '--log-max-bytes-per-org', whole(65_536, Number.MAX_SAFE_INTEGER), "bytes of log lines (text and labels) an org keeps; past it its oldest lines are removed"),
  option('replicaDiskBytes', 'KEEL_REPLICA_DISK_BYTES', '--replica-disk-bytes', whole(16 * 1024 * 1024, Number.MAX_SAFE_INTEGER), "with --runtime runc: bytes a replica may write into its root filesystem and scratch volumes together (the replica gets ENOSPC past it; see docs/runtime.md)"),
  option('jwtIssuers', 'KEEL_JWT_ISSUERS', '--jwt-issuers', issuers, 'JSON array of trusted JWT issuers (see Authentication)'),
  option('userTokenTtlMs', 'KEEL_USER_TOKEN_TTL', '--user-token-ttl', duration(10_000, 90 * 86_400_000), 'lifetime of the access tokens Keel issues to people (keel login, console sign-in), e.g. 12h'),
  option('deviceCodeTtlMs', 'KEEL_DEVICE_CODE_TTL', '--device-code-ttl', duration(10_000, 86_400_000), 'how long the code keel login prints may be confirmed, e.g. 10m'),
  option('oidcIssuer', 'KEEL_OIDC_ISSUER', '--oidc-issuer', publicUrl, "an upstream OpenID provider's issuer URL: people sign in there instead of with Keel's own passwords (see docs/auth.md)"),
  option('oidcClientId', 'KEEL_OIDC_CLIENT_ID', '--oidc-client-id', text, "Keel's client id at the upstream OpenID provider"),
  option('oidcClientSecret', 'KEEL_OIDC_CLIENT_SECRET', '--oidc-client-secret', text, "Keel's client secret at the upstream OpenID provider"),
  option('reconcile', 'KEEL_RECONCILE', '--reconcile', onOff, 'on/off: run the reconcilers that fill status (default on; see Living resources)'),
  option('watchBookmarkMs', 'KEEL_WATCH_BOOKMARK_MS', '--watch-bookmark-ms', whole(10, 3_600_000), 'a quiet watch gets a bookmark event this often'),
  option('watchStreamsPerPrincipal', 'KEEL_WATCH_STREAMS_PER_PRINCIPAL', '--watch-streams-per-principal', whole(10, 1_000_000), 'open watch streams per principal (429 above)'),
  option('watchReplaysPerPrincipal', 'KEEL_WATCH_REPLAYS_PER_PRINCIPAL', '--watch-replays-per-principal', whole(1, 10_000), 'watches per principal replaying history at once (429 above)'),
  option('watchBufferBytes', 'KEEL_WATCH_BUFFER_BYTES', '--watch-buffer-bytes', whole(1024, 1024 * 1024 * 1024), 'bytes a watch stream writes ahead of its client; past them it waits for the client to read'),
  option('watchBehindMs', 'KEEL_WATCH_BEHIND_MS', '--watch-behind-ms', whole(100, 3_600_000), 'a watch client that stays watchBufferBytes behind this long is disconnected with its position'),
  option('watchBufferTotalBytes', 'KEEL_WATCH_BUFFER_TOTAL_BYTES', '--watch-buffer-total-bytes', whole(1024, 64 * 1024 * 1024 * 1024), 'bytes all watch streams together may hold for clients that do not read; over it the streams holding most are disconnected'),
  option('runtime', 'KEEL_RUNTIME', '--runtime', oneOf(['simulated', 'runc']) as Parser<Config['runtime']>, "what runs workloads: simulated (nothing runs) or runc (containers on this host, as root; see docs/runtime.md)"),
  option('ingressPort', 'KEEL_INGRESS_PORT', '--ingress-port', whole(0, 65535), 'port serving workload endpoints with --runtime runc'),
  option('maxTerminationGraceSeconds', 'KEEL_MAX_TERMINATION_GRACE_SECONDS', '--max-termination-grace-seconds', whole(0, 86_400), "with --runtime runc, the longest time in seconds a stopping replica gets between preStop and SIGKILL, whatever its workload's terminationGracePeriodSeconds (default 90) asks: a tenant's setting holds the host's resources no longer"),
  option('haproxyReloadMinMs', 'KEEL_HAPROXY_RELOAD_MIN_MS', '--haproxy-reload-min-ms', whole(0, 600_000), 'with --ingress-proxy haproxy, the least time in ms between two reloads of HAProxy; the changes of a flapping readiness probe in between are gathered into one reload'),
  option('ingressMaxConnections', 'KEEL_INGRESS_MAX_CONNECTIONS', '--ingress-max-connections', whole(1, 1_000_000), "client connections the ingress keeps open at once with --runtime runc; more are closed as they come, so workload traffic cannot take the file descriptors Keel's API needs"),
  option('ingressProxy', 'KEEL_INGRESS_PROXY', '--ingress-proxy', oneOf(['keel', 'haproxy']) as Parser<Config['ingressProxy']>, "with --runtime runc: keel (Keel's own ingress serves every request) or haproxy (HAProxy, started by Keel, sends workload endpoints' traffic straight to ready replicas and the rest to Keel's ingress; see docs/runtime.md)"),
  option('firewall', 'KEEL_FIREWALL', '--firewall', oneOf(['enforce', 'open']) as Parser<Config['firewall']>, "with --runtime runc: enforce (workloads' firewallConfig holds, as hosted: external inbound closed until inboundAllowCIDR opens it) or open (every endpoint open to every client and replica of the same org, for demos; another org's replicas stay unreachable; see docs/runtime.md)"),
  option('runtimeSubnet', 'KEEL_RUNTIME_SUBNET', '--runtime-subnet', subnet, "private IPv4 range for replicas' network namespaces with --runtime runc"),
  option('terminalSessionsPerPrincipal', 'KEEL_TERMINAL_SESSIONS_PER_PRINCIPAL', '--terminal-sessions-per-principal', whole(1, 100_000), 'open terminal sessions (exec, connect, cp) per principal with --runtime runc; more are refused'),
  option('maxTerminalSessions', 'KEEL_MAX_TERMINAL_SESSIONS', '--max-terminal-sessions', whole(1, 1_000_000), 'open terminal sessions (exec, connect, cp) of all principals together with --runtime runc; more are refused'),
  option('reconcileStepMs', 'KEEL_RECONCILE_SPEED', '--reconcile-speed', whole(1, 3_600_000), 'ms per simulated lifecycle step of the reconcilers'),
  option('adminKey', 'KEEL_ADMIN_KEY', '--admin-key', text, "the first org's superuser key instead of a random one (keel key generate --org ORG prints one)"),
  option('init', 'KEEL_INIT', '--init', text, 'file or directory of cpln apply documents applied on every start'),
  option('allowReset', 'KEEL_ALLOW_RESET', '--allow-reset', onOff, 'on/off: allow keel reset and POST /-admin/reset'),
  option('allowSandboxes', 'KEEL_ALLOW_SANDBOXES', '--allow-sandboxes', onOff, "on/off: allow POST /-admin/sandboxes and the MCP create_sandbox tool (throw-away orgs; see docs/agents.md)"),
  option('maxSandboxes', 'KEEL_MAX_SANDBOXES', '--max-sandboxes', whole(1, 100_000), 'sandbox orgs that may exist at once (429 above)'),
  option('sandboxMaxTtlSeconds', 'KEEL_SANDBOX_MAX_TTL', '--sandbox-max-ttl', whole(60, 31_536_000), 'longest TTL of a sandbox in seconds (default 86400: a day)'),
  option('allowSnapshots', 'KEEL_ALLOW_SNAPSHOTS', '--allow-snapshots', onOff, 'on/off: allow keel snapshot and /-admin/snapshots (a restore rewinds every org; see docs/ci.md)'),
  option('registryMaxBlobBytes', 'KEEL_REGISTRY_MAX_BLOB_BYTES', '--registry-max-blob-bytes', whole(1024, Number.MAX_SAFE_INTEGER), 'largest blob (image layer) the registry accepts, in bytes (413 SIZE_INVALID above)'),
  option('registryCacheBytes', 'KEEL_REGISTRY_CACHE_BYTES', '--registry-cache-bytes', whole(0, Number.MAX_SAFE_INTEGER), 'with PostgreSQL: bytes of registry content each process keeps on local disk to serve pulls from (least recently used out first; 0 = no cache)'),
  option('registryMaxBytesPerOrg', 'KEEL_REGISTRY_MAX_BYTES_PER_ORG', '--registry-max-bytes-per-org', whole(1024, Number.MAX_SAFE_INTEGER), "bytes of registry content one org may hold, its unfinished uploads included (413 DENIED above)"),
  option('registryMaxUploads', 'KEEL_REGISTRY_MAX_UPLOADS', '--registry-max-uploads', whole(1, 100_000), 'open registry upload sessions per principal (429 TOOMANYREQUESTS above)'),
  option('registryUploadIdleMs', 'KEEL_REGISTRY_UPLOAD_IDLE_MS', '--registry-upload-idle-ms', whole(1000, 7 * 24 * 3_600_000), 'ms after which a registry upload session nobody wrote to is dropped with its bytes'),
  option('faults', 'KEEL_FAULTS', '--faults', onOff, 'on/off: fault injection (/-admin/faults)'),
  option('faultsFile', 'KEEL_FAULTS_FILE', '--faults-file', text, 'JSON or YAML file of fault rules loaded at start (with KEEL_FAULTS=on)'),
];

export const DEFAULTS: Config = {
  host: '127.0.0.1',
  port: 8080,
  auditPort: 8081,
  dataDir: './data',
  org: 'default',
  logLevel: 'info',
  accessLog: 'errors',
  slowRequestMs: 1000,
  bodyLimit: 1024 * 1024,
  maxPageSize: 1000,
  userTokenTtlMs: 12 * 3_600_000,
  deviceCodeTtlMs: 10 * 60_000,
  rateLimit: 0,
  rateBurst: 0,
  maxInFlight: 4096,
  requestTimeoutMs: 30_000,
  shutdownTimeoutMs: 10_000,
  bodyTimeoutMs: 30_000,
  maxInFlightPerPrincipal: 64,
  maxBodiesPerPrincipal: 16,
  maxBodiesPerAddress: 4,
  queryBudgetMs: 250,
  maxMutationsInFlight: 256,
  mutationsQueuedPerPrincipal: 32,
  maxReadsInFlight: 512,
  readsQueuedPerPrincipal: 32,
  maxListsInFlight: 2,
  listsQueuedPerPrincipal: 32,
  maxLongReadsInFlight: 2,
  longReadsQueuedPerPrincipal: 32,
  shortReadSeats: 1,
  heavyReadSeats: 1,
  authFailureLimit: 120,
  orgCreators: ['superusers'],
  maxOrgsPerPrincipal: 20,
  maxSandboxes: 100,
  sandboxMaxTtlSeconds: 86_400,
  readCacheMb: 64,
  readLeaseMs: 2000,
  audit: true,
  auditMaxAgeDays: 0,
  auditMaxEvents: 0,
  logsMaxAgeDays: 30,
  logsQueryBudgetMs: 1000,
  logBytesPerSecond: 256 * 1024,
  logMaxBytesPerOrg: 1024 * 1024 * 1024,
  replicaDiskBytes: 1024 * 1024 * 1024,
  reconcileStepMs: 1000,
  runtime: 'simulated',
  ingressPort: 8082,
  ingressMaxConnections: 4096,
  haproxyReloadMinMs: 2000,
  maxTerminationGraceSeconds: 900,
  ingressProxy: 'keel',
  firewall: 'enforce',
  runtimeSubnet: '10.213.0.0/16',
  terminalSessionsPerPrincipal: 20,
  maxTerminalSessions: 200,
  watchBookmarkMs: 30_000,
  watchStreamsPerPrincipal: 100,
  watchReplaysPerPrincipal: 2,
  watchBufferBytes: 1024 * 1024,
  watchBehindMs: 30_000,
  watchBufferTotalBytes: 64 * 1024 * 1024,
  registryMaxBlobBytes: 10 * 1024 * 1024 * 1024,
  registryCacheBytes: 1024 * 1024 * 1024,
  registryMaxBytesPerOrg: 20 * 1024 * 1024 * 1024,
  registryMaxUploads: 16,
  registryUploadIdleMs: 60 * 60 * 1000,
};

export interface ConfigSources {
  env?: NodeJS.ProcessEnv;
  /** Flags such as `--port 9000` or `--port=9000`; `--config FILE` names a JSON or YAML file. */
  argv?: string[];
}

/**
 * The configuration: defaults, then a config file (`--config` or KEEL_CONFIG), then the
 * environment, then flags. Every value is checked; the first bad one throws an Error naming it.
 */
export function loadConfig(sources: ConfigSources = {}): Config {
  const env = sources.env ?? process.env;
  const flags = parseFlags(sources.argv ?? []);
  const config: Config = { ...DEFAULTS };
  const file = flags.get('--config') ?? env.KEEL_CONFIG;
  if (file) {
    const values = readConfigFile(file);
    const known = new Set(OPTIONS.map((o) => o.key as string));
    const unknown = Object.keys(values).filter((k) => !known.has(k));
    if (unknown.length) throw new Error(`${file}: unknown setting(s) ${unknown.join(', ')}; known: ${[...known].join(', ')}`);
    for (const o of OPTIONS) if (values[o.key] !== undefined) assign(config, o, o.parse(values[o.key], `${file}: ${o.key}`));
  }
  for (const o of OPTIONS) if (env[o.env] !== undefined && env[o.env] !== '') assign(config, o, o.parse(env[o.env], o.env));
  flags.delete('--config');
  for (const [flag, value] of flags) {
    const o = OPTIONS.find((x) => x.flag === flag);
    if (!o) throw new Error(`unknown flag ${flag}; see keel serve --help`);
    assign(config, o, o.parse(value, flag));
  }
  if (config.rateBurst === 0) config.rateBurst = config.rateLimit * 2;
  if (config.databaseUrl === '') delete config.databaseUrl;
  const oidc = [config.oidcIssuer, config.oidcClientId, config.oidcClientSecret].filter(Boolean).length;
  if (oidc !== 0 && oidc !== 3) throw new Error('KEEL_OIDC_ISSUER, KEEL_OIDC_CLIENT_ID and KEEL_OIDC_CLIENT_SECRET go together: set all three or none');
  config.reconcile ??= true; // a served Keel reconciles unless KEEL_RECONCILE=off (an embedding Config without it: off)
  config.dataDir = resolve(config.dataDir);
  return config;
}

/**
 * Whether the sources name a store (KEEL_DATA_DIR, KEEL_DATABASE_URL, their flags or a config
 * file's dataDir/databaseUrl) rather than leaving it to the default ./data.
 */
export function storeNamed(sources: ConfigSources = {}): boolean {
  const env = sources.env ?? process.env;
  const flags = parseFlags(sources.argv ?? []);
  if (flags.has('--data-dir') || flags.has('--database-url') || env.KEEL_DATA_DIR || env.KEEL_DATABASE_URL) return true;
  const file = flags.get('--config') ?? env.KEEL_CONFIG;
  if (!file) return false;
  const values = readConfigFile(file);
  return Boolean(values.dataDir || values.databaseUrl);
}

/** Kept for callers that only read the environment. */
export function configFromEnv(env: NodeJS.ProcessEnv = process.env): Config {
  return loadConfig({ env });
}

function assign(config: Config, o: Option, value: unknown): void {
  (config as unknown as Record<string, unknown>)[o.key] = value;
}

function parseFlags(argv: string[]): Map<string, string> {
  const flags = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith('--')) throw new Error(`unexpected argument '${arg}'`);
    const eq = arg.indexOf('=');
    if (eq > 0) flags.set(arg.slice(0, eq), arg.slice(eq + 1));
    else if (i + 1 < argv.length && !argv[i + 1].startsWith('--')) flags.set(arg, argv[++i]);
    else throw new Error(`${arg} needs a value`);
  }
  return flags;
}

function readConfigFile(file: string): Record<string, unknown> {
  let textValue: string;
  try {
    textValue = readFileSync(file, 'utf8');
  } catch (err) {
    throw new Error(`cannot read config file ${file}: ${(err as Error).message}`);
  }
  let parsed: unknown;
  try {
    parsed = /\.json$/i.test(file) ? JSON.parse(textValue) : parseYaml(textValue);
  } catch (err) {
    throw new Error(`config file ${file} is not valid ${/\.json$/i.test(file) ? 'JSON' : 'YAML'}: ${(err as Error).message}`);
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error(`config file ${file} must hold an object of settings`);
  return parsed as Record<string, unknown>;
}

/** A URL with its password, if any, replaced by ****. */
export function maskedUrl(text: string): string {
  const url = new URL(text);
  if (url.password) url.password = '****';
  return url.toString();
}

/** The configuration as `keel serve --print-config` shows it: secrets in URLs masked. */
export function printableConfig(config: Config): Record<string, unknown> {
  const out: Record<string, unknown> = { ...config };
  if (config.databaseUrl) out.databaseUrl = maskedUrl(config.databaseUrl);
  if (config.oidcClientSecret) out.oidcClientSecret = '****';
  if (config.adminKey) out.adminKey = `${config.adminKey.split('.')[0]}.****`;
  return out;
}

/** The settings table of `--help` (docs/configuration.md has the same settings). */
export function optionsHelp(): string {
  return OPTIONS.map((o) => `  ${o.flag.padEnd(24)} ${o.env.padEnd(26)} ${o.describe} (default: ${JSON.stringify(DEFAULTS[o.key] ?? '')})`).join('\n');
}
