// Port-forward into a replica (`cpln port-forward`): a TCP connection from this host to the
// replica's address on Keel's bridge, at the port asked for. The host always reaches its replicas
// (the firewall filters only what crosses between them and beyond), so nothing is opened for it.
// Unlike the hosted platform, which enters the pod's network namespace, a server in the replica
// that listens on 127.0.0.1 only is not reached: it must listen on the replica's address (or all).
import { connect, type Socket } from 'node:net';

/** How long a connection to a replica's port may take to open: on the bridge it opens, or is refused, at once. */
const CONNECT_TIMEOUT_MS = 10_000;

/** The replica's side of a port-forward, as Runtime.portForward answers. */
export type Forward = { workload: string; connect: () => Socket } | { workload?: string; error: string };

/**
 * Connections to `port` of the replica `name` of `workload` at `address` (undefined: it holds none
 * now), or why there are none. `running`: whether every container of the replica runs.
 */
export function forwardTo(workload: string, name: string, address: string | undefined, running: boolean, port: number): Forward {
  if (!Number.isInteger(port) || port < 1 || port > 65535) return { workload, error: `port ${String(port)} is not a TCP port (1-65535)` };
  if (!address || !running) return { workload, error: `replica ${name} is not running` };
  return {
    workload,
    connect: () => {
      const socket = connect({ host: address, port, noDelay: true });
      const late = () => socket.destroy(new Error(`port ${port} of replica ${name} did not answer within ${CONNECT_TIMEOUT_MS} ms`));
      socket.setTimeout(CONNECT_TIMEOUT_MS);
      socket.once('timeout', late);
      socket.once('connect', () => {
        socket.off('timeout', late);
        socket.setTimeout(0);
      });
      return socket;
    },
  };
}
