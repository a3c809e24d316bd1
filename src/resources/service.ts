import { randomUUID } from 'node:crypto';
import type { Authorizer, Target, ViewFilter } from '../auth/authorizer.js';
import type { Principal } from '../auth/principal.js';
import { ApiError } from '../errors.js';
import { resourceSchema } from '../kinds/derive.js';
import { findKind } from '../kinds/index.js';
import type { JsonSchema } from '../kinds/schema.js';
import type { HookContext, KindDef, Place, Reference, Resource } from '../kinds/types.js';
import { applyPatch, MAX_DEPTH } from '../patch/index.js';
import { compileQuery, cursorOf, pageInMemory, parseQuery, type Query } from '../query/index.js';
import type { AtPosition, AuditRecord, ItemKey, Store, StoredItem, Tx } from '../store/types.js';
import { ACCESS_KINDS } from '../store/access-kinds.js';
import { parseLink, resolveLink, resolveLinksIn, selfLink } from './links.js';
import { present, presented } from './present.js';
import { actorOf, changeEvent, eventlogEntry, historyEntry, PLATFORM_CONTEXT } from '../audit/events.js';
import { announce, type AppendedEvent } from '../audit/changes.js';
import { createOrg, requireOrgCreator, type OrgCreationRule } from './orgs.js';
import { mintKey } from '../auth/keys.js';
import { validateResource } from './validate.js';
import { deepEqual, setOwn } from '../json.js';

export interface WriteOptions {
  dryRun?: boolean;
}

export interface Page {
  items: Resource[];
  /** Cursor of the last item when more may follow. */
  next?: string;
  query: Query;
  /** The org's chain position the page reflects (see AtPosition). */
  seq: number;
}

/** What a write did: the item's resulting (or, for a delete, last) state and the audit action, if anything changed. */
interface Change {
  item: StoredItem;
  action?: string;
}

export interface ResourceSettings {
  /** Record an audit event with every change (off only to measure what auditing costs). */
  audit: boolean;
  /** Longest a list or query may run in the database (unbounded when absent). */
  queryBudgetMs?: number;
  /** Who may create orgs through the API (anyone authenticated when absent). */
  orgCreation?: OrgCreationRule;
  /** The billing account that owns the orgs created through the API (see billing.ts). */
  accountLink: string;
  /** The host:port forms Keel's registry is reached at (an image there is of the workload's org). */
  registryHosts?: () => string[];
}

/** `property: "*"` terms look at every top-level value of every candidate: the costliest kind of term. */
const MAX_WILDCARD_TERMS = 10;
/** All of a query's term values together, in characters. */
const MAX_TERM_TEXT = 16 * 1024;

/** Thrown inside a transaction to roll back a dry run while keeping its result. */
class DryRun {
  constructor(readonly item: StoredItem) {}
}


/** `next` of `value`: at once when the value is at hand, else once it comes (a throw in `next` is then a rejection). */
function andThen<T, U>(value: T | Promise<T>, next: (value: T) => U | Promise<U>): U | Promise<U> {
  return value instanceof Promise ? value.then(next) : next(value);
}

const isGvcScoped = (kind: string) => findKind(kind)?.scope === 'gvc';

/**
 * The generic resource service: every kind's create, read, list, query, patch, replace, apply
 * and delete, with the kind's hooks, validation, authorization and version checks.
 */
export class Resources {
  constructor(
    private readonly store: Store,
    private readonly auth: Authorizer,
    /** Told when a write may change who is who or who may do what in an org. */
    private readonly onAccessChange: (org: string) => void = (org) => auth.invalidate(org),
    private readonly settings: ResourceSettings,
  ) {}

  /** An item as the caller may see it; presented once per stored state (see presented()), unless revealed. */
  async get(principal: Principal, def: KindDef, place: Place, name: string, options: { reveal?: boolean } = {}): Promise<Resource> {
    return (await this.getAt(principal, def, place, name, options)).value;
  }

  /**
   * get(), with the org's chain position the item reflects. The hot read path: what is at hand (the
   * org's decisions, an item the store answers at once) is not waited for, so a GET of a cached item
   * makes no promise and takes no extra turn of the event loop.
   */
  getAt(principal: Principal, def: KindDef, place: Place, name: string, options: { reveal?: boolean } = {}): AtPosition<Resource> | Promise<AtPosition<Resource>> {
    return andThen(this.auth.requireMember(principal, place.org), () =>
      andThen(this.gvcFound(def, place, principal.mark), () =>
        andThen(this.store.getAt(keyOf(def, place, name), principal.mark), ({ value: item, seq }) => {
          if (!item) throw notFound(def, place, name);
          return andThen(this.auth.check(principal, options.reveal ? 'reveal' : 'view', def, readTarget(def, item)), () => ({
            value: options.reveal ? present(def, item, options) : presented(def, item),
            seq,
          }));
        }),
      ),
    );
  }

  /** A page of a list or query: `after` continues from a previous page's cursor. */
  async query(
    principal: Principal,
    def: KindDef,
    place: Place,
    query: Query,
    page: { limit: number; after?: string },
  ): Promise<Page> {
    assertAffordable(query);
    await this.auth.requireMember(principal, place.org);
    await this.gvcFound(def, place, principal.mark);
    const view: ViewFilter = await this.auth.viewFilter(principal, def, place.org);
    const { value: rows, seq } = await this.store.listAt({
      budgetMs: this.settings.queryBudgetMs,
      org: place.org,
      kind: def.kind,
      gvc: def.scope === 'gvc' ? place.gvc : def.kind === 'org' ? undefined : '',
      limit: page.limit + 1,
      build: (params) => {
        const compiled = compileQuery(query, params, { org: place.org, after: page.after, drive: true });
        // One join at most: the view filter may drive only when the query does not.
        const filter = view?.sql(params, !compiled.join);
        const where = filter ? `(${compiled.where}) AND (${filter.where})` : compiled.where;
        return { where, orderBy: compiled.orderBy, join: compiled.join ?? filter?.join };
      },
      memory: (items, limit) => pageInMemory(query, items, { after: page.after, limit, also: view?.matches }),
    }, principal.mark);
    const more = rows.length > page.limit;
    const items = more ? rows.slice(0, page.limit) : rows;
    const last = items[items.length - 1];
    return {
      // Presented once per stored state: items answered from the read cache are shared between lists.
      items: items.map((row) => presented(def, row)),
      next: more && last ? cursorOf(query, presented(def, last), { gvc: last.gvc || undefined }) : undefined,
      query,
      seq,
    };
  }

  async create(principal: Principal, def: KindDef, place: Place, body: unknown, options: WriteOptions = {}): Promise<Resource> {
    await this.auth.requireMember(principal, place.org);
    await this.requireGvc(def, place);
    const input = requireObject(body);
    // Not left to validation: its type coercion would accept `true` as the name "true" while the key below had none.
    if (typeof input.name !== 'string') throw ApiError.badRequest('name is required (a string)', [{ path: 'name', message: 'is required (a string)' }]);
    const data = await this.admitNew(principal, def, place, input.name, input);
    const item = await this.write(principal, def, place, options, (tx, hooks) => this.insertNew(tx, hooks, def, place, data));
    return presented(def, item);
  }

  async patch(principal: Principal, def: KindDef, place: Place, name: string, body: unknown, options: WriteOptions = {}): Promise<Resource> {
    assertAllowed(def, 'update');
    const patch = requireObject(body);
    const expected = preconditionOf(patch);
    assertSameName(def, name, patch.name);
    await this.requireScope(principal, def, place);
    const item = await this.change(principal, 'edit', def, place, name, expected, options, async (tx, hooks, locked) => {
      const next = applyPatch(locked.data, withoutPrecondition(patch), resourceSchema(def), { link: (link) => resolveLink(link, place, isGvcScoped) });
      next.name = name;
      this.normalize(def, place, next);
      validateResource(def, next);
      return this.update(tx, hooks, def, locked, next);
    });
    return presented(def, item);
  }

  /** PUT on an item: replaces it whole (absent fields reset to defaults), or creates it. */
  async replace(
    principal: Principal,
    def: KindDef,
    place: Place,
    name: string,
    body: unknown,
    options: WriteOptions = {},
  ): Promise<{ resource: Resource; created: boolean }> {
    const input = requireObject(body);
    assertSameName(def, name, input.name);
    return this.apply(principal, def, place, { ...input, name }, options);
  }

  /**
   * PUT on a collection: creates the named item or replaces it. One transaction decides which, on
   * the item as it finds it locked, so creates and deletes of the same name racing the apply only
   * change which of 200 and 201 it answers. Only two creates of one name at once can collide (the
   * store's unique key refuses the second); the loser reads again in the same transaction and
   * finds the item (the store's insert leaves the transaction usable).
   */
  async apply(principal: Principal, def: KindDef, place: Place, body: unknown, options: WriteOptions = {}): Promise<{ resource: Resource; created: boolean }> {
    const input = requireObject(body);
    if (typeof input.name !== 'string') throw ApiError.badRequest('name is required', [{ path: 'name', message: 'is required' }]);
    const name = input.name;
    await this.auth.requireMember(principal, place.org);
    await this.requireGvc(def, place);
    const expected = preconditionOf(input);
    let created = false;
    const item = await this.write(principal, def, place, options, async (tx, hooks) => {
      let data: Record<string, unknown> | undefined;
      for (let attempt = 1; ; attempt++) {
        const locked = await tx.get(keyOf(def, place, name), 'update');
        created = locked === undefined;
        if (locked) {
          assertAllowed(def, 'update');
          await this.auth.check(principal, 'edit', def, targetOf(locked));
          assertPrecondition(def, locked, expected);
          return this.update(tx, hooks, def, locked, this.prepare(def, place, input, locked));
        }
        data ??= await this.admitNew(principal, def, place, name, input);
        try {
          return await this.insertNew(tx, hooks, def, place, data);
        } catch (err) {
          // Another create of the name committed first: the next read (a fresh statement) finds it.
          if (attempt >= APPLY_ATTEMPTS || !(err instanceof ApiError && err.code === 'already_exists')) throw err;
        }
      }
    });
    return { resource: presented(def, item), created };
  }

  /**
   * Writes the server-owned (read-only) fields of an item on the caller's behalf, as a push to the
   * registry records an image: creates the item (the caller needs `create`) or updates it (`edit`),
   * in one transaction with its audit event. The kind's rules for client writes do not apply: the
   * caller never wrote the item through the API, Keel did from what the caller pushed.
   */
  async record(principal: Principal, def: KindDef, place: Place, name: string, fields: Record<string, unknown>): Promise<{ resource: Resource; created: boolean }> {
    await this.requireScope(principal, def, place);
    let created = false;
    const item = await this.write(principal, def, place, {}, async (tx, hooks) => {
      const key = keyOf(def, place, name);
      const current = await tx.get(key, 'update');
      if (current) {
        await this.auth.check(principal, 'edit', def, targetOf(current));
        const next = { ...current.data, ...fields };
        validateResource(def, next);
        return this.update(tx, hooks, def, current, next);
      }
      const data: Record<string, unknown> = { name, description: name, tags: {}, ...fields };
      await this.auth.check(principal, 'create', def, { org: place.org, gvc: place.gvc, name, fields: () => data });
      validateResource(def, data);
      const now = new Date().toISOString();
      const inserted: StoredItem = { ...key, id: randomUUID(), version: 1, created: now, lastModified: now, data: stored(data) };
      await tx.insert(inserted);
      created = true;
      return { item: inserted, action: 'create' };
    });
    return { resource: presented(def, item), created };
  }

  async delete(principal: Principal, def: KindDef, place: Place, name: string): Promise<void> {
    assertAllowed(def, 'delete');
    await this.requireScope(principal, def, place);
    await this.change(principal, 'delete', def, place, name, undefined, {}, async (tx, hooks, locked) => {
      await def.beforeDelete?.(present(def, locked, { reveal: true }), hooks);
      await tx.delete(locked);
      await def.afterWrite?.(name, undefined, hooks);
      return { item: locked, action: 'delete' };
    });
  }

  /** An item's audit events (its -eventlog), for a caller who may view the item. */
  async eventlog(principal: Principal, def: KindDef, place: Place, name: string, page: { limit: number; after?: number }) {
    await this.auth.requireMember(principal, place.org);
    await this.requireGvc(def, place);
    const item = await this.store.get(keyOf(def, place, name));
    if (!item) throw notFound(def, place, name);
    await this.auth.check(principal, 'view', def, targetOf(item));
    const records = await this.store.audit({ org: item.org, context: PLATFORM_CONTEXT, resourceId: item.id, afterSeq: page.after, limit: page.limit + 1 });
    const more = records.length > page.limit;
    const items = (more ? records.slice(0, page.limit) : records).map(eventlogEntry);
    return { items, next: more ? records[page.limit - 1].seq : undefined };
  }

  /**
   * An item's versions from its audit events (its -history), newest first, for a caller who may view
   * the item; `before` pages on by event sequence. One page is read, newest first on the item's
   * index (its route waits its turn among long reads, see server/fairness.ts). Hidden fields (secret data) are not in the
   * recorded snapshots; the kind's hidden() runs again so history can never show them. Status that
   * Keel's reconcilers record is left out: it makes no version.
   */
  async history(principal: Principal, def: KindDef, place: Place, name: string, page: { limit: number; before?: number }) {
    await this.auth.requireMember(principal, place.org);
    await this.requireGvc(def, place);
    const item = await this.store.get(keyOf(def, place, name));
    if (!item) throw notFound(def, place, name);
    await this.auth.check(principal, 'view', def, targetOf(item));
    const records = await this.store.audit({
      org: item.org,
      context: PLATFORM_CONTEXT,
      resourceId: item.id,
      exceptActionType: 'status',
      throughSeq: page.before === undefined ? undefined : page.before - 1,
      newestFirst: true,
      limit: page.limit + 1,
    });
    const more = records.length > page.limit;
    const items = (more ? records.slice(0, page.limit) : records).map((record) => historyEntry(def, record));
    return { items, next: more ? records[page.limit - 1].seq : undefined };
  }

  /** The orgs the caller may view: its own and those whose groups or policies name it. */
  async listOrgs(principal: Principal): Promise<Resource[]> {
    const def = findKind('org')!;
    const visible: Resource[] = [];
    for (const { org, as } of await this.orgCandidates(principal)) {
      const item = await this.store.get(keyOf(def, { org }, org));
      if (!item) continue;
      try {
        await this.auth.check(as, 'view', def, targetOf(item));
        visible.push(present(def, item));
      } catch (err) {
        if (!(err instanceof ApiError && err.code === 'forbidden')) throw err;
      }
    }
    return visible;
  }

  /**
   * The orgs a principal may belong to, and who it is there: a service account is one principal
   * everywhere; a user (JWT) is the user of its email in each org that has one.
   */
  private async orgCandidates(principal: Principal): Promise<Array<{ org: string; as: Principal }>> {
    if (principal.kind === 'user') {
      const out: Array<{ org: string; as: Principal }> = [];
      for (const org of await this.store.orgs()) {
        if (await this.store.get({ org, kind: 'user', gvc: '', name: principal.name })) {
          out.push({ org, as: { ...principal, org, link: `/org/${org}/user/${principal.name}` } });
        }
      }
      return out;
    }
    const orgs = new Set([principal.org, ...(await this.store.orgsNaming(principal.link))]);
    return [...orgs].sort().map((org) => ({ org, as: principal }));
  }

  /**
   * POST /org (and every other route that creates an org): a principal the operator's rule allows
   * (see requireOrgCreator) creates an org and becomes one of its superusers (a user, through a
   * user of its email created with the org).
   */
  async createOrg(principal: Principal, body: unknown): Promise<Resource> {
    const def = findKind('org')!;
    if (this.settings.orgCreation) await requireOrgCreator(this.store, principal, this.settings.orgCreation);
    const input = requireObject(body);
    const data = this.prepare(def, { org: typeof input.name === 'string' ? input.name : '' }, input, undefined); // validation refuses a non-string name
    const name = data.name as string;
    const isUser = principal.kind === 'user';
    await createOrg(this.store, {
      name,
      actor: actorOf(principal),
      description: data.description as string,
      tags: data.tags as Record<string, unknown>,
      superusers: [isUser ? `/org/${name}/user/${principal.name}` : principal.link],
      users: isUser ? [principal.name] : [],
      accountLink: this.settings.accountLink,
    });
    const item = await this.store.get(keyOf(def, { org: name }, name));
    return present(def, item!);
  }

  /** Mints a key for a service account: shown once, only its hash is stored. */
  async addKey(principal: Principal, def: KindDef, place: Place, name: string, body: unknown): Promise<Record<string, unknown>> {
    const input = body === undefined || body === '' ? {} : requireObject(body);
    const description = input.description ?? '';
    if (typeof description !== 'string' || description.length > 250) {
      throw ApiError.badRequest('description must be a string of at most 250 characters', [{ path: 'description', message: 'must be a string of at most 250 characters' }]);
    }
    await this.requireScope(principal, def, place);
    const key = mintKey(place.org, name);
    const created = new Date().toISOString();
    await this.change(principal, 'addKey', def, place, name, undefined, {}, async (tx, hooks, locked) => {
      if (locked.data.origin === 'builtin') throw ApiError.forbidden(`${def.kind} '${name}' is built in; keys cannot be added to it`);
      const keys = [...((locked.data.keys as unknown[] | undefined) ?? []), { name: key.keyName, description, created }];
      const { item } = await this.update(tx, hooks, def, locked, { ...locked.data, keys });
      await tx.putKey({ keyName: key.keyName, org: place.org, serviceAccount: name, secretHash: key.secretHash, created });
      return { item, action: 'addKey' };
    });
    return { name: key.keyName, description, created, key: key.token };
  }

  /**
   * Runs a write in one transaction together with its audit event (appended last: it holds the
   * org's audit chain head until commit). A dry run does everything, then rolls back.
   */
  private async write(
    principal: Principal,
    def: KindDef,
    place: Place,
    options: WriteOptions,
    fn: (tx: Tx, hooks: HookContext) => Promise<Change>,
  ): Promise<StoredItem> {
    try {
      let appended: AppendedEvent | undefined;
      const item = await this.store.transaction(async (tx) => {
        const change = await fn(tx, hookContext(tx, place, principal));
        appended = undefined;
        if (change.action && this.settings.audit) {
          const resource = presented(def, change.item);
          appended = { event: changeEvent(change.item.org, actorOf(principal), change.action, resource), resource };
          await tx.appendAudit(appended.event);
        }
        if (options.dryRun) throw new DryRun(change.item);
        return change.item;
      });
      if (ACCESS_KINDS.has(item.kind)) this.onAccessChange(item.org);
      announce(this.store, item.org, appended ? [appended] : []);
      return item;
    } catch (err) {
      if (err instanceof DryRun) return err.item;
      throw err;
    }
  }

  /** Writes the next state of an item; a state equal to the current one is no change (no new version, no event). */
  private async update(tx: Tx, hooks: HookContext, def: KindDef, current: StoredItem, next: Record<string, unknown>): Promise<Change> {
    assertImmutables(resourceSchema(def), current.data, next, '');
    await this.checkReferences(tx, hooks, def, next, current.data);
    await def.check?.(next, hooks, present(def, current, { reveal: true }));
    const data = stored(next);
    if (deepEqual(data, current.data)) return { item: current };
    const updated: StoredItem = { ...current, version: current.version + 1, lastModified: new Date().toISOString(), data };
    await tx.update(updated, current.version, { tagsUnchanged: deepEqual(data.tags, current.data.tags) });
    await def.afterWrite?.(current.name, data, hooks);
    return { item: updated, action: 'edit' };
  }

  /**
   * Admission of references: each reference the item makes that its previous state did not (set
   * or changed) needs the reference's permission on the item it names, whatever the caller may do
   * to the referring item. Checked before the kind's own checks, and decided alike whether the
   * named item exists or not (only a targetQuery grant looks at the item), so a refusal tells
   * nothing about what the caller cannot view. Each item named is checked once per write, however
   * many fields name it. Keel's own writes (no principal) are not checked.
   */
  private async checkReferences(tx: Tx, hooks: HookContext, def: KindDef, next: Record<string, unknown>, previous: Record<string, unknown> | undefined): Promise<void> {
    const principal = hooks.principal;
    if (!def.references || !principal) return;
    const ctx = { place: hooks.place, registryHosts: this.settings.registryHosts?.() ?? [] };
    // What the previous state referred to needs nothing now; each new item named is checked once.
    const admitted = new Set(previous ? def.references(previous, ctx).map((ref) => referenceKey(ref, this.referenced(ref, hooks.place))) : []);
    for (const ref of def.references(next, ctx)) {
      const target = this.referenced(ref, hooks.place);
      const key = referenceKey(ref, target);
      if (admitted.has(key)) continue;
      admitted.add(key);
      if (!target) {
        throw ApiError.badRequest(`${ref.path}: '${ref.link ?? ref.name}' does not name ${article(ref.kind)} ${ref.kind}`, [{ path: ref.path, message: `must name ${article(ref.kind)} ${ref.kind}` }]);
      }
      const found = await tx.get({ org: target.org, kind: target.def.kind, gvc: target.gvc, name: target.name });
      try {
        await this.auth.check(principal, ref.permission, target.def, found ? { ...targetOf(found), link: target.link } : { org: target.org, gvc: target.gvc || undefined, name: target.name, link: target.link });
      } catch (err) {
        if (!(err instanceof ApiError && err.code === 'forbidden')) throw err;
        throw new ApiError('forbidden', `${ref.path} refers to ${target.link}: setting it needs '${ref.permission}' on ${target.link}`, {
          errors: [{ path: ref.path, message: `needs '${ref.permission}' on ${target.link}` }],
        });
      }
    }
  }

  /** The item a reference names (its kind's definition, place and self link), or undefined when it names none of its kind. */
  private referenced(ref: Reference, place: Place): { def: KindDef; org: string; gvc: string; name: string; link: string } | undefined {
    const def = findKind(ref.kind);
    if (!def) return undefined;
    let target: { org: string; gvc?: string; name: string } | undefined;
    if (ref.link !== undefined) {
      const parsed = parseLink(resolveLink(ref.link, place, isGvcScoped));
      target = parsed?.kind === ref.kind ? parsed : undefined;
    } else if (ref.name) {
      target = { org: place.org, gvc: def.scope === 'gvc' ? place.gvc : undefined, name: ref.name };
    }
    if (!target || !target.name || (def.scope === 'gvc') !== Boolean(target.gvc)) return undefined;
    const gvc = target.gvc ?? '';
    return { def, org: target.org, gvc, name: target.name, link: selfLink(def.kind, def.scope, target.org, gvc, target.name) };
  }

  private async requireScope(principal: Principal, def: KindDef, place: Place): Promise<void> {
    await this.auth.requireMember(principal, place.org);
    await this.requireGvc(def, place);
  }

  /**
   * Changes an existing item: reads and locks it, decides the caller's permission on it as it is
   * now, checks the version precondition, then applies `mutate`. (Deciding may read the database;
   * stores keep reads off the connections transactions hold, so this never waits on itself.)
   */
  private change(
    principal: Principal,
    permission: string,
    def: KindDef,
    place: Place,
    name: string,
    expected: number | undefined,
    options: WriteOptions,
    mutate: (tx: Tx, hooks: HookContext, locked: StoredItem) => Promise<Change>,
  ): Promise<StoredItem> {
    return this.write(principal, def, place, options, async (tx, hooks) => {
      const locked = await tx.get(keyOf(def, place, name), 'update');
      if (!locked) throw notFound(def, place, name);
      await this.auth.check(principal, permission, def, targetOf(locked));
      assertPrecondition(def, locked, expected);
      return mutate(tx, hooks, locked);
    });
  }

  /** A new item's data, once the caller may create it: the body prepared (see prepare()). */
  private async admitNew(principal: Principal, def: KindDef, place: Place, name: string, input: Record<string, unknown>): Promise<Record<string, unknown>> {
    assertAllowed(def, 'create');
    await this.auth.check(principal, 'create', def, { org: place.org, gvc: place.gvc, name, fields: () => input });
    return this.prepare(def, place, input, undefined);
  }

  /** Inserts a new item (version 1) with the kind's checks, holding its GVC against a concurrent delete. */
  private async insertNew(tx: Tx, hooks: HookContext, def: KindDef, place: Place, data: Record<string, unknown>): Promise<Change> {
    const name = data.name as string;
    await this.lockGvc(tx, def, place);
    await this.checkReferences(tx, hooks, def, data, undefined);
    await def.check?.(data, hooks);
    const now = new Date().toISOString();
    const created: StoredItem = { ...keyOf(def, place, name), id: randomUUID(), version: 1, created: now, lastModified: now, data: stored(data) };
    await tx.insert(created);
    await def.afterWrite?.(name, created.data, hooks);
    return { item: created, action: 'create' };
  }

  /** Body of a create or replace: read-only fields dropped, defaults filled, links resolved, validated. */
  private prepare(def: KindDef, place: Place, body: unknown, previous: StoredItem | undefined): Record<string, unknown> {
    const input = requireObject(body);
    const item = stripReadOnly(input, resourceSchema(def)) as Record<string, unknown>;
    if (previous) {
      // Server-owned state (status, origin, keys...) survives a replace, and so do fields that
      // cannot change: a replace that leaves one out keeps it rather than resetting it to a default.
      for (const [field, schema] of Object.entries(resourceSchema(def).properties ?? {})) {
        if (schema.readOnly && previous.data[field] !== undefined) item[field] = previous.data[field];
      }
      carryImmutables(resourceSchema(def), previous.data, item);
    }
    if (typeof item.name === 'string') item.description ??= item.name;
    try {
      def.defaults?.(item, place);
    } catch (err) {
      // Defaults assume the body's shape (`spec: true` has no fields to default): when validation
      // refuses the body, that 400 is the answer; only a TypeError on a valid body is a bug.
      if (err instanceof TypeError) validateResource(def, item);
      throw err;
    }
    this.normalize(def, place, item);
    validateResource(def, item);
    return item;
  }

  /** What every stored state has: tags (an empty map when none) and links in full form. */
  private normalize(def: KindDef, place: Place, item: Record<string, unknown>): void {
    item.tags ??= {};
    resolveLinksIn(item, resourceSchema(def), (link) => resolveLink(link, place, isGvcScoped));
  }

  /**
   * requireGvc() for a read, answered at once when the store reads at once; `mark`: the reader's
   * (Principal.mark), so the GVC is read at the catch-up that serves the rest of its request.
   */
  private gvcFound(def: KindDef, place: Place, mark: number | undefined): void | Promise<void> {
    if (def.scope !== 'gvc' || place.gvc === undefined) return;
    return andThen(this.store.getAt({ org: place.org, kind: 'gvc', gvc: '', name: place.gvc }, mark), ({ value }) => {
      if (!value) throw ApiError.notFound(`gvc '${place.gvc}' not found`);
    });
  }

  private async requireGvc(def: KindDef, place: Place): Promise<void> {
    if (def.scope !== 'gvc' || place.gvc === undefined) return;
    if (!(await this.store.get({ org: place.org, kind: 'gvc', gvc: '', name: place.gvc }))) {
      throw ApiError.notFound(`gvc '${place.gvc}' not found`);
    }
  }

  /** Holds the GVC against a concurrent delete until the child is written. */
  private async lockGvc(tx: Tx, def: KindDef, place: Place): Promise<void> {
    if (def.scope !== 'gvc') return;
    if (!(await tx.get({ org: place.org, kind: 'gvc', gvc: '', name: place.gvc! }, 'share'))) {
      throw ApiError.notFound(`gvc '${place.gvc}' not found`);
    }
  }
}

/** Reads of an apply whose create keeps colliding with creates of the same name (the next read finds the item, unless a delete came first). */
const APPLY_ATTEMPTS = 20;

/** What makes two references the same: the permission and the item named (or, naming none, the text). */
function referenceKey(ref: Reference, target: { link: string } | undefined): string {
  return `${ref.permission} ${target?.link ?? `${ref.kind}:${ref.link ?? ref.name}`}`;
}

function article(word: string): string {
  return /^[aeiou]/.test(word) ? 'an' : 'a';
}

function hookContext(tx: Tx, place: Place, principal: Principal): HookContext {
  return {
    place,
    principal,
    async lookup(kind, name, gvc) {
      const def = findKind(kind);
      if (!def) return undefined;
      const item = await tx.get({ org: place.org, kind, gvc: def.scope === 'gvc' ? (gvc ?? place.gvc ?? '') : '', name });
      return item && present(def, item, { reveal: true });
    },
    countInGvc: (kind, gvc) => tx.countInGvc(place.org, kind, gvc),
    revokeKeysExcept: (serviceAccount, keep) => tx.deleteKeys(place.org, serviceAccount, keep),
    kind: findKind,
  };
}

export function keyOf(def: KindDef, place: Place, name: string): ItemKey {
  if (def.kind === 'org') return { org: name, kind: 'org', gvc: '', name };
  return { org: place.org, kind: def.kind, gvc: def.scope === 'gvc' ? (place.gvc ?? '') : '', name };
}

/**
 * targetOf() with the item's self link, kept per stored item: a store shares an unchanged item's
 * object between reads, so a hot item's target is built once.
 */
function readTarget(def: KindDef, item: StoredItem): Target {
  let target = readTargets.get(item);
  if (target === undefined) {
    target = { ...targetOf(item), link: selfLink(def.kind, def.scope, item.org, item.gvc, item.name) };
    readTargets.set(item, target);
  }
  return target;
}
const readTargets = new WeakMap<StoredItem, Target>();

/** The item as authorization sees it: its place and, on demand, every queryable field. */
export function targetOf(item: StoredItem): Target {
  return {
    org: item.org,
    gvc: item.gvc || undefined,
    name: item.name,
    fields: () => ({ ...item.data, id: item.id, name: item.name, version: item.version, created: item.created, lastModified: item.lastModified }),
  };
}

function notFound(def: KindDef, place: Place, name: string): ApiError {
  const where = def.scope === 'gvc' ? ` in gvc '${place.gvc}'` : '';
  return ApiError.notFound(`${def.kind} '${name}' not found${where}`);
}

/** Refuses, before any database work, a query whose terms alone would cost more than any reasonable one. */
function assertAffordable(query: Query): void {
  const terms = query.spec.terms;
  const wildcards = terms.filter((t) => 'property' in t && t.property === '*').length;
  if (wildcards > MAX_WILDCARD_TERMS) {
    throw ApiError.badRequest(`invalid query: at most ${MAX_WILDCARD_TERMS} terms may use property "*" (the query budget's term limit)`, [{ path: 'spec.terms', message: `at most ${MAX_WILDCARD_TERMS} terms may use property "*"` }]);
  }
  const text = terms.reduce((n, t) => n + (typeof t.value === 'string' ? t.value.length : 0), 0);
  if (text > MAX_TERM_TEXT) {
    throw ApiError.badRequest(`invalid query: the term values add up to ${text} characters, more than the query budget's ${MAX_TERM_TEXT}`, [{ path: 'spec.terms', message: `values add up to more than ${MAX_TERM_TEXT} characters` }]);
  }
}

/** A `version` sent with a write must be the item's current one. */
function assertPrecondition(def: KindDef, item: StoredItem, expected: number | undefined): void {
  if (expected !== undefined && expected !== item.version) {
    throw ApiError.conflict(`${def.kind} '${item.name}' is at version ${item.version}, not ${expected}; read it again and retry`);
  }
}

function assertAllowed(def: KindDef, operation: 'create' | 'update' | 'delete'): void {
  const rule = def.operations?.[operation];
  if (rule === false) throw new ApiError('method_not_allowed', `${def.kind} items cannot be ${operation === 'update' ? 'updated' : operation + 'd'} through the API`);
  if (typeof rule === 'string') throw ApiError.forbidden(rule);
}

function requireObject(body: unknown): Record<string, unknown> {
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw ApiError.badRequest('the request body must be a JSON object');
  return body as Record<string, unknown>;
}

/** A `version` in a body is an optimistic-lock precondition. */
function preconditionOf(body: Record<string, unknown>): number | undefined {
  const v = body.version;
  if (v === undefined || v === null) return undefined;
  const n = typeof v === 'string' && /^\d+$/.test(v) ? Number(v) : v;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 1) {
    throw ApiError.badRequest('version must be a positive integer', [{ path: 'version', message: 'must be a positive integer' }]);
  }
  return n;
}

function withoutPrecondition(patch: Record<string, unknown>): Record<string, unknown> {
  const { version: _version, ...rest } = patch;
  return rest;
}

function assertSameName(def: KindDef, name: string, bodyName: unknown): void {
  if (bodyName !== undefined && bodyName !== null && bodyName !== name) {
    throw ApiError.badRequest(`names are immutable: the body names '${typeof bodyName === 'string' ? bodyName : JSON.stringify(bodyName)}' but the ${def.kind} is '${name}'`, [
      { path: 'name', message: 'cannot be changed' },
    ]);
  }
}

/** A copy without the fields the schema marks read-only, at any depth, and without nulls ("absent"). */
export function stripReadOnly(value: unknown, schema: JsonSchema | undefined, depth = 1): unknown {
  // A hostile body nested thousands of levels deep would overflow the stack below (a 500).
  if (depth > MAX_DEPTH) throw ApiError.badRequest(`the body is nested deeper than ${MAX_DEPTH} levels`, [{ path: '', message: `is nested deeper than ${MAX_DEPTH} levels` }]);
  if (Array.isArray(value)) return value.map((v) => stripReadOnly(v, schema?.items, depth + 1));
  if (!value || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(value)) {
    const sub = schema?.properties && Object.hasOwn(schema.properties, key) ? schema.properties[key] : typeof schema?.additionalProperties === 'object' ? schema.additionalProperties : undefined;
    if (v === null || sub?.readOnly) continue;
    setOwn(out, key, stripReadOnly(v, sub, depth + 1));
  }
  return out;
}

/** Copies into `item` every immutable field (at any depth) that `previous` has and `item` leaves out. */
function carryImmutables(schema: JsonSchema, previous: unknown, item: Record<string, unknown>): void {
  if (!schema.properties || !previous || typeof previous !== 'object') return;
  for (const [key, sub] of Object.entries(schema.properties)) {
    const before = (previous as Record<string, unknown>)[key];
    if (before === undefined) continue;
    if (sub['x-immutable'] && item[key] === undefined) item[key] = before;
    else if (sub.properties && before && typeof before === 'object') {
      if (item[key] === undefined && hasImmutable(sub)) item[key] = {};
      if (item[key] && typeof item[key] === 'object') carryImmutables(sub, before, item[key] as Record<string, unknown>);
    }
  }
}

function hasImmutable(schema: JsonSchema): boolean {
  return Object.values(schema.properties ?? {}).some((sub) => sub['x-immutable'] || hasImmutable(sub));
}

function assertImmutables(schema: JsonSchema, before: unknown, after: unknown, path: string): void {
  if (!schema.properties || !before || typeof before !== 'object' || !after || typeof after !== 'object') return;
  for (const [key, sub] of Object.entries(schema.properties)) {
    const b = (before as Record<string, unknown>)[key];
    const a = (after as Record<string, unknown>)[key];
    const here = path ? `${path}.${key}` : key;
    if (sub['x-immutable'] && b !== undefined && !deepEqual(a, b)) {
      throw ApiError.badRequest(`${here} cannot be changed once set`, [{ path: here, message: 'cannot be changed once set' }]);
    }
    assertImmutables(sub, b, a, here);
  }
}

/** The body as stored: the API's own fields live in columns, not in `data`. */
function stored(item: Record<string, unknown>): Record<string, unknown> {
  const { id: _i, kind: _k, version: _v, created: _c, lastModified: _l, links: _links, ...rest } = item;
  return rest;
}



