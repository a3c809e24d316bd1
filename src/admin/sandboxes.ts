// Sandboxes: throw-away orgs with their own superuser key, for an agent to practise in. A sandbox is
// an org whose status carries its expiry (no client can write an org's status, so its own key cannot
// keep it alive), so the TTL is in the store and outlives a restart. Each process keeps a timer per
// sandbox it knows of and looks at the store again now and then (another process's sandboxes); the
// first to find one expired removes it with everything in it, in one transaction.
import { randomBytes } from 'node:crypto';
import { KEEL_ACTOR, sandboxRemovedEvent, type Actor } from '../audit/events.js';
import type { Config } from '../config.js';
import { ApiError } from '../errors.js';
import { KINDS } from '../kinds/index.js';
import { accountLinkOf, createOrg } from '../resources/orgs.js';
import type { Store, StoredItem } from '../store/types.js';
import { applySeed, checkShape, SeedError, type SeedDocument } from './seed.js';

export interface SandboxInfo {
  org: string;
  expiresAt: string;
}

/** How often each process looks for sandboxes it has no timer for (made by another process). */
const RESCAN_MS = 30_000;

export class Sandboxes {
  private readonly known = new Map<string, { expiresAt: number; timer: NodeJS.Timeout }>();
  /** Creations under way (their names): counted against the limit before their org exists. */
  private readonly pending = new Set<string>();
  private readonly rescan: NodeJS.Timeout;
  private closed = false;

  constructor(
    private readonly store: Store,
    private readonly config: Config,
    /** Forgets what this process remembers of an org (its keys, its policies). */
    private readonly forget: (org: string) => void,
    private readonly log: (err: unknown, message: string) => void,
  ) {
    this.rescan = setInterval(() => void this.scan().catch((err) => this.log(err, 'sandbox scan failed')), RESCAN_MS);
    this.rescan.unref();
  }

  /** Finds the sandboxes in the store (at start, and now and then) and sets their timers. */
  async scan(): Promise<void> {
    for (const org of await this.store.orgs()) {
      if (this.known.has(org) || !org.startsWith(PREFIX)) continue;
      const expiresAt = expiryOf(await this.store.get({ org, kind: 'org', gvc: '', name: org }));
      if (expiresAt) this.watch(org, Date.parse(expiresAt));
    }
  }

  list(): SandboxInfo[] {
    return [...this.known].map(([org, s]) => ({ org, expiresAt: new Date(s.expiresAt).toISOString() })).sort((a, b) => a.org.localeCompare(b.org));
  }

  async create(body: unknown, actor: Actor): Promise<SandboxInfo & { key: string }> {
    const { ttlSeconds, seed } = this.parse(body);
    const org = `${PREFIX}${randomBytes(5).toString('hex')}`;
    // Counted in the store, so that several processes on one database share the limit; a creation
    // under way here counts before its org is committed.
    const stored = await this.inStore();
    if (new Set([...stored, ...this.pending]).size >= this.config.maxSandboxes) throw this.full();
    this.pending.add(org);
    try {
      const expiresAt = Date.now() + ttlSeconds * 1000;
      const iso = new Date(expiresAt).toISOString();
      // No superuser but its own key: whoever asked for it is no member of it.
      const { token } = await createOrg(this.store, { name: org, actor: KEEL_ACTOR, superusers: [], accountLink: accountLinkOf(this.config.org), adminServiceAccount: 'admin', status: { sandbox: { expiresAt: iso } } });
      // Another process may have made one at the same time: whoever finds the limit passed once its
      // own is committed takes its own back, so the store never keeps more than the limit.
      if ((await this.inStore()).size > this.config.maxSandboxes) {
        await this.remove(org, actor, 'request', iso, false);
        throw this.full();
      }
      if (seed.length) {
        try {
          await applySeed(this.store, org, seed);
        } catch (err) {
          await this.remove(org, actor, 'seed', iso);
          if (err instanceof SeedError) throw ApiError.badRequest(`the seed was not applied and no sandbox was made: ${err.message}`);
          throw err;
        }
      }
      this.watch(org, expiresAt);
      return { org, key: token!, expiresAt: iso };
    } finally {
      this.pending.delete(org);
    }
  }

  private full(): ApiError {
    return new ApiError('quota_exceeded', `${this.config.maxSandboxes} sandboxes exist already (KEEL_MAX_SANDBOXES): delete one or wait for one to expire`);
  }

  /** The sandboxes in the store: orgs named as one whose status carries an expiry. */
  private async inStore(): Promise<Set<string>> {
    const found = new Set<string>();
    for (const org of await this.store.orgs()) {
      if (!org.startsWith(PREFIX)) continue;
      if (this.known.has(org) || this.pending.has(org) || expiryOf(await this.store.get({ org, kind: 'org', gvc: '', name: org }))) found.add(org);
    }
    return found;
  }

  /** Removes a sandbox now; 404 for an org that is no sandbox. */
  async delete(org: string, actor: Actor): Promise<void> {
    const expiresAt = org.startsWith(PREFIX) ? expiryOf(await this.store.get({ org, kind: 'org', gvc: '', name: org })) : undefined;
    if (!expiresAt) throw ApiError.notFound(`sandbox '${org}' not found`);
    await this.remove(org, actor, 'request', expiresAt);
  }

  close(): void {
    this.closed = true;
    clearInterval(this.rescan);
    for (const s of this.known.values()) clearTimeout(s.timer);
    this.known.clear();
  }

  private parse(body: unknown): { ttlSeconds: number; seed: SeedDocument[] } {
    if (!body || typeof body !== 'object' || Array.isArray(body)) throw ApiError.badRequest('the body must be {"ttlSeconds": N, "seed": [documents]}', [{ path: 'ttlSeconds', message: 'is required' }]);
    const { ttlSeconds, seed, ...extra } = body as Record<string, unknown>;
    const unknown = Object.keys(extra);
    if (unknown.length) throw ApiError.badRequest(`unknown field ${unknown[0]}`, unknown.map((path) => ({ path, message: 'is not a known field' })));
    const max = this.config.sandboxMaxTtlSeconds;
    if (typeof ttlSeconds !== 'number' || !Number.isInteger(ttlSeconds) || ttlSeconds < 1 || ttlSeconds > max) {
      throw ApiError.badRequest(`ttlSeconds must be a whole number of seconds from 1 to ${max} (KEEL_SANDBOX_MAX_TTL)`, [{ path: 'ttlSeconds', message: `must be from 1 to ${max}` }]);
    }
    if (seed === undefined) return { ttlSeconds, seed: [] };
    if (!Array.isArray(seed) || seed.length > MAX_SEED_DOCUMENTS) throw ApiError.badRequest(`seed must be an array of at most ${MAX_SEED_DOCUMENTS} documents`, [{ path: 'seed', message: 'must be an array of documents' }]);
    try {
      return { ttlSeconds, seed: seed.map((doc, i) => ({ file: 'seed', index: i + 1, body: checkShape('seed', i + 1, doc) })) };
    } catch (err) {
      if (err instanceof SeedError) throw ApiError.badRequest(err.message);
      throw err;
    }
  }

  private watch(org: string, expiresAt: number): void {
    if (this.closed) return;
    const previous = this.known.get(org);
    if (previous) clearTimeout(previous.timer);
    // setTimeout holds at most about 24.8 days; longer waits are taken in steps.
    const wait = Math.min(Math.max(0, expiresAt - Date.now()), 2 ** 31 - 1);
    const timer = setTimeout(() => {
      if (Date.now() < expiresAt) return this.watch(org, expiresAt);
      this.remove(org, KEEL_ACTOR, 'ttl', new Date(expiresAt).toISOString()).catch((err) => {
        this.log(err, `sandbox ${org} could not be removed; trying again`);
        setTimeout(() => this.watch(org, expiresAt), 1000).unref();
      });
    }, wait);
    timer.unref();
    this.known.set(org, { expiresAt, timer });
  }

  /**
   * Deletes every item and key of the org in one transaction, with an event in the first org's chain
   * naming who removed it and why (`audited` false: a creation taken back before anyone had it); its
   * own audit events and log lines age out as any org's do. A removal that finds it gone already
   * (another process's, at the same TTL) writes nothing.
   */
  private async remove(org: string, actor: Actor, reason: 'ttl' | 'request' | 'seed', expiresAt: string, audited = true): Promise<void> {
    const known = this.known.get(org);
    if (known) clearTimeout(known.timer);
    await this.store.transaction(async (tx) => {
      if (!(await tx.get({ org, kind: 'org', gvc: '', name: org }, 'update'))) return;
      for (const def of KINDS) {
        const rows = await this.store.list({ org, kind: def.kind, limit: 1_000_000, build: () => ({ where: '1 = 1', orderBy: 'r.gvc, r.name' }) });
        for (const row of rows) {
          if (def.kind === 'serviceaccount') await tx.deleteKeys(org, row.name, []);
          await tx.delete({ org, kind: row.kind, gvc: row.gvc, name: row.name });
        }
      }
      if (audited) await tx.appendAudit(sandboxRemovedEvent(this.config.org, actor, org, reason, expiresAt));
    });
    this.known.delete(org);
    this.forget(org);
  }
}

function expiryOf(item: StoredItem | undefined): string | undefined {
  const expiresAt = (item?.data.status as { sandbox?: { expiresAt?: unknown } } | undefined)?.sandbox?.expiresAt;
  return typeof expiresAt === 'string' ? expiresAt : undefined;
}

/** Every sandbox's name starts so: a first-org name or a user's org never collides with one by chance. */
const PREFIX = 'sandbox-';

const MAX_SEED_DOCUMENTS = 500;
