import { KEEL_ACTOR } from './audit/events.js';
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { Config } from './config.js';
import { ApiError } from './errors.js';
import { createOrg } from './resources/orgs.js';
import { buildApp } from './server/app.js';
import { openStore } from './store/open.js';
import type { Store } from './store/types.js';

/**
 * First start on an empty store: the org $KEEL_ORG with its built-ins and a superuser key,
 * written to $KEEL_DATA_DIR/admin.token. Returns the key when this process created it.
 */
export async function bootstrap(config: Config, store: Store): Promise<string | undefined> {
  if (!(await store.isEmpty())) return undefined;
  try {
    const { token } = await createOrg(store, { name: config.org, actor: KEEL_ACTOR, superusers: [], adminServiceAccount: 'admin' });
    mkdirSync(config.dataDir, { recursive: true });
    const file = join(config.dataDir, 'admin.token');
    writeFileSync(file, `${token}\n`, { mode: 0o600 });
    chmodSync(file, 0o600);
    return token;
  } catch (err) {
    // Another Keel process on the same database bootstrapped first.
    if (err instanceof ApiError && err.code === 'already_exists') return undefined;
    throw err;
  }
}

export async function serve(config: Config): Promise<void> {
  const store = await openStore(config);
  const token = await bootstrap(config, store);
  const { core, audit } = await buildApp(config, store);
  const retention = startAuditRetention(config, store, (err) => core.log.error({ err }, 'audit retention failed'));

  await core.listen({ host: config.host, port: config.port });
  await audit.listen({ host: config.host, port: config.auditPort });
  const endpoint = `http://${config.host}:${(core.server.address() as AddressInfo).port}`;
  const auditEndpoint = `http://${config.host}:${(audit.server.address() as AddressInfo).port}`;
  // With port 0 the system chose the Audit API's port: /discovery must name the real one.
  config.auditPort = (audit.server.address() as AddressInfo).port;
  if (token) {
    process.stdout.write(
      [
        '',
        `Keel created org '${config.org}' and a superuser key (shown once; also in ${join(config.dataDir, 'admin.token')}):`,
        '',
        `  ${token}`,
        '',
        'Point the cpln CLI at this server with:',
        '',
        `  cpln profile update keel --endpoint ${endpoint} --token ${token} --org ${config.org} --default`,
        '',
      ].join('\n') + '\n',
    );
  }
  core.log.info({ endpoint, audit: auditEndpoint, store: store.dialect }, 'keel is serving');

  // Graceful shutdown: stop accepting, let in-flight requests finish (their writes commit),
  // end watch streams, then close the store. A second signal, or the timeout, exits at once.
  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) process.exit(1);
    stopping = true;
    core.log.info({ signal }, 'shutting down');
    const force = setTimeout(() => {
      core.log.error({ timeoutMs: config.shutdownTimeoutMs }, 'shutdown timed out; exiting');
      process.exit(1);
    }, config.shutdownTimeoutMs);
    force.unref();
    if (retention) clearInterval(retention);
    await Promise.allSettled([core.close(), audit.close()]);
    await store.close();
    core.log.info('stopped');
    process.exit(0);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
}

const RETENTION_EVERY_MS = 60_000;

/** Prunes each org's audit events beyond the configured age or count, once a minute. */
function startAuditRetention(config: Config, store: Store, onError: (err: unknown) => void): NodeJS.Timeout | undefined {
  if (!config.auditMaxAgeDays && !config.auditMaxEvents) return undefined;
  const prune = async () => {
    const before = config.auditMaxAgeDays ? new Date(Date.now() - config.auditMaxAgeDays * 86_400_000).toISOString() : undefined;
    const keep = config.auditMaxEvents || undefined;
    for (const org of await store.auditOrgs()) await store.pruneAudit(org, { before, keep });
  };
  const timer = setInterval(() => prune().catch(onError), RETENTION_EVERY_MS);
  timer.unref();
  return timer;
}
