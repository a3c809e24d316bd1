// Keel's API as replicas reach it: Keel's Core API may listen on loopback alone, which a replica's
// network namespace cannot reach, so a relay listens on the bridge's host address (the gateway,
// network.ts) on the API's own port and passes each connection through to the API unchanged.
// CPLN_ENDPOINT (env.ts) names it. It carries bytes only: the API authenticates every request.
import { createServer, connect, type Server, type Socket } from 'node:net';

export class ApiRelay {
  private server?: Promise<Server | undefined>;
  private readonly sockets = new Set<Socket>();

  /** `apiHost`:`port` is where the Core API listens. */
  constructor(
    private readonly apiHost: string,
    private readonly port: number,
    private readonly onError: (err: unknown) => void,
  ) {}

  /** Where a replica reaches the API, or undefined when it cannot (the API's port is not fixed). */
  endpoint(gateway: string): string | undefined {
    return this.port > 0 ? `http://${gateway}:${this.port}` : undefined;
  }

  /** Listens on `gateway` once its address exists (after the bridge is up); idempotent. */
  listen(gateway: string): Promise<unknown> {
    // An API listening on every address is already reached at the gateway.
    if (this.port <= 0 || ['0.0.0.0', '::', ''].includes(this.apiHost)) return Promise.resolve();
    this.server ??= new Promise((resolve) => {
      const target = this.apiHost === 'localhost' ? '127.0.0.1' : this.apiHost;
      const server = createServer((client) => {
        const upstream = connect(this.port, target);
        for (const s of [client, upstream]) {
          this.sockets.add(s);
          s.on('close', () => this.sockets.delete(s));
          s.on('error', () => (s === client ? upstream : client).destroy());
        }
        client.pipe(upstream).pipe(client);
      });
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
