// Living resources: the deployment, -command, mk8s cluster and latest-image routes, and the reconciler runner that moves
// status along (started with the Core API's server, stopped when it closes).
import type { FastifyInstance } from 'fastify';
import type { Authorizer } from '../auth/authorizer.js';
import type { Config } from '../config.js';
import { mountImages } from '../server/images.js';
import { mountMk8s } from '../server/mk8s.js';
import { mountSubresources } from '../server/subresources.js';
import type { Store } from '../store/types.js';
import { ReconcileRunner, type RunnerOptions } from './runner.js';

export const DEFAULT_STEP_MS = 1000;

export function installLiving(core: FastifyInstance, store: Store, auth: Authorizer, config: Config, faults?: RunnerOptions['faults'], registryManifest?: RunnerOptions['registryManifest']): ReconcileRunner | undefined {
  mountSubresources(core, store, auth, { audit: config.audit });
  mountMk8s(core, store, auth);
  mountImages(core, store, auth);
  if (!config.reconcile) return undefined;
  const runner = new ReconcileRunner(store, {
    stepMs: config.reconcileStepMs ?? DEFAULT_STEP_MS,
    audit: config.audit,
    onError: (err, key) => core.log.error({ err, key }, 'reconcile failed'),
    faults,
    registryManifest,
    // The host:port the CLI names this registry by (`cpln image build --push`, `stack deploy`).
    registryHosts: () => {
      const address = core.server.address();
      if (!address || typeof address === 'string') return [];
      return [...new Set([config.host, '127.0.0.1', 'localhost'])].map((host) => `${host}:${address.port}`);
    },
  });
  core.addHook('onReady', async () => runner.start());
  core.addHook('onClose', async () => runner.stop());
  return runner;
}
