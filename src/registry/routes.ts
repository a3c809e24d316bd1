// The OCI distribution API (v1.1) under /v2/ on the Core API port. An org's registry is named by
// the Host (`ORG.registry.<domain>`, as the hosted service names it) or, at Keel's plain address
// (what `cpln` prints from /discovery's `registry`), by the org of the key that signs in.
// Tags are `image` items written through the generic resource service; content lives in the
// BlobStore, uploads in progress in UploadSessions. A repository serves only the content it holds
// (repositories.ts), so a digest learned elsewhere reads nothing through it.
import { createHash } from 'node:crypto';
import type { Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Authorizer, Target } from '../auth/authorizer.js';
import type { BearerAuthenticator } from '../auth/bearer.js';
import { credentialOf } from '../auth/credentials.js';
import { identity, type Principal } from '../auth/principal.js';
import type { Config } from '../config.js';
import { ApiError } from '../errors.js';
import { findKind } from '../kinds/index.js';
import { listAll } from '../store/list-all.js';
import type { Resources } from '../resources/service.js';
import { coreBase } from '../public-url.js';
import type { Store } from '../store/types.js';
import { readWhole, type BlobStore, type Linked } from './blobs.js';
import { RegistryError, sendRegistryError, toRegistryError } from './errors.js';
import { checkDigest, checkRepository, isRepository, MAX_MANIFEST_BYTES, OCI_INDEX, parseManifest, TAG } from './manifests.js';
import { assignRepositories, reach } from './repositories.js';
import type { UploadSessions } from './uploads.js';
import type { AuthFailures } from '../auth/failures.js';

export interface RegistryDeps {
  config: Config;
  store: Store;
  resources: Resources;
  auth: Authorizer;
  bearer: BearerAuthenticator;
  blobs: BlobStore;
  uploads: UploadSessions;
  /** Failed sign-ins per address, shared with the rest of the API (429 above its limit). */
  failures: AuthFailures;
}

/** A tags/list page without `n` holds at most this many tags. */
const DEFAULT_TAGS_PAGE = 1000;
/** The token endpoint's form body (credentials only). */
const MAX_TOKEN_BODY = 64 * 1024;

/** Paths below /v2/: the repository name, then what is addressed in it. */
const PATH = /^(.+?)\/(?:blobs\/uploads\/?([^/]*)|blobs\/([^/]+)|manifests\/([^/]+)|(tags\/list)|referrers\/([^/]+))$/;

export function mountRegistry(app: FastifyInstance, deps: RegistryDeps): void {
  const def = findKind('image')!;
  const { config, store, resources, auth, bearer, blobs, uploads, failures } = deps;
  // Content linked before repositories were recorded goes to the repositories whose manifests name it, before any request.
  app.addHook('onReady', () => assignRepositories(store, blobs));

  const authenticate = async (request: FastifyRequest): Promise<Principal> => {
    const token = credentialOf(request);
    if (!token) throw new RegistryError('UNAUTHORIZED', 'authentication required', 401);
    const refused = failures.refusal(request.ip, token);
    if (refused) throw refused;
    try {
      return await bearer.authenticate(token, hostOrg(request), request.principal?.mark);
    } catch (err) {
      if (err instanceof ApiError && err.code === 'unauthorized') {
        const tooMany = failures.failed(request.ip, token, err);
        if (tooMany) throw tooMany;
        throw new RegistryError('UNAUTHORIZED', err.message, 401);
      }
      throw err;
    }
  };

  /** The org whose registry the request addresses, and the caller, as a member of it. */
  const signIn = async (request: FastifyRequest): Promise<{ principal: Principal; org: string }> => {
    const principal = await authenticate(request);
    const org = hostOrg(request) ?? principal.org;
    await auth.requireMember(principal, org);
    return { principal, org };
  };

  const targetFor = (org: string, repository: string, tag?: string): Target => ({
    org,
    name: tag === undefined ? repository : `${repository}:${tag}`,
    fields: () => ({ repository, ...(tag === undefined ? {} : { tag }) }),
  });

  /** Throws DENIED unless the caller has one of the permissions on the target. */
  const requireAny = async (principal: Principal, permissions: string[], target: Target): Promise<void> => {
    for (const [i, permission] of permissions.entries()) {
      try {
        await auth.check(principal, permission, def, target);
        return;
      } catch (err) {
        if (!(err instanceof ApiError && err.code === 'forbidden') || i === permissions.length - 1) throw err;
      }
    }
  };
  const PULL = ['pull'];
  const PUSH = ['create', 'edit'];

  app.register(async (registry) => {
    // Bodies are streamed by the handlers: no parser reads them, and no body limit applies but the registry's own.
    registry.removeAllContentTypeParsers();
    registry.addContentTypeParser('*', (_request, _payload, done) => done(null));
    registry.setErrorHandler((error, request, reply) => {
      const known = toRegistryError(error);
      if (known) return challenge(request, reply, known);
      const status = (error as { statusCode?: number }).statusCode;
      if (status && status >= 400 && status < 500) return sendRegistryError(reply, new RegistryError('UNSUPPORTED', (error as Error).message, status));
      request.log.error({ reqId: request.id, err: error }, 'unhandled registry error');
      return sendRegistryError(reply, new RegistryError('UNSUPPORTED', `internal error; quote ${request.id} when reporting it`, 500));
    });
    registry.addHook('onSend', (_request, reply, payload, done) => {
      reply.header('docker-distribution-api-version', 'registry/2.0');
      done(null, payload);
    });
    const open = { config: { public: true } };

    registry.get('/v2', { ...open, schema: { summary: 'The registry answers (200 {}) once the caller is signed in; 401 with a Bearer challenge otherwise', tags: ['registry'] } }, async (request) => {
      await signIn(request);
      return {};
    });

    // The bearer-token flow: the token is the credential itself (a key or a JWT), checked on every use.
    const token = async (request: FastifyRequest) => {
      let credential = credentialOf(request);
      if (request.method === 'POST') {
        const form = new URLSearchParams((await readBody(request.raw, MAX_TOKEN_BODY)).toString('utf8'));
        credential = form.get('refresh_token') ?? form.get('password') ?? credential;
      }
      if (!credential) throw new RegistryError('UNAUTHORIZED', 'credentials required: a service-account key as the password', 401);
      await authenticate(withCredential(request, credential));
      return { token: credential, access_token: credential, expires_in: 3600, issued_at: new Date().toISOString() };
    };
    const tokenRoute = { ...open, schema: { summary: 'Registry bearer token for a service-account key (Basic auth, or an OAuth2 form with refresh_token or password)', tags: ['registry'] } };
    registry.get('/v2/token', tokenRoute, token);
    registry.post('/v2/token', tokenRoute, token);

    const distribution = {
      url: '/v2/*',
      ...open,
      // A HEAD of its own (not fastify's, which would answer Content-Length 0 for a body-less reply).
      exposeHeadRoute: false,
      handler: async (request: FastifyRequest, reply: FastifyReply) => {
        const rest = (request.params as { '*': string })['*'];
        const match = PATH.exec(rest);
        if (!match) throw new RegistryError('UNSUPPORTED', `no such registry path: ${request.method} /v2/${rest.slice(0, 300)}`, 404);
        const [, repository, uploadId, blobDigest, reference, tagsList, referred] = match;
        checkRepository(repository);
        const { principal, org } = await signIn(request);
        const method = request.method;
        const query = request.query as Record<string, string | undefined>;
        const base = `/v2/${repository}`;

        if (uploadId !== undefined) {
          await requireAny(principal, PUSH, targetFor(org, repository));
          if (uploadId === '') {
            if (method !== 'POST') throw unsupported(method, rest);
            return startUpload(request, reply, principal, org, repository, base, query);
          }
          const upload = await uploads.find(org, repository, uploadId);
          const location = `${base}/blobs/uploads/${upload.id}`;
          switch (method) {
            case 'GET':
              return reply.code(204).header('location', location).header('range', rangeOf(upload.size)).header('docker-upload-uuid', upload.id).send();
            case 'PATCH': {
              const range = request.headers['content-range'];
              if (range !== undefined) {
                const m = /^(?:bytes[= ])?(\d+)-(\d+)$/.exec(String(range));
                if (!m || Number(m[1]) !== upload.size) {
                  return sendRegistryError(reply.header('location', location).header('range', rangeOf(upload.size)), new RegistryError('BLOB_UPLOAD_INVALID', `the chunk must start at byte ${upload.size}`, 416));
                }
              }
              await uploads.append(upload, request.raw, lengthOf(request));
              return reply.code(202).header('location', location).header('range', rangeOf(upload.size)).header('docker-upload-uuid', upload.id).send();
            }
            case 'PUT': {
              const digest = query.digest;
              if (!digest) throw new RegistryError('DIGEST_INVALID', 'the digest query parameter is required to finish an upload', 400);
              checkDigest(digest);
              if (hasBody(request)) await uploads.append(upload, request.raw, lengthOf(request));
              await uploads.finish(upload, digest);
              return reply.code(201).header('location', `${base}/blobs/${digest}`).header('docker-content-digest', digest).send();
            }
            case 'DELETE':
              await uploads.cancel(upload);
              return reply.code(204).send();
            default:
              throw unsupported(method, rest);
          }
        }

        if (blobDigest !== undefined) {
          checkDigest(blobDigest);
          if (method === 'DELETE') {
            await requireAny(principal, ['delete'], targetFor(org, repository));
            if (!(await blobs.held(org, repository, blobDigest))) throw blobUnknown(blobDigest);
            await blobs.unlink(org, repository, blobDigest);
            return reply.code(202).send();
          }
          if (method !== 'GET' && method !== 'HEAD') throw unsupported(method, rest);
          await requireAny(principal, PULL, targetFor(org, repository));
          const blob = await blobs.held(org, repository, blobDigest);
          if (!blob) throw blobUnknown(blobDigest);
          return sendContent(request, reply, blobDigest, blob.size, 'application/octet-stream');
        }

        if (reference !== undefined) {
          const byDigest = reference.startsWith('sha256:');
          if (byDigest) checkDigest(reference);
          else if (!TAG.test(reference)) throw new RegistryError('MANIFEST_INVALID', `invalid tag '${reference.slice(0, 200)}'`, 400);
          if (method === 'GET' || method === 'HEAD') {
            await requireAny(principal, PULL, targetFor(org, repository, byDigest ? undefined : reference));
            const digest = byDigest ? reference : await taggedDigest(org, repository, reference);
            const manifest = digest && (byDigest ? await blobs.held(org, repository, digest) : await heldByTag(org, repository, digest));
            if (!manifest || !manifest.mediaType) throw new RegistryError('MANIFEST_UNKNOWN', `manifest unknown: ${repository}:${reference}`, 404);
            return sendContent(request, reply, digest, manifest.size, manifest.mediaType);
          }
          if (method === 'PUT') return putManifest(request, reply, principal, org, repository, reference, byDigest);
          if (method === 'DELETE') {
            await requireAny(principal, ['delete'], targetFor(org, repository, byDigest ? undefined : reference));
            if (!byDigest) {
              await resources.delete(principal, def, { org }, `${repository}:${reference}`).catch((err) => {
                throw err instanceof ApiError && err.code === 'not_found' ? new RegistryError('MANIFEST_UNKNOWN', `manifest unknown: ${repository}:${reference}`, 404) : err;
              });
              return reply.code(202).send();
            }
            const manifest = await blobs.held(org, repository, reference);
            if (!manifest || !manifest.mediaType) throw new RegistryError('MANIFEST_UNKNOWN', `manifest unknown: ${reference}`, 404);
            // Deleting a manifest deletes this repository's tags that name it; other repositories holding it keep it.
            for (const item of await listAll(store, org, 'image', '', `${repository}:`)) {
              if (item.data.digest === reference) await resources.delete(principal, def, { org }, item.name);
            }
            await blobs.unlink(org, repository, reference);
            return reply.code(202).send();
          }
          throw unsupported(method, rest);
        }

        if (tagsList !== undefined) {
          if (method !== 'GET') throw unsupported(method, rest);
          await requireAny(principal, PULL, targetFor(org, repository));
          const n = query.n === undefined ? DEFAULT_TAGS_PAGE : Number(query.n);
          if (!Number.isInteger(n) || n < 0) throw new RegistryError('UNSUPPORTED', 'n must be a whole number', 400);
          const all = (await listAll(store, org, 'image', '', `${repository}:`)).map((item) => item.name.slice(repository.length + 1)).sort();
          const after = query.last === undefined ? all : all.filter((tag) => tag > query.last!);
          const tags = after.slice(0, Math.min(n, DEFAULT_TAGS_PAGE));
          if (after.length > tags.length && tags.length > 0) {
            reply.header('link', `<${base}/tags/list?n=${tags.length}&last=${encodeURIComponent(tags[tags.length - 1])}>; rel="next"`);
          }
          return { name: repository, tags };
        }

        // referrers
        if (method !== 'GET') throw unsupported(method, rest);
        checkDigest(referred!);
        await requireAny(principal, PULL, targetFor(org, repository));
        let referrers = await blobs.referrers(org, referred!, repository);
        if (query.artifactType !== undefined) {
          referrers = referrers.filter((r) => r.artifactType === query.artifactType);
          reply.header('oci-filters-applied', 'artifactType');
        }
        const manifests = [];
        for (const referrer of referrers) manifests.push(await referrerDescriptor(referrer));
        return reply.type(OCI_INDEX).send({ schemaVersion: 2, mediaType: OCI_INDEX, manifests });
      },
    };
    const summary = 'The OCI distribution API v1.1: blobs, uploads, manifests, tags, referrers (see docs/registry.md); errors are {"errors":[{code, message, detail}]}';
    registry.route({ ...distribution, method: ['GET', 'DELETE'], schema: { summary, tags: ['registry'] } });
    // Uploads and manifests are bytes, streamed as sent (a blob chunk, or a manifest's JSON).
    const content = { type: 'string', description: 'a blob or chunk (application/octet-stream), or a manifest (its media type)' };
    registry.route({ ...distribution, method: ['POST', 'PUT', 'PATCH'], schema: { summary, tags: ['registry'], body: content } });
    // Undocumented like every HEAD route: it answers as GET does, without the body.
    registry.route({ ...distribution, method: 'HEAD', schema: { hide: true } });

    /** A referrer as the referrers index lists it: with the manifest's annotations and artifact type (OCI distribution 1.1). */
    async function referrerDescriptor(referrer: Linked): Promise<Record<string, unknown>> {
      const annotations = referrer.annotations !== undefined ? referrer.annotations : await recordedAnnotations(referrer);
      return {
        mediaType: referrer.mediaType,
        digest: referrer.digest,
        size: referrer.size,
        ...(referrer.artifactType ? { artifactType: referrer.artifactType } : {}),
        ...(annotations ? { annotations } : {}),
      };
    }

    /** The annotations of a referrer linked before they were kept with its link: read from the manifest. */
    async function recordedAnnotations(referrer: Linked): Promise<Record<string, unknown> | null> {
      if (referrer.size > MAX_MANIFEST_BYTES) return null;
      try {
        return annotationsOf(JSON.parse((await readWhole(blobs, referrer.digest)).toString('utf8')) as Record<string, unknown>);
      } catch {
        // content collected meanwhile: listed without them
        return null;
      }
    }

    async function startUpload(request: FastifyRequest, reply: FastifyReply, principal: Principal, org: string, repository: string, base: string, query: Record<string, string | undefined>) {
      if (query.mount !== undefined) {
        checkDigest(query.mount);
        if (await mountable(principal, org, query.mount, query.from)) {
          await blobs.link(org, repository, query.mount);
          return reply.code(201).header('location', `${base}/blobs/${query.mount}`).header('docker-content-digest', query.mount).send();
        }
      }
      const upload = await uploads.start(org, repository, identity(principal));
      if (query.digest !== undefined) {
        checkDigest(query.digest);
        try {
          await uploads.append(upload, request.raw, lengthOf(request));
        } catch (err) {
          await uploads.cancel(upload);
          throw err;
        }
        await uploads.finish(upload, query.digest);
        return reply.code(201).header('location', `${base}/blobs/${query.digest}`).header('docker-content-digest', query.digest).send();
      }
      return reply
        .code(202)
        .header('location', `${base}/blobs/uploads/${upload.id}`)
        .header('range', '0-0')
        .header('docker-upload-uuid', upload.id)
        .header('oci-chunk-min-length', '0')
        .send();
    }

    /**
     * A mount names a repository of the same org (the path's org: no name reaches another), which the
     * caller may pull from and which holds the blob. A name outside the grammar is NAME_INVALID; any
     * other source that cannot be mounted starts an ordinary upload, as the spec allows, saying
     * nothing of what that repository holds.
     */
    async function mountable(principal: Principal, org: string, digest: string, from: string | undefined): Promise<boolean> {
      if (from === undefined) return false;
      checkRepository(from);
      try {
        await requireAny(principal, PULL, targetFor(org, from));
      } catch (err) {
        if (err instanceof ApiError && err.code === 'forbidden') return false;
        throw err;
      }
      return (await blobs.held(org, from, digest)) !== undefined;
    }

    /**
     * A tag is a manifest of its repository (tags are written only by pushing to it): what the tag
     * reaches is the repository's even where its links are missing (a snapshot restored a tag whose
     * links went since), and is linked to it again. Not the manifests referring to it: other
     * repositories' referrers of the same digest stay theirs.
     */
    async function heldByTag(org: string, repository: string, digest: string): Promise<Linked | undefined> {
      const held = await blobs.held(org, repository, digest);
      if (held || !(await blobs.linked(org, digest))) return held;
      await reach(blobs, org, [digest], new Set(), false, (d) => blobs.hold(org, repository, d));
      return blobs.held(org, repository, digest);
    }

    async function taggedDigest(org: string, repository: string, tag: string): Promise<string | undefined> {
      const item = await store.get({ org, kind: 'image', gvc: '', name: `${repository}:${tag}` });
      return item?.data.digest as string | undefined;
    }

    async function putManifest(request: FastifyRequest, reply: FastifyReply, principal: Principal, org: string, repository: string, reference: string, byDigest: boolean) {
      const tag = byDigest ? undefined : reference;
      // Decided before anything is stored: moving an existing tag needs edit, a new one create.
      const existing = tag === undefined ? undefined : await store.get({ org, kind: 'image', gvc: '', name: `${repository}:${tag}` });
      await requireAny(principal, tag === undefined ? PUSH : existing ? ['edit'] : ['create'], targetFor(org, repository, tag));
      const bytes = await readBody(request.raw, MAX_MANIFEST_BYTES);
      const digest = `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
      if (byDigest && digest !== reference) throw new RegistryError('DIGEST_INVALID', `the manifest's digest is ${digest}, not ${reference}`, 400);
      const manifest = parseManifest(bytes, request.headers['content-type']);
      // Only content this repository holds: a digest read elsewhere is no way into another repository's blobs.
      for (const blob of manifest.blobs) {
        if (!(await blobs.held(org, repository, blob.digest))) throw new RegistryError('MANIFEST_BLOB_UNKNOWN', `blob unknown to registry: ${blob.digest}`, 400, { digest: blob.digest });
      }
      for (const child of manifest.manifests) {
        const known = await blobs.held(org, repository, child.digest);
        if (!known || !known.mediaType) throw new RegistryError('MANIFEST_BLOB_UNKNOWN', `manifest unknown to registry: ${child.digest}`, 400, { digest: child.digest });
      }
      if (!(await blobs.linked(org, digest))) await uploads.quota.admit(org, bytes.length);
      // A referrer's annotations go with its link: the referrers index lists them without reading each manifest.
      const annotations = manifest.subject ? annotationsOf(manifest.body) : undefined;
      await blobs.put(org, repository, digest, bytes, { mediaType: manifest.mediaType, subject: manifest.subject?.digest, artifactType: manifest.artifactType, annotations });
      if (tag !== undefined) {
        await resources.record(principal, def, { org }, `${repository}:${tag}`, { repository, tag, digest, manifest: manifest.body });
      }
      if (manifest.subject) reply.header('oci-subject', manifest.subject.digest);
      return reply.code(201).header('location', `/v2/${repository}/manifests/${digest}`).header('docker-content-digest', digest).send();
    }

    async function sendContent(request: FastifyRequest, reply: FastifyReply, digest: string, size: number, type: string) {
      reply.header('docker-content-digest', digest).header('accept-ranges', 'bytes').type(type);
      const range = request.headers.range;
      let start = 0;
      let end = size - 1;
      if (range !== undefined) {
        const m = /^bytes=(\d*)-(\d*)$/.exec(String(range));
        const from = m?.[1] === '' ? size - Number(m?.[2]) : Number(m?.[1]);
        const to = m?.[1] === '' || m?.[2] === '' ? size - 1 : Number(m?.[2]);
        if (!m || (m[1] === '' && m[2] === '') || !(from >= 0 && from <= to && from < size)) {
          return sendRegistryError(reply.header('content-range', `bytes */${size}`), new RegistryError('BLOB_UNKNOWN', `range ${String(range).slice(0, 100)} is not satisfiable for ${size} bytes`, 416));
        }
        start = from;
        end = Math.min(to, size - 1);
        reply.code(206).header('content-range', `bytes ${start}-${end}/${size}`);
      }
      reply.header('content-length', String(size === 0 ? 0 : end - start + 1));
      if (request.method === 'HEAD' || size === 0) return reply.send();
      return reply.send(blobs.read(digest, start, end));
    }
  });

  function challenge(request: FastifyRequest, reply: FastifyReply, err: RegistryError): FastifyReply {
    if (err.status === 401) {
      // Where Keel says it is (KEEL_PUBLIC_URL, else a Host only when it is loopback or Keel's own address): never the header's text as sent.
      const realm = `${coreBase(config, request)}/v2/token`;
      const match = PATH.exec((request.params as { '*'?: string })['*'] ?? '');
      const scope = match && isRepository(match[1]) ? `,scope="repository:${match[1]}:pull,push"` : '';
      reply.header('www-authenticate', `Bearer realm="${realm}",service="keel"${scope}`);
    }
    return sendRegistryError(reply, err);
  }
}

/** `ORG.registry.<domain>` names the org, as the hosted service's registry hosts do. */
export function hostOrg(request: FastifyRequest): string | undefined {
  return /^([a-z][-a-z0-9]*[a-z0-9])\.registry\./.exec(request.headers.host ?? '')?.[1];
}

/** A manifest's annotations when they are a JSON object, else null. */
function annotationsOf(manifest: Record<string, unknown>): Record<string, unknown> | null {
  const annotations = manifest.annotations;
  return annotations && typeof annotations === 'object' && !Array.isArray(annotations) ? (annotations as Record<string, unknown>) : null;
}

function withCredential(request: FastifyRequest, credential: string): FastifyRequest {
  return { headers: { ...request.headers, authorization: `Bearer ${credential}` } } as FastifyRequest;
}

function rangeOf(size: number): string {
  return `0-${Math.max(0, size - 1)}`;
}

function lengthOf(request: FastifyRequest): number | undefined {
  const length = request.headers['content-length'];
  return length === undefined ? undefined : Number(length);
}

function hasBody(request: FastifyRequest): boolean {
  const length = request.headers['content-length'];
  return request.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

function blobUnknown(digest: string): RegistryError {
  return new RegistryError('BLOB_UNKNOWN', `blob unknown to registry: ${digest}`, 404, { digest });
}

function unsupported(method: string, rest: string): RegistryError {
  return new RegistryError('UNSUPPORTED', `${method} is not supported on /v2/${rest.slice(0, 300)}`, 405);
}

/** The whole body, refused once it is larger than `max`. */
async function readBody(stream: Readable, max: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of stream) {
    size += (chunk as Buffer).length;
    if (size > max) throw new RegistryError('SIZE_INVALID', `the body is larger than ${max} bytes`, 413);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

