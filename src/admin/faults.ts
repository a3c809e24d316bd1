// Fault injection (KEEL_FAULTS=on): rules that make matching requests fail (an HTTP status with the
// API's error object), wait, or lose their connection, and reconciler scenarios that keep an item
// from getting well. Without KEEL_FAULTS none of this is installed: no hook runs on any request.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { readFileSync } from 'node:fs';
import { setTimeout as delay } from 'node:timers/promises';
import { parse as parseYaml } from 'yaml';
import { ApiError, type ErrorCode, type FieldError } from '../errors.js';
import { findKind } from '../kinds/index.js';
import { glob, type Glob } from './glob.js';
import { sendError } from '../server/errors.js';
import type { ItemKey } from '../store/types.js';

export const SCENARIOS = ['deploymentNeverReady', 'deploymentSyncFailed', 'domainStuck', 'commandFailed', 'volumeOperationFailed'] as const;
export type Scenario = (typeof SCENARIOS)[number];

/** The operations a request is one of (from its method and path). */
export const OPERATIONS = ['list', 'create', 'apply', 'get', 'patch', 'replace', 'delete', 'query', 'other'] as const;

const STATUS_CODES: Record<number, ErrorCode> = { 409: 'conflict', 429: 'rate_limited', 500: 'internal', 503: 'service_unavailable' };
const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'];
const MAX_RULES = 100;
const MAX_LATENCY_MS = 60_000;
const FIELDS = ['name', 'method', 'kind', 'operation', 'path', 'principal', 'status', 'latencyMs', 'drop', 'probability', 'times', 'scenario', 'message'];

export interface FaultRule {
  name: string;
  method?: string;
  kind?: string;
  operation?: string;
  /** A glob over the request path (or, for a scenario, the item's path): `*` stands for any characters. */
  path?: string;
  /** A principal's link (`/org/o/serviceaccount/ci`), or a glob over it. */
  principal?: string;
  status?: number;
  latencyMs?: number;
  drop?: boolean;
  probability?: number;
  times?: number;
  scenario?: Scenario;
  message?: string;
  /** How often it was applied. */
  hits: number;
}

interface ActiveRule extends FaultRule {
  pathPattern?: Glob;
  principalPattern?: Glob;
}

/** Checks a rule list as PUT /-admin/faults and KEEL_FAULTS_FILE give it; every problem is a field error. */
export function parseRules(body: unknown): FaultRule[] {
  const errors: FieldError[] = [];
  const rules = (body as { rules?: unknown } | null)?.rules;
  if (!body || typeof body !== 'object' || Array.isArray(body) || !Array.isArray(rules)) {
    throw ApiError.badRequest('the body must be {"rules": [...]}', [{ path: 'rules', message: 'must be an array of rules' }]);
  }
  if (rules.length > MAX_RULES) throw ApiError.badRequest(`at most ${MAX_RULES} rules`, [{ path: 'rules', message: `has more than ${MAX_RULES} rules` }]);
  const out: FaultRule[] = [];
  for (const [i, raw] of rules.entries()) {
    const at = (field: string) => `rules[${i}].${field}`;
    const bad = (field: string, message: string) => errors.push({ path: at(field), message });
    if (!raw || typeof raw !== 'object' || Array.isArray(raw)) {
      errors.push({ path: `rules[${i}]`, message: 'must be an object' });
      continue;
    }
    const r = raw as Record<string, unknown>;
    for (const field of Object.keys(r)) if (!FIELDS.includes(field) && field !== 'hits') bad(field, 'is not a known field');
    const text = (field: string, max: number) => {
      const v = r[field];
      if (v === undefined) return undefined;
      if (typeof v !== 'string' || v === '' || v.length > max) return void bad(field, `must be a non-empty string of at most ${max} characters`);
      return v;
    };
    const rule: FaultRule = { name: text('name', 64) ?? `rule-${i + 1}`, hits: 0 };
    const method = text('method', 10)?.toUpperCase();
    if (method !== undefined && !METHODS.includes(method)) bad('method', `must be one of ${METHODS.join(', ')}`);
    else if (method) rule.method = method;
    const kind = text('kind', 64);
    if (kind !== undefined && !findKind(kind)) bad('kind', `'${kind}' is not a kind`);
    else if (kind) rule.kind = kind;
    const operation = text('operation', 16);
    if (operation !== undefined && !(OPERATIONS as readonly string[]).includes(operation)) bad('operation', `must be one of ${OPERATIONS.join(', ')}`);
    else if (operation) rule.operation = operation;
    const path = text('path', 1000);
    if (path !== undefined && !path.startsWith('/') && path !== '*') bad('path', "must start with '/' (or be '*')");
    else if (path) rule.path = path;
    const principal = text('principal', 1000);
    if (principal) rule.principal = principal;
    const message = text('message', 500);
    if (message) rule.message = message;
    if (r.status !== undefined) {
      if (typeof r.status !== 'number' || !STATUS_CODES[r.status]) bad('status', 'must be one of 409, 429, 500, 503');
      else rule.status = r.status;
    }
    if (r.latencyMs !== undefined) {
      if (typeof r.latencyMs !== 'number' || !Number.isInteger(r.latencyMs) || r.latencyMs < 0 || r.latencyMs > MAX_LATENCY_MS) bad('latencyMs', `must be a whole number from 0 to ${MAX_LATENCY_MS}`);
      else rule.latencyMs = r.latencyMs;
    }
    if (r.drop !== undefined) {
      if (typeof r.drop !== 'boolean') bad('drop', 'must be true or false');
      else if (r.drop) rule.drop = true;
    }
    if (r.probability !== undefined) {
      if (typeof r.probability !== 'number' || !(r.probability >= 0 && r.probability <= 1)) bad('probability', 'must be a number from 0 to 1');
      else rule.probability = r.probability;
    }
    if (r.times !== undefined) {
      if (typeof r.times !== 'number' || !Number.isInteger(r.times) || r.times < 1 || r.times > 1_000_000_000) bad('times', 'must be a whole number of at least 1');
      else rule.times = r.times;
    }
    if (r.scenario !== undefined) {
      if (!(SCENARIOS as readonly unknown[]).includes(r.scenario)) bad('scenario', `must be one of ${SCENARIOS.join(', ')}`);
      else rule.scenario = r.scenario as Scenario;
    }
    const effects = ['status', 'latencyMs', 'drop'].filter((f) => r[f] !== undefined && r[f] !== false);
    if (r.scenario !== undefined) {
      for (const f of [...effects, 'method', 'operation', 'principal']) if (r[f] !== undefined) bad(f, 'does not go with a scenario (a scenario rule names items by kind and path)');
    } else if (effects.length === 0) {
      errors.push({ path: `rules[${i}]`, message: 'must do something: status, latencyMs, drop or scenario' });
    } else if (r.status !== undefined && r.drop === true) {
      bad('drop', 'does not go with status (a dropped connection gets no answer)');
    }
    out.push(rule);
  }
  const names = out.map((r) => r.name);
  for (const [i, name] of names.entries()) if (names.indexOf(name) !== i) errors.push({ path: `rules[${i}].name`, message: `'${name}' is the name of an earlier rule` });
  if (errors.length) throw ApiError.badRequest(`invalid fault rules: ${errors.map((e) => `${e.path} ${e.message}`).join('; ')}`, errors);
  return out;
}

/** The kind and operation of a request to the Core API, from its method and path. */
export function describeRequest(method: string, path: string): { kind?: string; operation: string } {
  const s = path.split('/').filter(Boolean).map(decodeSegment);
  if (s[0] !== 'org') return { operation: 'other' };
  if (s.length === 1) return { kind: 'org', operation: method === 'GET' ? 'list' : method === 'POST' ? 'create' : 'other' };
  if (s.length === 2) return { kind: 'org', operation: itemOperation(method) };
  // Past the org: a GVC's own path (gvc/G/kind/...) or an org-scoped kind's.
  const rest = s[2] === 'gvc' && s.length > 4 ? s.slice(4) : s.slice(2);
  const kind = rest[0];
  if (!kind || kind.startsWith('-') || !findKind(kind)) return { operation: 'other' };
  if (rest.length === 1) return { kind, operation: method === 'GET' ? 'list' : method === 'POST' ? 'create' : method === 'PUT' ? 'apply' : 'other' };
  if (rest[1] === '-query') return { kind, operation: rest.length === 2 && method === 'POST' ? 'query' : 'other' };
  if (rest.length === 2 && !rest[1].startsWith('-')) return { kind, operation: itemOperation(method) };
  return { kind, operation: 'other' };
}

function decodeSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

function itemOperation(method: string): string {
  return ({ GET: 'get', PATCH: 'patch', PUT: 'replace', DELETE: 'delete' } as Record<string, string>)[method] ?? 'other';
}

/** The path an item is addressed by (a command's: under its parent), which scenario rules match. */
export function itemPath(key: ItemKey): string {
  const base = `/org/${key.org}${key.gvc ? `/gvc/${key.gvc}` : ''}`;
  if (key.kind !== 'command') return `${base}/${key.kind}/${key.name}`;
  const [parent, parentName, id] = key.name.split(':');
  return `${base}/${parent}/${parentName}/-command/${id}`;
}

/** Logs what was injected: the word `fault`, the rule, and the request id when there is a request. */
export type FaultLog = (entry: Record<string, unknown>, message: string) => void;

export class Faults {
  private rules: ActiveRule[] = [];

  /** Where scenario faults are logged (the server's logger, once there is one). */
  log: FaultLog = () => {};

  /** Loads KEEL_FAULTS_FILE (JSON or YAML, `{rules: [...]}`); a bad file stops the start naming it. */
  static fromFile(file: string): Faults {
    const faults = new Faults();
    let body: unknown;
    try {
      const text = readFileSync(file, 'utf8');
      body = /\.json$/i.test(file) ? JSON.parse(text) : parseYaml(text);
    } catch (err) {
      throw new Error(`KEEL_FAULTS_FILE ${file}: ${(err as Error).message}`);
    }
    try {
      faults.set(parseRules(body));
    } catch (err) {
      throw new Error(`KEEL_FAULTS_FILE ${file}: ${(err as Error).message}`);
    }
    return faults;
  }

  list(): FaultRule[] {
    return this.rules.map(({ pathPattern: _p, principalPattern: _q, ...rule }) => ({ ...rule }));
  }

  set(rules: FaultRule[]): void {
    this.rules = rules.map((r) => ({
      ...r,
      hits: 0,
      pathPattern: r.path ? glob(r.path) : undefined,
      principalPattern: r.principal ? glob(r.principal) : undefined,
    }));
  }

  /** Whether a rule fires now (its probability, its remaining times), counting the hit when it does. */
  private fires(rule: ActiveRule): boolean {
    if (rule.times !== undefined && rule.hits >= rule.times) return false;
    if (rule.probability !== undefined && !(Math.random() < rule.probability)) return false;
    rule.hits++;
    return true;
  }

  /** The first request rule that matches the request and fires. */
  forRequest(request: Pick<FastifyRequest, 'method' | 'url' | 'principal'>): ActiveRule | undefined {
    if (this.rules.length === 0) return undefined;
    const path = request.url.split('?')[0];
    if (path.startsWith('/-admin/')) return undefined; // the rules can always be changed
    let described: { kind?: string; operation: string } | undefined;
    for (const rule of this.rules) {
      if (rule.scenario) continue;
      if (rule.method && rule.method !== request.method) continue;
      if (rule.pathPattern && !rule.pathPattern(path)) continue;
      if (rule.principalPattern && !(request.principal && rule.principalPattern(request.principal.link))) continue;
      if (rule.kind || rule.operation) {
        described ??= describeRequest(request.method, path);
        if (rule.kind && rule.kind !== described.kind) continue;
        if (rule.operation && rule.operation !== described.operation) continue;
      }
      if (this.fires(rule)) return rule;
    }
    return undefined;
  }

  /**
   * The reconcilers' one hook: whether `scenario` applies to the item now, as the failure message
   * to report (undefined when it does not). A rule's kind matches the item's, or a command's parent.
   */
  readonly scenario = (scenario: string, key: ItemKey): string | undefined => {
    if (this.rules.length === 0) return undefined;
    let path: string | undefined;
    for (const rule of this.rules) {
      if (rule.scenario !== scenario) continue;
      if (rule.kind && rule.kind !== key.kind && !(key.kind === 'command' && key.name.startsWith(`${rule.kind}:`))) continue;
      path ??= itemPath(key);
      if (rule.pathPattern && !rule.pathPattern(path)) continue;
      if (!this.fires(rule)) continue;
      const message = rule.message ?? `injected fault '${rule.name}' (${scenario})`;
      this.log({ fault: rule.name, scenario, item: path }, `fault injected: ${scenario} on ${path}`);
      return message;
    }
    return undefined;
  };
}

/**
 * The request hook, installed only with KEEL_FAULTS=on, after authentication (so rules can name
 * principals): waits, answers with the rule's status and the error object, or drops the connection.
 */
export function installFaults(app: FastifyInstance, faults: Faults): void {
  app.addHook('onRequest', (request, reply, done) => {
    const rule = faults.forRequest(request);
    if (!rule) return done();
    request.log.warn({ reqId: request.id, fault: rule.name, method: request.method, url: request.url }, `fault injected: rule '${rule.name}'`);
    void inject(rule, request, reply).then(
      (handled) => (handled ? undefined : done()),
      (err) => done(err as Error),
    );
  });
}

/** Applies a rule; true when it answered (or dropped) the request itself. */
async function inject(rule: FaultRule, request: FastifyRequest, reply: FastifyReply): Promise<boolean> {
  const outcome = await outcomeOf(rule);
  if (outcome === 'drop') {
    reply.hijack();
    request.raw.socket?.destroy();
    return true;
  }
  if (outcome) {
    if (rule.status === 429 || rule.status === 503) reply.header('retry-after', '1');
    sendError(reply, request, outcome);
    return true;
  }
  return false;
}

/** What a rule does to a request once its latency has passed: drops it, refuses it with an error, or lets it run. */
export async function outcomeOf(rule: FaultRule): Promise<'drop' | ApiError | undefined> {
  if (rule.latencyMs) await delay(rule.latencyMs);
  if (rule.drop) return 'drop';
  if (rule.status) {
    const code = STATUS_CODES[rule.status];
    return new ApiError(code, rule.message ?? `injected fault '${rule.name}': ${code.replace('_', ' ')}`, { fault: rule.name });
  }
  return undefined;
}
