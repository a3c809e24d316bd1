// Which Keel process runs replicas, when several share one PostgreSQL database: the one holding
// a session advisory lock named after the database URL. The lock lives as long as the holder's
// connection, so a process that dies (even by SIGKILL) gives it up, and another takes it over on
// its next try. With SQLite there is one process, and it always holds the lease.
import { createHash } from 'node:crypto';
import pg from 'pg';

const RETRY_MS = 2_000;

export class Lease {
  private client?: pg.Client;
  private timer?: NodeJS.Timeout;
  private stopped = false;
  held: boolean;

  constructor(
    private readonly databaseUrl: string | undefined,
    /** Called when a held lease is lost with its connection: the replicas must stop here. */
    private readonly onLost: () => void,
    private readonly onError: (err: unknown) => void,
  ) {
    this.held = !databaseUrl;
  }

  /** Tries now, then every RETRY_MS until it holds the lease. */
  async start(): Promise<void> {
    if (this.held) return;
    await this.attempt();
  }

  private async attempt(): Promise<void> {
    if (this.stopped || this.held) return;
    try {
      if (!this.client) {
        const client = new pg.Client({ connectionString: this.databaseUrl });
        // A lost connection loses the lock with it: this process stops running replicas and tries again.
        client.on('error', (err) => {
          this.onError(err);
          this.client = undefined;
          const was = this.held;
          this.held = false;
          if (was) this.onLost();
          if (!this.stopped) {
            clearTimeout(this.timer);
            this.timer = setTimeout(() => void this.attempt(), RETRY_MS);
            this.timer.unref();
          }
        });
        await client.connect();
        this.client = client;
      }
      const key = BigInt.asIntN(64, BigInt(`0x${createHash('sha256').update(`keel-runtime:${this.databaseUrl}`).digest('hex').slice(0, 16)}`));
      const { rows } = await this.client.query<{ held: boolean }>('SELECT pg_try_advisory_lock($1::bigint) AS held', [key.toString()]);
      this.held = rows[0]?.held === true;
    } catch (err) {
      this.onError(err);
      await this.client?.end().catch(() => undefined);
      this.client = undefined;
    }
    if (!this.held && !this.stopped) {
      this.timer = setTimeout(() => void this.attempt(), RETRY_MS);
      this.timer.unref();
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.held = !this.databaseUrl;
    await this.client?.end().catch(() => undefined);
    this.client = undefined;
  }
}
