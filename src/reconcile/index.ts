// Living resources: the deployment, -command, mk8s cluster and latest-image routes, and the reconciler runner that moves
// status along (started with the Core API's server, stopped when it closes).
import type { FastifyInstance } from 'fastify';
import type { Authorizer } from '../auth/authorizer.js';
import type { Config } from '../config.js';
import { mountImages } from '../server/images.js';
import { mountMk8s } from '../server/mk8s.js';
import { mountSubresources } from '../server/subresources.js';
import type { BlobStore } from '../registry/blobs.js';
import type { Store } from '../store/types.js';
import { ReconcileRunner, type RunnerOptions } from './runner.js';
import { openRuntime } from '../runtime/index.js';
import type { Runtime } from '../runtime/types.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** What runs workloads' replicas (absent without reconcilers). */
    runtime?: Runtime;
  }
}

export const DEFAULT_STEP_MS = 1000;

/** The host:port forms the CLI names this registry by (`cpln image build --push`, `stack deploy`). */
export function registryHostsOf(core: FastifyInstance, config: Config): string[] {
  const address = core.server.address();
  if (!address || typeof address === 'string') return [];
  return [...new Set([config.host, '127.0.0.1', 'localhost'])].map((host) => `${host}:${address.port}`);
}

export function installLiving(core: FastifyInstance, store: Store, auth: Authorizer, config: Config, blobs: BlobStore, faults?: RunnerOptions['faults']): ReconcileRunner | undefined {
  mountSubresources(core, store, auth, { audit: config.audit });
  mountMk8s(core, store, auth);
  mountImages(core, store, auth);
  if (!config.reconcile) return undefined;
  const registryHosts = () => registryHostsOf(core, config);
  // Replicas' connections to the gateway are the Core API's own, with the replicas' addresses as their peers (api-relay.ts).
  const runtime = openRuntime(config, store, auth, blobs, registryHosts, (err, what) => core.log.error({ err }, what), (socket) => core.server.emit('connection', socket));
  const runner = new ReconcileRunner(store, {
    stepMs: config.reconcileStepMs ?? DEFAULT_STEP_MS,
    audit: config.audit,
    onError: (err, key) => core.log.error({ err, key }, 'reconcile failed'),
    faults,
    registryManifest: async (org, digest) => {
      const held = await blobs.linked(org, digest);
      return held?.mediaType ? { mediaType: held.mediaType } : undefined;
    },
    registryHosts,
    runtime,
  });
  core.decorate('runtime', runtime);
  core.addHook('onReady', async () => {
    await runtime.start();
    await runner.start();
  });
  core.addHook('onClose', async () => {
    await runner.stop();
    await runtime.stop();
  });
  return runner;
}
