// Image references that name an org's registry in Keel: `//image/NAME:TAG` (the workload's org),
// `/org/ORG/image/NAME:TAG`, `ORG.registry.<domain>/NAME:TAG`, and Keel's own `host:port/NAME:TAG`
// (the workload's org, as a repository name is only the path there). Kinds check them at write
// time; the reconciler and the runtime resolve them.

/** A reference to an org's registry: the item name (`REPO:TAG`) or, pinned, the repository and manifest digest. */
export type RegistryImage = { org: string; name: string } | { org: string; repository: string; digest: string };

/**
 * The registry image `reference` names, if it names one: its org and either the item name
 * (`REPO:TAG`) or, pinned (`REPO@sha256:…`, a tag beside the digest being ignored as clients
 * ignore it), the manifest digest. At one of `hosts` (Keel's own address) the registry is `org`'s.
 */
export function registryImage(reference: string, org: string, hosts: string[] = []): RegistryImage | undefined {
  const m = /^(?:\/\/image\/|\/org\/([^/]+)\/image\/|([a-z][-a-z0-9]*[a-z0-9])\.registry\.[^/]+\/)(.+)$/.exec(reference);
  const host = m ? undefined : hosts.find((h) => reference.startsWith(`${h}/`));
  if (!m && !host) return undefined;
  const path = m ? m[3] : reference.slice(host!.length + 1);
  const owner = m?.[1] ?? m?.[2] ?? org;
  const at = path.indexOf('@');
  if (at >= 0) return { org: owner, repository: path.slice(0, at).replace(/:[^/]*$/, ''), digest: path.slice(at + 1) };
  const name = /:[^/]+$/.test(path) ? path : `${path}:latest`;
  return { org: owner, name };
}
