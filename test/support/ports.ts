// Ports for child `keel serve` processes that must keep their port across restarts. They come from
// below the kernel's ephemeral range: ports given out for port 0 (the servers of other tests that
// run alongside, in CI) and for outgoing connections never land there, so no other server takes a
// child's port, or answers its readiness check in its place, while the child starts or restarts.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

const LOWEST = 10_000;
const given = new Set<number>();

function ephemeralStart(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    if (Number.isInteger(low) && low > LOWEST + 1000) return low;
  } catch {
    // not Linux: IANA's dynamic range starts at 49152, and Linux's default at 32768
  }
  return 32_768;
}

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** A port nobody listens on now, below the ephemeral range, and not given before by this process. */
export async function freePort(): Promise<number> {
  const end = ephemeralStart();
  for (;;) {
    const port = LOWEST + Math.floor(Math.random() * (end - LOWEST));
    if (given.has(port) || !(await canListen(port))) continue;
    given.add(port);
    return port;
  }
}
