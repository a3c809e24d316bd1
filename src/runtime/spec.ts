// The OCI runtime spec (config.json) of one container of a replica: the process from the image's
// config and the workload's container spec, resource limits as cgroup limits, the usual
// container default capabilities and a seccomp filter refusing what a container has no business
// doing, the replica's network namespace, and no host path but its overlay root and the
// replica's volume directories (volumes.ts).
import type { ImageConfig } from './images.js';
import type { BindMount } from './volumes.js';

/** The capabilities a container engine grants by default (Docker's and containerd's set). */
export const DEFAULT_CAPABILITIES = [
  'CAP_CHOWN', 'CAP_DAC_OVERRIDE', 'CAP_FSETID', 'CAP_FOWNER', 'CAP_MKNOD', 'CAP_NET_RAW', 'CAP_SETGID', 'CAP_SETUID',
  'CAP_SETFCAP', 'CAP_SETPCAP', 'CAP_NET_BIND_SERVICE', 'CAP_SYS_CHROOT', 'CAP_KILL', 'CAP_AUDIT_WRITE',
];

/**
 * System calls refused with EPERM: those that reach past the container (kernel modules, kexec,
 * mounts, namespaces, tracing other processes, the clock, keyrings, BPF). Everything else is
 * allowed; a name the kernel does not know is skipped by runc.
 */
const REFUSED_SYSCALLS = [
  'acct', 'add_key', 'bpf', 'clock_adjtime', 'clock_settime', 'create_module', 'delete_module', 'finit_module', 'fsconfig', 'fsmount',
  'fsopen', 'fspick', 'get_kernel_syms', 'get_mempolicy', 'init_module', 'ioperm', 'iopl', 'kcmp', 'kexec_file_load', 'kexec_load',
  'keyctl', 'lookup_dcookie', 'mbind', 'mount', 'mount_setattr', 'move_mount', 'move_pages', 'name_to_handle_at', 'nfsservctl',
  'open_by_handle_at', 'open_tree', 'perf_event_open', 'personality', 'pivot_root', 'process_vm_readv', 'process_vm_writev', 'ptrace',
  'query_module', 'quotactl', 'reboot', 'request_key', 'set_mempolicy', 'setns', 'settimeofday', 'swapoff', 'swapon', 'sysfs',
  '_sysctl', 'umount', 'umount2', 'unshare', 'uselib', 'userfaultfd', 'ustat', 'vm86', 'vm86old',
];

export interface ContainerSpec {
  name: string;
  image?: string;
  command?: string;
  args?: string[];
  env?: Array<{ name: string; value?: string }>;
  workingDir?: string;
  cpu?: string;
  memory?: string;
  ports?: Array<{ number?: number; protocol?: string }>;
  /** Run in the container before it is sent SIGTERM (rollouts.ts: within the grace period). */
  lifecycle?: { preStop?: { exec?: { command?: string[] } } };
}

export interface SpecInput {
  container: ContainerSpec;
  image: ImageConfig;
  rootfs: string;
  netns: string;
  hostname: string;
  cgroup: string;
  /** The container's whole environment (env.ts): CPLN_* and PORT, the GVC's, its own, every reference resolved. Over the image's. */
  env: Record<string, string>;
  /** The container's volumes: host directories of the replica's, mounted last so that one under /tmp lands on its tmpfs. */
  mounts?: BindMount[];
  /** The replica's /etc/resolv.conf on the host (names.ts), mounted read-only over the image's. */
  resolvConf?: string;
}

/** The process a container runs: `command` replaces the image's entrypoint and `args` its cmd, as Kubernetes does. */
export function processArgs(container: ContainerSpec, image: ImageConfig): string[] {
  const entry = container.command ? [container.command] : (image.Entrypoint ?? []);
  const args = container.args ?? (container.command ? [] : (image.Cmd ?? []));
  return [...entry, ...args];
}

export function ociSpec(input: SpecInput): Record<string, unknown> {
  const { container, image } = input;
  const args = processArgs(container, image);
  if (args.length === 0) throw new Error(`container ${container.name} has no command: neither the workload nor the image names one`);
  const env = new Map<string, string>();
  for (const e of image.Env ?? []) {
    const i = e.indexOf('=');
    if (i > 0) env.set(e.slice(0, i), e.slice(i + 1));
  }
  if (!env.has('PATH')) env.set('PATH', '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin');
  for (const [k, v] of Object.entries(input.env)) env.set(k, v);
  const [uid, gid] = userOf(image.User);
  const memory = bytes(container.memory ?? '128Mi');
  const millicores = cpu(container.cpu ?? '50m');
  const period = 100_000;
  return {
    ociVersion: '1.0.2',
    process: {
      terminal: false,
      user: { uid, gid },
      args,
      env: [...env].map(([k, v]) => `${k}=${v}`),
      cwd: container.workingDir ?? (image.WorkingDir || '/'),
      capabilities: { bounding: DEFAULT_CAPABILITIES, effective: DEFAULT_CAPABILITIES, permitted: DEFAULT_CAPABILITIES },
      noNewPrivileges: true,
    },
    root: { path: input.rootfs, readonly: false },
    hostname: input.hostname,
    mounts: [
      { destination: '/proc', type: 'proc', source: 'proc' },
      { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'] },
      { destination: '/dev/pts', type: 'devpts', source: 'devpts', options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620', 'gid=5'] },
      { destination: '/dev/shm', type: 'tmpfs', source: 'shm', options: ['nosuid', 'noexec', 'nodev', 'mode=1777', 'size=65536k'] },
      { destination: '/dev/mqueue', type: 'mqueue', source: 'mqueue', options: ['nosuid', 'noexec', 'nodev'] },
      { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] },
      { destination: '/tmp', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev', 'mode=1777'] },
      ...(input.resolvConf ? [{ destination: '/etc/resolv.conf', type: 'bind', source: input.resolvConf, options: ['rbind', 'rprivate', 'nosuid', 'nodev', 'noexec', 'ro'] }] : []),
      ...(input.mounts ?? []).map((m) => ({
        destination: m.destination,
        type: 'bind',
        source: m.source,
        options: ['rbind', 'rprivate', 'nosuid', 'nodev', ...(m.readonly ? ['ro', 'noexec'] : ['rw'])],
      })),
    ],
    linux: {
      cgroupsPath: input.cgroup,
      resources: {
        devices: [{ allow: false, access: 'rwm' }],
        memory: { limit: memory, swap: memory },
        cpu: { quota: Math.max(1000, Math.round((millicores * period) / 1000)), period },
        pids: { limit: 4096 },
      },
      namespaces: [{ type: 'pid' }, { type: 'ipc' }, { type: 'uts' }, { type: 'mount' }, { type: 'network', path: input.netns }],
      maskedPaths: ['/proc/acpi', '/proc/asound', '/proc/kcore', '/proc/keys', '/proc/latency_stats', '/proc/timer_list', '/proc/timer_stats', '/proc/sched_debug', '/sys/firmware', '/proc/scsi'],
      readonlyPaths: ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger'],
      seccomp: {
        defaultAction: 'SCMP_ACT_ALLOW',
        architectures: ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32', 'SCMP_ARCH_AARCH64', 'SCMP_ARCH_ARM'],
        syscalls: [{ names: REFUSED_SYSCALLS, action: 'SCMP_ACT_ERRNO', errnoRet: 1 }],
      },
    },
  };
}

/** A numeric `uid[:gid]` of the image's User; a user named by name runs as root (no passwd lookup is made). */
function userOf(user: string | undefined): [number, number] {
  const m = /^(\d+)(?::(\d+))?$/.exec(user ?? '');
  return m ? [Number(m[1]), Number(m[2] ?? m[1])] : [0, 0];
}

const UNITS: Record<string, number> = { '': 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40 };

export function bytes(q: string): number {
  const m = /^(\d+(?:\.\d+)?)([kMGT]i?|)$/.exec(q);
  return m && UNITS[m[2]] !== undefined ? Math.round(Number(m[1]) * UNITS[m[2]]) : 128 * 2 ** 20;
}

function cpu(q: string): number {
  const m = /^(\d+(?:\.\d+)?)(m?)$/.exec(q);
  return m ? Math.round(Number(m[1]) * (m[2] ? 1 : 1000)) : 50;
}
