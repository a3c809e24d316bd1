import { resolve } from 'node:path';
import { parseIssuers, type TrustedIssuer } from './auth/issuers.js';

export interface Config {
  host: string;
  port: number;
  auditPort: number;
  dataDir: string;
  /** postgres://… selects PostgreSQL; empty means SQLite in dataDir. */
  databaseUrl?: string;
  /** The org created on first start. */
  org: string;
  /** Largest accepted request body, in bytes. */
  bodyLimit: number;
  logLevel: string;
  /** Identity providers whose JWTs are accepted as bearer tokens (none: service-account keys only). */
  jwtIssuers?: TrustedIssuer[];
  /** Record an audit event with every change (KEEL_AUDIT=off only to measure its cost). */
  audit: boolean;
  /** Audit retention: events older than this many days, or beyond this many per org, are pruned (0 = keep). */
  auditMaxAgeDays: number;
  auditMaxEvents: number;
}

const DEFAULTS: Config = {
  host: '127.0.0.1',
  port: 8080,
  auditPort: 8081,
  dataDir: './data',
  org: 'default',
  bodyLimit: 1024 * 1024,
  logLevel: 'info',
  audit: true,
  auditMaxAgeDays: 0,
  auditMaxEvents: 0,
};

function count(name: string, value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} must be a whole number >= 0, got '${value}'`);
  return n;
}

function port(name: string, value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new Error(`${name} must be a port number (0-65535), got '${value}'`);
  return n;
}

/** Reads the configuration from the environment (KEEL_*), over the defaults. */
export function configFromEnv(env: NodeJS.ProcessEnv = process.env): Config {
  const config: Config = { ...DEFAULTS };
  if (env.KEEL_HOST) config.host = env.KEEL_HOST;
  if (env.KEEL_PORT) config.port = port('KEEL_PORT', env.KEEL_PORT);
  if (env.KEEL_AUDIT_PORT) config.auditPort = port('KEEL_AUDIT_PORT', env.KEEL_AUDIT_PORT);
  if (env.KEEL_DATA_DIR) config.dataDir = env.KEEL_DATA_DIR;
  if (env.KEEL_DATABASE_URL) config.databaseUrl = env.KEEL_DATABASE_URL;
  if (env.KEEL_ORG) {
    if (!/^[a-z]([-a-z0-9])*[a-z0-9]$/.test(env.KEEL_ORG)) throw new Error(`KEEL_ORG '${env.KEEL_ORG}' is not a valid org name`);
    config.org = env.KEEL_ORG;
  }
  if (env.KEEL_LOG_LEVEL) config.logLevel = env.KEEL_LOG_LEVEL;
  if (env.KEEL_JWT_ISSUERS) config.jwtIssuers = parseIssuers(env.KEEL_JWT_ISSUERS);
  if (env.KEEL_AUDIT) {
    if (!['on', 'off'].includes(env.KEEL_AUDIT)) throw new Error(`KEEL_AUDIT must be 'on' or 'off', got '${env.KEEL_AUDIT}'`);
    config.audit = env.KEEL_AUDIT === 'on';
  }
  if (env.KEEL_AUDIT_MAX_AGE_DAYS) config.auditMaxAgeDays = count('KEEL_AUDIT_MAX_AGE_DAYS', env.KEEL_AUDIT_MAX_AGE_DAYS);
  if (env.KEEL_AUDIT_MAX_EVENTS) config.auditMaxEvents = count('KEEL_AUDIT_MAX_EVENTS', env.KEEL_AUDIT_MAX_EVENTS);
  config.dataDir = resolve(config.dataDir);
  return config;
}
