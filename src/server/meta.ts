import type { FastifyInstance } from 'fastify';
import type { Config } from '../config.js';
import { ApiError } from '../errors.js';
import type { Store } from '../store/types.js';
import { VERSION } from '../version.js';
import { sendError } from './errors.js';
import { auditBase, coreBase } from '../public-url.js';
import { CRD_EXPORTER, TERRAFORM_EXPORTER } from './exporters.js';

const started = new Date();

/** Anonymous endpoints: build information, where the other services are, liveness and readiness. */
export function mountMeta(app: FastifyInstance, config: Config, store: Store): void {
  let closing = false;
  app.addHook('preClose', async () => {
    closing = true;
  });
  const open = { config: { public: true } };
  app.get('/about', open, async () => ({
    name: 'keel',
    version: VERSION,
    epoch: Math.floor(started.getTime() / 1000),
    timestamp: started.toISOString(),
    build: process.env.KEEL_BUILD ?? 'dev',
    store: store.dialect,
  }));
  app.get('/discovery', open, async (request) => {
    const api = coreBase(config, request);
    const audit = auditBase(config, request);
    // Every service of the public discovery type that Keel serves, each Keel itself (the console and
    // exporters on their own paths); those it does not serve (metrics, tracing, grafana, hub, mcp...)
    // are left out rather than pointed at something that is not there. `firebase` is null: Keel has no browser sign-in, and with no sign-in
    // configuration the CLI's `login` stops at once (exit 1) instead of waiting for a browser
    // that can never complete (an empty object leaves it waiting forever).
    return {
      endpoints: {
        api,
        audit,
        billing: api,
        'billing-ng': api,
        console: `${api}/console`,
        registry: api,
        logs: api,
        byok: api,
        'terraform-exporter': `${api}${TERRAFORM_EXPORTER}`,
        'k8s-crd-exporter': `${api}${CRD_EXPORTER}`,
      },
      firebase: null,
    };
  });
  // Liveness: the process answers. Readiness: it can reach its store and is not shutting down.
  app.get('/healthz', open, async () => ({ status: 'ok' }));
  app.get('/readyz', open, async (request, reply) => {
    if (closing) return sendError(reply, request, new ApiError('service_unavailable', 'shutting down'));
    try {
      await store.ping();
    } catch (err) {
      request.log.error({ reqId: request.id, err }, 'store unreachable');
      return sendError(reply, request, new ApiError('service_unavailable', 'the store is unreachable'));
    }
    return { status: 'ready', store: store.dialect };
  });
}
