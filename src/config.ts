import { resolve } from 'node:path';

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
}

const DEFAULTS: Config = {
  host: '127.0.0.1',
  port: 8080,
  auditPort: 8081,
  dataDir: './data',
  org: 'default',
  bodyLimit: 1024 * 1024,
  logLevel: 'info',
};

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
  config.dataDir = resolve(config.dataDir);
  return config;
}
