// Where clients reach Keel, for every answer that names Keel's own address (/discovery, a
// deployment's status.remote, the console's allowed connections, the Audit API's CORS). The Host
// header is the caller's to write: a page on evil.example that rebinds its name to Keel's address
// sends `Host: evil.example`, and must not have Keel name evil.example as itself. So KEEL_PUBLIC_URL
// decides when set; otherwise a Host is believed only when it names a loopback address or the
// address Keel was reached at, and the listen address is used for any other.
import type { FastifyRequest } from 'fastify';
import { isIP } from 'node:net';
import type { Config } from './config.js';

/** The Core API's base URL as clients should use it (no trailing slash). */
export function coreBase(config: Config, request: FastifyRequest): string {
  if (config.publicUrl) return config.publicUrl;
  const host = trustedHost(config, request);
  return `${request.protocol}://${host ?? listenAddress(config, request)}`;
}

/** The Audit API's base URL: the Core API's host on the audit port. */
export function auditBase(config: Config, request: FastifyRequest): string {
  const core = new URL(coreBase(config, request));
  return `${core.protocol}//${core.hostname.includes(':') && !core.hostname.startsWith('[') ? `[${core.hostname}]` : core.hostname}:${config.auditPort}`;
}

/**
 * Whether a browser origin is the Core API's own (where the console is served): KEEL_PUBLIC_URL's
 * origin when set; otherwise an http(s) origin on the Core API's port whose host is loopback or
 * the address Keel listens on (never a name a page could rebind).
 */
export function isCoreOrigin(config: Config, request: FastifyRequest, origin: string | undefined, corePort: number | undefined): boolean {
  if (!origin) return false;
  let url: URL;
  try {
    url = new URL(origin);
  } catch {
    return false;
  }
  if (url.origin !== origin) return false;
  if (config.publicUrl) return origin === new URL(config.publicUrl).origin;
  return (url.protocol === 'http:' || url.protocol === 'https:') && corePort !== undefined && url.port === String(corePort) && isTrustedName(config, request, url.hostname);
}

/** The Host header, when it names a loopback address or the address Keel listens on or was reached at. */
function trustedHost(config: Config, request: FastifyRequest): string | undefined {
  const host = request.headers.host;
  // Only a bare host and port: no user info, path or anything else that URL parsing would drop.
  if (!host || !BARE_HOST.test(host)) return undefined;
  let url: URL;
  try {
    url = new URL(`http://${host}`);
  } catch {
    return undefined;
  }
  return isTrustedName(config, request, url.hostname) ? host.toLowerCase() : undefined;
}

const BARE_HOST = /^[\w.-]+(:\d{1,5})?$|^\[[\da-fA-F:.]+\](:\d{1,5})?$/;

function isTrustedName(config: Config, request: FastifyRequest, hostname: string): boolean {
  const name = bare(hostname);
  if (name === 'localhost' || name === '::1' || (isIP(name) === 4 && name.startsWith('127.'))) return true;
  const listening = bare(config.host.toLowerCase());
  if (!WILDCARDS.has(listening) && name === listening) return true;
  const local = localAddressOf(request);
  return local !== undefined && name === local;
}

const WILDCARDS = new Set(['0.0.0.0', '::', '']);

/** The address and port the connection arrived at, or the configured ones (a connection without a socket address: inject()). */
function listenAddress(config: Config, request: FastifyRequest): string {
  const local = localAddressOf(request);
  const port = request.socket?.localPort ?? config.port;
  const address = local ?? (WILDCARDS.has(config.host) ? '127.0.0.1' : config.host);
  return `${isIP(address) === 6 ? `[${address}]` : address}:${port}`;
}

function localAddressOf(request: FastifyRequest): string | undefined {
  const address = request.socket?.localAddress;
  if (!address) return undefined;
  // An IPv4 connection to a dual-stack socket shows as ::ffff:a.b.c.d.
  return address.startsWith('::ffff:') && isIP(address.slice(7)) === 4 ? address.slice(7) : address.toLowerCase();
}

function bare(hostname: string): string {
  return hostname.startsWith('[') && hostname.endsWith(']') ? hostname.slice(1, -1) : hostname;
}
