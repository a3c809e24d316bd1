// What the runc runtime's tests need: root, runc, umoci and a static busybox (and haproxy, for the
// suites that put it in front of the ingress). Missing any, the
// suites skip with a visible notice, unless KEEL_REQUIRE_RUNTIME=1 (CI), where they fail.
// Images are built in the test from /bin/busybox with umoci, as a user would build one by hand.
import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { scopeOf } from '../../src/runtime/runc.js';
import { join } from 'node:path';

export const BUSYBOX = '/bin/busybox';

/** Why the runtime tests cannot run here (false when they can); `haproxy`: the suite runs HAProxy in front of the ingress too. */
export function runtimeMissing(options: { haproxy?: boolean } = {}): string | false {
  const missing: string[] = [];
  if (process.getuid?.() !== 0) missing.push('root');
  for (const [tool, version] of [['runc', '--version'], ['umoci', '--version'], ['ip', '-V'], ['nft', '--version'], ...(options.haproxy ? [['haproxy', '-v']] : [])]) {
    try {
      execFileSync(tool, [version], { stdio: 'ignore' });
    } catch {
      missing.push(tool);
    }
  }
  if (!existsSync(BUSYBOX)) missing.push(`a static busybox at ${BUSYBOX}`);
  if (missing.length === 0) return false;
  const why = `the runc runtime tests need ${missing.join(', ')}`;
  if (process.env.KEEL_REQUIRE_RUNTIME === '1') throw new Error(`${why} (KEEL_REQUIRE_RUNTIME=1)`);
  console.log(`# NOTICE: ${why}; they are SKIPPED`);
  return why;
}

/**
 * An OCI layout under `root` holding `tag`: busybox with its applets linked in /bin, `files`
 * added (path → content), and `cmd` as the image's command. Gives the `oci:DIR:TAG` reference.
 */
export function busyboxImage(root: string, tag: string, cmd: string[], files: Record<string, string> = {}, options: { architecture?: string; user?: string } = {}): string {
  const layout = mkdtempSync(join(root, 'layout-'));
  rmSync(layout, { recursive: true });
  const bundle = mkdtempSync(join(root, 'bundle-'));
  rmSync(bundle, { recursive: true });
  const umoci = (...args: string[]) => execFileSync('umoci', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  umoci('init', '--layout', layout);
  umoci('new', '--image', `${layout}:${tag}`);
  umoci('unpack', '--image', `${layout}:${tag}`, bundle);
  const rootfs = join(bundle, 'rootfs');
  mkdirSync(join(rootfs, 'bin'), { recursive: true });
  copyFileSync(BUSYBOX, join(rootfs, 'bin', 'busybox'));
  chmodSync(join(rootfs, 'bin', 'busybox'), 0o755);
  for (const applet of ['sh', 'echo', 'cat', 'ls', 'httpd', 'sleep', 'head', 'dd', 'tar', 'id', 'true', 'false', 'wget', 'test', 'mkdir', 'hostname', 'nc', 'chmod', 'printf']) symlinkSync('busybox', join(rootfs, 'bin', applet));
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(join(rootfs, path, '..'), { recursive: true });
    writeFileSync(join(rootfs, path), content);
  }
  umoci('repack', '--image', `${layout}:${tag}`, bundle);
  const config = ['config', '--image', `${layout}:${tag}`, '--config.workingdir', '/'];
  for (const c of cmd) config.push('--config.cmd', c);
  if (options.architecture) config.push('--architecture', options.architecture);
  if (options.user) config.push('--config.user', options.user);
  umoci(...config);
  rmSync(bundle, { recursive: true, force: true });
  return `oci:${layout}:${tag}`;
}

/** A subnet and nothing else in use by this test process: 10.213.X.0/24 with X from the pid. */
export function testSubnet(): string {
  return `10.213.${(process.pid % 200) + 20}.0/24`;
}

/**
 * What the runtime of the Keel on `dataDir` has on the host: runc containers, network namespaces,
 * interfaces on its bridge, mounts under the data directory and cgroups. Other Keels' (other
 * suites running alongside) have other names and are not counted.
 */
export function leftovers(dataDir: string): { containers: string[]; netns: string[]; veth: string[]; mounts: string[]; cgroups: string[] } {
  const scope = scopeOf(dataDir);
  const root = join(dataDir, 'runtime', 'runc');
  const ports = `/sys/class/net/kb${scope}/brif`;
  return {
    // runc's own state directories, read directly: `runc list` fails outright when a container it
    // has just listed is deleted before it reads its state.
    containers: existsSync(root) ? readdirSync(root).filter((id) => existsSync(join(root, id, 'state.json'))) : [],
    netns: (existsSync('/var/run/netns') ? readdirSync('/var/run/netns') : []).filter((n) => n.startsWith(`keel-${scope}-`)),
    veth: existsSync(ports) ? readdirSync(ports) : [],
    mounts: readFileSync('/proc/self/mounts', 'utf8').split('\n').filter((l) => l.includes(dataDir)),
    cgroups: ['memory', 'pids', 'cpu'].flatMap((c) => (existsSync(`/sys/fs/cgroup/${c}`) ? readdirSync(`/sys/fs/cgroup/${c}`) : []).filter((n) => n.startsWith(`keel-${scope}-`)).map((n) => `${c}/${n}`)),
  };
}

export const NOTHING_LEFT = { containers: [], netns: [], veth: [], mounts: [], cgroups: [] };

/** HAProxy processes (KEEL_INGRESS_PROXY=haproxy) serving the ingress of the Keel on `dataDir`, as "PID cmdline". */
export function haproxies(dataDir: string): string[] {
  const config = join(dataDir, 'runtime', 'haproxy', 'haproxy.cfg');
  return readdirSync('/proc')
    .filter((pid) => /^\d+$/.test(pid))
    .flatMap((pid) => {
      try {
        const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ');
        return cmdline.includes(config) ? [`${pid} ${cmdline}`] : [];
      } catch {
        return [];
      }
    });
}
