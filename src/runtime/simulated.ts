// The default runtime: nothing runs. Every wanted replica is ready one lifecycle step after its
// rollout began (KEEL_RECONCILE_SPEED), which keeps CI fast and deterministic.
import type { Clock, DeploymentRef, Observation, ReplicaWant, Runtime } from './types.js';

export class SimulatedRuntime implements Runtime {
  readonly kind = 'simulated' as const;
  readonly endsCommandRuns = false;

  owns(): boolean {
    return true;
  }

  /** Under the reserved `.invalid` top-level domain, which never resolves: nothing serves a simulated endpoint. */
  endpoint(host: string): string {
    return `https://${host}.simulated.invalid`;
  }

  observe(_deployment: DeploymentRef, want: ReplicaWant[], clock: Clock): Observation {
    const due = clock.since + clock.stepMs;
    const ready = clock.now >= due;
    let after = ready ? undefined : due - clock.now;
    const replicas = want.map((r) => {
      if (!r.run) return { name: r.name, running: true, ready, restarts: 0, message: ready ? 'Running' : 'ContainerCreating' };
      // A run succeeds a step after it started.
      const end = r.run.since + clock.stepMs;
      if (clock.now >= end) return { name: r.name, running: false, ready: false, restarts: 0, message: 'Completed', finished: { exitCode: 0, at: clock.now } };
      after = Math.min(after ?? Infinity, end - clock.now);
      return { name: r.name, running: true, ready: true, restarts: 0, message: 'Running' };
    });
    return { replicas, ready, after };
  }

  stopReplica(): boolean {
    return true;
  }

  exec(): { error: string } {
    return { error: 'Keel simulates replicas and runs no containers (KEEL_RUNTIME=simulated), so there is no process to run a command in' };
  }

  portForward(): { error: string } {
    return { error: 'Keel simulates replicas and runs no containers (KEEL_RUNTIME=simulated), so there is no port to forward to' };
  }

  onChange(): void {}

  async start(): Promise<void> {}

  async stop(): Promise<void> {}
}

/** One is enough: it holds no state. */
export const SIMULATED = new SimulatedRuntime();
