// Keel's API as replicas reach it: Keel's Core API may listen on loopback alone, which a replica's
// network namespace cannot reach, so a listener on the bridge's host address (the gateway,
// network.ts), on the API's own port, takes replicas' connections and hands each one, as it is,
// to the API's HTTP server in this process. CPLN_ENDPOINT (env.ts) names it.
//
// Handed over rather than relayed to the API's address: a relayed connection would reach the API
// from 127.0.0.1, so every replica of every org, and every local client, would share the API's
// per-address limits (failed authentications, unauthenticated requests and bodies): one replica
// could lock everyone out. A handed-over socket's peer is the replica's own bridge address, which
// nothing has to convey and no client can forge: the API reads it from the socket, as for any
// other connection, and no header (PROXY protocol or other) is ever believed.
import { createServer, type Server, type Socket } from 'node:net';

/** Bounds the connections replicas may hold open to the API through the gateway at once (all replicas together). */
const CONNECTIONS_MAX = 1024;

export class ApiRelay {
  private server?: Promise<Server | undefined>;
  private readonly sockets = new Set<Socket>();

  /**
   * `apiHost`:`port` is where the Core API listens; `accept` gives it a connection (the HTTP
   * server's own `connection` handling). Without `accept`, replicas are not given the API.
   */
  constructor(
    private readonly apiHost: string,
    private readonly port: number,
    private readonly accept: ((socket: Socket) => void) | undefined,
    private readonly onError: (err: unknown) => void,
  ) {}

  /** Where a replica reaches the API, or undefined when it cannot (the API's port is not fixed). */
  endpoint(gateway: string): string | undefined {
    return this.port > 0 && (this.accept || this.direct()) ? `http://${gateway}:${this.port}` : undefined;
  }

  /** An API listening on every address is already reached at the gateway, with replicas' own addresses. */
  private direct(): boolean {
    return ['0.0.0.0', '::', ''].includes(this.apiHost);
  }

  /** Listens on `gateway` once its address exists (after the bridge is up); idempotent. */
  listen(gateway: string): Promise<unknown> {
    const accept = this.accept;
    if (this.port <= 0 || this.direct() || !accept) return Promise.resolve();
    this.server ??= new Promise((resolve) => {
      const server = createServer((client) => {
        this.sockets.add(client);
        client.on('close', () => this.sockets.delete(client));
        accept(client);
      });
      server.maxConnections = CONNECTIONS_MAX;
      server.once('error', (err) => {
        this.onError(err);
        this.server = undefined;
        resolve(undefined);
      });
      server.listen(this.port, gateway, () => resolve(server));
    });
    return this.server;
  }

  async close(): Promise<void> {
    const server = await this.server;
    this.server = undefined;
    for (const s of this.sockets) s.destroy();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
