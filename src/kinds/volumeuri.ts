// A workload container's volume: what its `uri` names and whether its mount `path` is one a
// container may have. The URI schemes are the hosted platform's (reference/workload/volumes):
// Control Plane secrets and volume sets, cloud object and file storage, and scratch (emptyDir).
// Names are checked here so that no name can reach outside the directory it is meant for.

export type VolumeSource =
  | { kind: 'volumeset'; name: string }
  | { kind: 'secret'; name: string; key?: string }
  | { kind: 'scratch'; name: string }
  | { kind: 'cloud'; scheme: string };

export const CLOUD_SCHEMES = ['s3', 'gs', 'azureblob', 'azurefs'] as const;

const NAME = '[a-z](?:[-a-z0-9]{0,62}[a-z0-9])?';
const VOLUMESET = new RegExp(`^cpln://volumeset/(${NAME})$`);
// A dictionary key as a file name: no slash, and not a dot name.
const SECRET = new RegExp(`^cpln://secret/(${NAME})(?:\\.([-_.A-Za-z0-9]{1,253}))?$`);
const SCRATCH = /^scratch:\/\/([A-Za-z0-9](?:[-_A-Za-z0-9]{0,62}))$/;
const CLOUD = new RegExp(`^(${CLOUD_SCHEMES.join('|')})://[^\\s/][^\\s]*$`);

/** What a volume URI names; undefined when it is not one of the forms above. */
export function parseVolumeUri(uri: string): VolumeSource | undefined {
  let m = VOLUMESET.exec(uri);
  if (m) return { kind: 'volumeset', name: m[1] };
  m = SECRET.exec(uri);
  if (m) return m[2] === undefined ? { kind: 'secret', name: m[1] } : /^\.+$/.test(m[2]) ? undefined : { kind: 'secret', name: m[1], key: m[2] };
  m = SCRATCH.exec(uri);
  if (m) return { kind: 'scratch', name: m[1] };
  m = CLOUD.exec(uri);
  if (m) return { kind: 'cloud', scheme: m[1] };
  return undefined;
}

/** Paths the container's own filesystems live at: a volume over them (or under them) would replace or hide them. */
const RESERVED = ['/proc', '/sys', '/dev'];

/** Why `path` cannot be a mount path (undefined when it can): absolute, in its one plain form, outside the reserved trees. */
export function volumePathProblem(path: string): string | undefined {
  if (!path.startsWith('/')) return 'must be an absolute path';
  if (path === '/') return 'must not be the root directory';
  if (/[\0\n\r]/.test(path)) return 'must not contain control characters';
  const segments = path.slice(1).split('/');
  if (segments.some((s) => s === '' || s === '.' || s === '..')) return "must be a plain path: no empty, '.' or '..' segments and no trailing slash";
  const reserved = RESERVED.find((r) => path === r || path.startsWith(`${r}/`));
  if (reserved) return `must not be ${reserved} or a path under it (reserved for the container's own ${reserved.slice(1)} filesystem)`;
  return undefined;
}
