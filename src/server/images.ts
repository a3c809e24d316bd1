// GET /org/{org}/image/-latest/{repository}: the newest image of a repository (by creation) among
// those the caller may view, as Terraform's cpln_image data source reads it when no tag is given.
import type { FastifyInstance } from 'fastify';
import type { Authorizer } from '../auth/authorizer.js';
import { ApiError } from '../errors.js';
import { findKind } from '../kinds/index.js';
import { listAll } from '../store/list-all.js';
import { present } from '../resources/present.js';
import { targetOf } from '../resources/service.js';
import type { Store } from '../store/types.js';

export function mountImages(app: FastifyInstance, store: Store, auth: Authorizer): void {
  const def = findKind('image')!;
  app.get('/org/:org/image/-latest/:repository', async (request) => {
    const { org, repository } = request.params as { org: string; repository: string };
    await auth.requireMember(request.principal, org);
    if (repository.includes(':')) throw ApiError.badRequest(`'${repository}' names a tag; -latest takes a repository name without one`);
    const images = (await listAll(store, org, 'image', '', `${repository}:`)).sort((a, b) => (a.created < b.created ? 1 : a.created > b.created ? -1 : 0));
    for (const image of images) {
      try {
        await auth.check(request.principal, 'view', def, targetOf(image));
        return present(def, image);
      } catch (err) {
        if (!(err instanceof ApiError && err.code === 'forbidden')) throw err;
      }
    }
    throw ApiError.notFound(`no image of repository '${repository}' found`);
  });
}
