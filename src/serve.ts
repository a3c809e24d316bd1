import { KEEL_ACTOR } from './audit/events.js';
import type { AddressInfo } from 'node:net';
import { setFlagsFromString } from 'node:v8';
import { ADMIN_ACCOUNT, ensureAdminKey, fixedAdminKey, writeAdminToken } from './admin/keys.js';
import { applySeed, readSeed } from './admin/seed.js';
import { join } from 'node:path';
import type { Config } from './config.js';
import { tightenDataDir } from './data-dir.js';
import { ApiError } from './errors.js';
import { accountLinkOf, createOrg } from './resources/orgs.js';
import { RuncRuntime } from './runtime/runc.js';
import { buildApp } from './server/app.js';
import { openStore } from './store/open.js';
import type { Store } from './store/types.js';

/**
 * First start on an empty store: the org $KEEL_ORG with its built-ins and a superuser key (minted,
 * or KEEL_ADMIN_KEY's), written to $KEEL_DATA_DIR/admin.token. Returns the key when this process
 * minted it. With KEEL_ADMIN_KEY on a store that exists, the admin account is given that key.
 */
export async function bootstrap(config: Config, store: Store): Promise<string | undefined> {
  const fixed = config.adminKey ? fixedAdminKey(config.adminKey, config.org) : undefined;
  if (!(await store.isEmpty())) {
    if (fixed) {
      await ensureAdminKey(store, config.org, fixed);
      writeAdminToken(config.dataDir, fixed.token);
    }
    return undefined;
  }
  try {
    const { token } = await createOrg(store, { name: config.org, actor: KEEL_ACTOR, superusers: [], accountLink: accountLinkOf(config.org), adminServiceAccount: ADMIN_ACCOUNT, adminKey: fixed });
    writeAdminToken(config.dataDir, token!);
    return fixed ? undefined : token;
  } catch (err) {
    // Another Keel process on the same database bootstrapped first.
    if (err instanceof ApiError && err.code === 'already_exists') return undefined;
    throw err;
  }
}

export async function serve(config: Config): Promise<void> {
  // V8 allocates an object straight into the old generation once objects from the same place in
  // the code have been seen to outlive young collections (allocation-site pretenuring). A server's
  // request objects live a millisecond, but a stretch of slow requests (a burst of writes, each
  // waiting on its commit) makes their sites look long-lived, and the decision then stays: every
  // later request's objects fill the old generation, each young collection scans them (1 ms became
  // 5-9 ms) and full collections come every few seconds. After a thousand writes a GET cost half as
  // much again; without pretenuring it costs what it did on a fresh store (docs/operations.md).
  setFlagsFromString('--no-allocation-site-pretenuring');
  // A bad KEEL_ADMIN_KEY or KEEL_INIT stops the start before anything is written.
  if (config.adminKey) fixedAdminKey(config.adminKey, config.org);
  const seed = config.init ? readSeed(config.init) : [];
  // An older Keel left its files readable by every local user.
  tightenDataDir(config.dataDir);
  const say = (line: string) => process.stderr.write(`keel: ${line}\n`);
  const store = await openStore(config, say);
  let token: string | undefined;
  let seeded: Awaited<ReturnType<typeof applySeed>> = [];
  try {
    if (!(await store.orgs()).includes(config.org)) say(`creating org '${config.org}' with its built-ins and a superuser key`);
    token = await bootstrap(config, store);
    seeded = await applySeed(store, config.org, seed);
  } catch (err) {
    await store.close();
    throw err;
  }
  const { core, audit } = await buildApp(config, store);
  if (config.init) {
    const count = (outcome: string) => seeded.filter((s) => s.outcome === outcome).length;
    core.log.info({ init: config.init, created: count('created'), updated: count('updated'), unchanged: count('unchanged') }, 'seed applied');
  }
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
  const consoleUrl = `${endpoint}/console/`;
  const runtime = core.runtime?.kind ?? 'off';
  const ingress = core.runtime instanceof RuncRuntime ? `http://${config.host}:${core.runtime.ingressPort}` : undefined;
  core.log.info({ endpoint, audit: auditEndpoint, console: consoleUrl, store: store.dialect, runtime, ingress }, 'keel is serving');
  process.stderr.write(
    [
      `keel: Core API ${endpoint}, Audit API ${auditEndpoint}, console ${consoleUrl}`,
      runtime === 'runc'
        ? `keel: runtime runc: replicas run as containers; workload endpoints on ${ingress}${config.ingressProxy === 'haproxy' ? ' (HAProxy in front)' : ''}`
        : runtime === 'simulated'
          ? 'keel: runtime simulated: no replica runs (KEEL_RUNTIME=runc runs them)'
          : 'keel: runtime off (KEEL_RECONCILE=off): workloads are stored, nothing deploys them',
    ].join('\n') + '\n',
  );

  // Graceful shutdown: stop accepting, let in-flight requests finish (their writes commit), end
  // watch streams, stop the replicas and what serves them, then close the store. The stop often
  // arrives more than once: `npm start` passes its signal on to Keel, which got the same one as a
  // member of the process group, and npx's shell dying is itself a reason to stop. A repeated
  // signal must not cut the cleanup short (replicas, namespaces and the bridge would stay on the
  // host), so it is only logged; SIGKILL still exits at once.
  let stopping = false;
  let parentWatch: NodeJS.Timeout | undefined;
  const shutdown = async (signal: string) => {
    if (stopping) {
      core.log.warn({ signal }, 'already shutting down; the cleanup goes on (SIGKILL exits at once and leaves the replicas to the next start on this data directory)');
      return;
    }
    stopping = true;
    clearInterval(parentWatch);
    core.log.info({ signal }, 'shutting down');
    // Requests still running at the timeout lose their connections; the cleanup after them goes on.
    const cut = setTimeout(() => {
      core.log.error({ timeoutMs: config.shutdownTimeoutMs }, 'shutdown timed out waiting for requests; closing their connections');
      core.server.closeAllConnections();
      audit.server.closeAllConnections();
    }, config.shutdownTimeoutMs);
    cut.unref();
    const limit = setTimeout(() => {
      core.log.error({ timeoutMs: config.shutdownTimeoutMs + CLEANUP_LIMIT_MS }, 'shutdown did not finish; exiting (the next start on this data directory removes the replicas left)');
      process.exit(1);
    }, config.shutdownTimeoutMs + CLEANUP_LIMIT_MS);
    limit.unref();
    if (retention) clearInterval(retention);
    await Promise.allSettled([core.close(), audit.close()]);
    await store.close();
    core.log.info('stopped');
    process.exit(0);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
  // Run through npm (`npx keel serve`, `npm run`), Keel's parent can be the shell npm started: npm
  // passes a stop signal to that shell only, which does not pass it on. So Keel stops too when the
  // parent it was started by goes away.
  if (process.env.npm_command) {
    const parent = process.ppid; // fixed at start: Node does not update it
    const parentGone = () => {
      try {
        process.kill(parent, 0);
        return false;
      } catch (err) {
        return (err as NodeJS.ErrnoException).code === 'ESRCH';
      }
    };
    parentWatch = setInterval(() => parentGone() && void shutdown('parent exited'), 500);
    parentWatch.unref();
  }
}

/**
 * How long stopping the runtime may take after the requests' timeout: each replica gets 5 s to stop
 * on SIGTERM and 5 s more after SIGKILL, all at once, then runc, umount and ip remove what is left.
 */
const CLEANUP_LIMIT_MS = 60_000;

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
