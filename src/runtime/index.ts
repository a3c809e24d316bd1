// Chooses the runtime KEEL_RUNTIME names.
import type { Socket } from 'node:net';
import type { Authorizer } from '../auth/authorizer.js';
import type { Config } from '../config.js';
import type { BlobStore } from '../registry/blobs.js';
import type { Store } from '../store/types.js';
import { RuncRuntime } from './runc.js';
import { SIMULATED } from './simulated.js';
import type { Runtime } from './types.js';

export function openRuntime(config: Config, store: Store, auth: Authorizer, blobs: BlobStore, registryHosts: () => string[], onError: (err: unknown, what: string) => void, acceptApi?: (socket: Socket) => void): Runtime {
  if (config.runtime !== 'runc') return SIMULATED;
  return new RuncRuntime({ dataDir: config.dataDir, databaseUrl: config.databaseUrl, subnet: config.runtimeSubnet, host: config.host, ingressPort: config.ingressPort, apiPort: config.port, ingressMaxConnections: config.ingressMaxConnections, ingressProxy: config.ingressProxy, haproxyReloadMinMs: config.haproxyReloadMinMs, maxGraceSeconds: config.maxTerminationGraceSeconds, firewall: config.firewall, logBytesPerSecond: config.logBytesPerSecond, replicaDiskBytes: config.replicaDiskBytes, hostImagesOrg: config.org, store, auth, blobs, registryHosts, onError, acceptApi });
}
