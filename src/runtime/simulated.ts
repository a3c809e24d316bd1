// The default runtime: nothing runs. Every wanted replica is ready one lifecycle step after its
// rollout began (KEEL_RECONCILE_SPEED), which keeps CI fast and deterministic.
import type { Clock, DeploymentRef, Observation, ReplicaWant, Runtime } from './types.js';

export class SimulatedRuntime implements Runtime {
  readonly kind = 'simulated' as const;

  endpoint(host: string): string {
    return `https://${host}.cpln.app`;
  }

  observe(_deployment: DeploymentRef, want: ReplicaWant[], clock: Clock): Observation {
    const due = clock.since + clock.stepMs;
    const ready = clock.now >= due;
    return {
      replicas: want.map((r) => ({ name: r.name, running: true, ready, restarts: 0, message: ready ? 'Running' : 'ContainerCreating' })),
      ready,
      after: ready ? undefined : due - clock.now,
    };
  }

  stopReplica(): boolean {
    return true;
  }

  exec(): { error: string } {
    return { error: 'Keel simulates replicas and runs no containers (KEEL_RUNTIME=simulated), so there is no process to run a command in' };
  }

  onChange(): void {}

  async start(): Promise<void> {}

  async stop(): Promise<void> {}
}

/** One is enough: it holds no state. */
export const SIMULATED = new SimulatedRuntime();
