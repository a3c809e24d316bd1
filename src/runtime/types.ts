// What the reconcilers ask of whatever runs replicas. A runtime is told, on each pass over a
// deployment, which replicas should exist (a desired state, as a kubelet is told its pods) and
// answers at once with what it observed; it never makes the pass wait for a container. A runtime
// that runs processes does its work on its own clock and calls the change listener when what it
// reports has changed, so the reconciler looks again. See docs/runtime.md.
import type { ChildProcess } from 'node:child_process';
import type { Forward } from './port-forward.js';

/** The deployment (a workload in one location) whose replicas are meant. */
export interface DeploymentRef {
  org: string;
  gvc: string;
  workload: string;
  location: string;
  /** The first DNS label of the workload's endpoint (`WORKLOAD-GVCALIAS`): the ingress routes by it. */
  host: string;
}

/** One replica a deployment should run. */
export interface ReplicaWant {
  /** From replicaNames() or runReplica() (src/reconcile/views.ts): the one name shown everywhere. */
  name: string;
  /** The workload version it runs. */
  version: number;
  /** The workload's spec of that version. */
  spec: Record<string, any>;
  /** Set for a cron workload's run: it runs once, to completion (never restarted), started at `since`. */
  run?: { since: number };
}

export interface ReplicaState {
  name: string;
  running: boolean;
  ready: boolean;
  restarts: number;
  /** The exit code of the last run that ended, if one has. */
  exitCode?: number;
  message: string;
  /** A run that has ended: its exit code, when, and what its execution should say. */
  finished?: { exitCode: number; at: number; message?: string };
}

export interface Observation {
  replicas: ReplicaState[];
  /** Whether every wanted replica is ready. */
  ready: boolean;
  /**
   * Whether the deployment serves traffic now. A runtime that runs replicas knows; the
   * simulation leaves it undefined, and a rolled-out older version keeps serving while a newer one deploys.
   */
  serving?: boolean;
  /** Why the deployment is not ready (a pull that failed, a container that keeps crashing). */
  message?: string;
  /** In ms: when the report will change by itself (the simulation's clock). */
  after?: number;
}

/** The traffic a deployment has had, as the runtime's ingress measured it (held requests included). */
export interface Demand {
  /** The most requests in flight at once over the window asked about (now included). */
  concurrency: number;
  /** The most requests that arrived in one second over the window. */
  rps: number;
}

/** A deployment that may run no replica: a request for it is held while one starts. */
export interface Wake {
  /** The workload's spec (the port its endpoint serves). */
  spec: Record<string, any>;
  /** How long a request waits for a ready replica before it is answered 503. */
  holdMs: number;
}

/** A replica named as the CLI's terminal requests name it: org, GVC, location, replica (pod) and perhaps a container. */
export interface ExecTarget {
  org: string;
  gvc: string;
  location: string;
  replica: string;
  container?: string;
}

/** The simulation's clock: since when the deployment's current rollout has been under way. */
export interface Clock {
  since: number;
  now: number;
  stepMs: number;
}

export interface Runtime {
  readonly kind: 'simulated' | 'runc';
  /**
   * Whether runs started by a runCronWorkload command end when their process does. The
   * simulation ends them when the command completes, a step later.
   */
  readonly endsCommandRuns: boolean;
  /**
   * Whether this process runs the replicas now. With several Keel processes on one PostgreSQL,
   * one of them does (lease.ts); the others leave workloads to it.
   */
  owns(): boolean;
  /** The URL a workload's endpoint is reached at (status.endpoint; what `cpln workload open` opens). */
  endpoint(host: string): string;
  /**
   * Declares the replicas `deployment` runs from now on (none, without `wake`: it is gone) and reports
   * what runs. With `wake`, it stays reachable at the ingress with no replica, and a request for it
   * is held and the change listener called, so that the reconciler starts one. `suspended`: it runs
   * none because the workload is suspended, and its endpoint says so.
   */
  observe(deployment: DeploymentRef, want: ReplicaWant[], clock: Clock, wake?: Wake, suspended?: boolean): Observation;
  /**
   * The deployment's traffic over the last `windowMs`; the change listener is called when it changes.
   * Absent, or undefined: the runtime measures none (the simulation), and a deployment runs minScale replicas.
   */
  demand?(deployment: DeploymentRef, windowMs: number): Demand | undefined;
  /** Stops one replica now (`cpln workload replica stop`); still wanted, it is started again. False: no such replica runs here. */
  stopReplica(deployment: Omit<DeploymentRef, 'host'>, replica: string): boolean;
  /** Removes the data of a deleted volume set's volumes, when the runtime keeps any. */
  removeVolumeSet?(org: string, gvc: string, name: string): void;
  /**
   * Starts `command` in a running replica's container, its stdio piped (exec, connect, cp); or says
   * why it cannot, with the replica's workload when the replica is there (its caller checks the
   * permission on that workload before it shows why).
   */
  /** `tty`: the command runs on a pseudo-terminal (its stdout carries what the terminal shows). */
  exec(target: ExecTarget, command: string[], tty?: boolean): { workload: string; start: () => ChildProcess } | { workload?: string; error: string };
  /**
   * Connections to TCP `port` of a running replica (port-forward), each opened when `connect` is
   * called; or why there are none, with the replica's workload when it is there (as exec).
   */
  portForward(target: ExecTarget, port: number): Forward;
  /**
   * Takes a domain's spec, for the ingress to route its host names by (undefined: the domain is
   * gone); `created` decides between orgs holding the same name. A runtime without an ingress has none.
   */
  domain?(org: string, name: string, spec: Record<string, unknown> | undefined, created?: string): void;
  /**
   * The deployments this runtime runs replicas for (or wakes on a request), the domains it serves
   * and the volume sets it keeps data for: after the stored state is replaced (a restore or reset),
   * each is looked at again, so what the new state no longer holds stops, or its data goes.
   */
  held?(): { deployments: DeploymentRef[]; domains: Array<{ org: string; name: string }>; volumeSets: Array<{ org: string; gvc: string; name: string }> };
  /** The locations this runtime runs a workload's replicas in (or wakes it on a request); asked on every pass over the workload, so cheap. */
  locationsOf?(org: string, gvc: string, workload: string): string[];
  /** `listener` is called with a deployment whose observed state changed. */
  onChange(listener: (deployment: DeploymentRef) => void): void;
  start(): Promise<void>;
  /** Stops every replica this process runs and releases what they held. */
  stop(): Promise<void>;
}
