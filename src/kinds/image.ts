import { defineKind, standardPermissions } from './define.js';
import { anyObject, readOnly, str } from './schema.js';

/** `REPOSITORY:TAG`, with the distribution spec's grammar for each part. */
export const IMAGE_NAME_PATTERN = '^[a-z0-9]+((\\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\\.|_|__|-+)[a-z0-9]+)*)*:[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$';

// Public types: images are produced by pushes to the org's registry; every image field is the registry's.
export default defineKind({
  kind: 'image',
  scope: 'org',
  summary: 'A container image in the private registry of the org, named REPOSITORY:TAG; created by pushing to the registry.',
  name: str({ minLength: 3, maxLength: 384, pattern: IMAGE_NAME_PATTERN }),
  fields: {
    repository: readOnly(str()),
    tag: readOnly(str()),
    digest: readOnly(str()),
    manifest: readOnly(anyObject()),
  },
  permissions: standardPermissions('images', [{ name: 'pull', description: 'Pull the image from the registry' }]),
  implied: { create: ['pull'], pull: ['view'] },
  operations: { create: 'images are created only by pushing them to the registry' },
});
