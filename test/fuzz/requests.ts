// Random HTTP requests against Keel's Core API, driven by the kind schemas (test/patch/arbitrary.ts
// draws valid objects and patches from each kind's JSON Schema), and the check every answer must
// pass: never a 5xx, never a hang, a 4xx is exactly the API's error object, and nothing reaches
// Object.prototype. Shared by test/fuzz/http.test.ts (bounded) and scripts/fuzz.ts (long runs).
import { request as httpRequest } from 'node:http';
import fc from 'fast-check';
import { KINDS, resourceSchema } from '../../src/kinds/index.js';
import type { KindDef } from '../../src/kinds/types.js';
import type { App } from '../../src/server/app.js';
import { patchArb, valueArb } from '../patch/arbitrary.js';
import { SECRET_TYPES } from '../../src/kinds/secret.js';
import { KEEL_ACTIONS } from '../../src/audit/events.js';

export const ORG = 'acme';
export const GVC = 'fz';
export const BODY_LIMIT = 1024 * 1024;
/** An answer slower than this is a hang (generous: 1 MiB bodies on a loaded 2-core machine). */
export const ANSWER_TIMEOUT_MS = 15_000;

export interface FuzzRequest {
  method: string;
  url: string;
  /** A header given as an array is sent once per value (real HTTP only). */
  headers: Record<string, string | string[]>;
  payload?: string;
  /** Send over a real socket instead of inject(), for what only the HTTP parser sees. */
  socket?: boolean;
  /** The Audit API instead of the Core API (always through inject()). */
  audit?: boolean;
  /** What the request is, for failure messages. */
  label: string;
}

export interface FuzzAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  raw: string;
}

const ERROR_KEYS = ['code', 'details', 'id', 'message', 'status'];
const CODES: Record<number, string[]> = {
  400: ['bad_request'],
  401: ['unauthorized'],
  403: ['forbidden'],
  404: ['not_found'],
  405: ['method_not_allowed'],
  409: ['already_exists', 'conflict'],
  413: ['payload_too_large'],
  415: ['unsupported_media_type'],
  429: ['quota_exceeded', 'rate_limited'],
};

export const kindPath = (def: KindDef) => (def.scope === 'gvc' ? `/org/${ORG}/gvc/${GVC}/${def.kind}` : def.kind === 'org' ? '/org' : `/org/${ORG}/${def.kind}`);

// ---- prototype pollution -----------------------------------------------------------------------

const PROTOTYPES: Array<[string, object]> = [
  ['Object.prototype', Object.prototype],
  ['Array.prototype', Array.prototype],
  ['Function.prototype', Function.prototype],
  ['String.prototype', String.prototype],
];
const baseline = PROTOTYPES.map(([name, proto]) => [name, Object.getOwnPropertyNames(proto).sort().join()] as const);

/** Throws when a prototype gained or lost a property since this module loaded. */
export function assertNoPollution(context: string): void {
  for (const [i, [name, proto]] of PROTOTYPES.entries()) {
    const now = Object.getOwnPropertyNames(proto).sort().join();
    if (now !== baseline[i][1]) throw new Error(`${name} was changed by ${context}: ${now}`);
  }
  const probe = {} as Record<string, unknown>;
  for (const key of ['polluted', 'isAdmin', 'x']) {
    if (probe[key] !== undefined) throw new Error(`Object.prototype.${key} is set after ${context}`);
  }
}

// ---- sending -----------------------------------------------------------------------------------


function viaSocket(port: number, req: FuzzRequest): Promise<FuzzAnswer> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string | string[]> = { ...req.headers };
    if (req.payload !== undefined) headers['content-length'] = String(Buffer.byteLength(req.payload));
    // Node's client refuses to send a path with spaces or control characters: escape those.
    const path = req.url.replace(/[^\u0021-\u00ff]/g, (c) => encodeURIComponent(c));
    // A fresh connection each time: a reused keep-alive socket the server closed after an
    // early answer (unread body) would fail the next request with "socket hang up".
    const r = httpRequest({ host: '127.0.0.1', port, method: req.method, path, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, raw: Buffer.concat(chunks).toString() }));
      res.on('error', reject);
    });
    r.on('error', reject);
    r.end(req.payload);
  });
}

/**
 * Runs `exercise` on `runs` requests drawn from `arb`; on a failure, throws the failing request's
 * own description (after shrinking) rather than fast-check's dump of it.
 */
export async function fuzz(arb: fc.Arbitrary<FuzzRequest>, runs: number, exercise: (req: FuzzRequest) => Promise<void>, seed?: number): Promise<void> {
  let last: unknown;
  try {
    await fc.assert(
      fc.asyncProperty(arb, async (req) => {
        try {
          await exercise(req);
        } catch (e) {
          last = e;
          throw e;
        }
      }),
      { numRuns: runs, seed },
    );
  } catch (e) {
    const seedLine = /\{ seed: [^}]*\}/.exec(String((e as Error).message))?.[0] ?? '';
    throw new Error(`${last instanceof Error ? last.message : String(last ?? e)}\n  (fast-check ${seedLine})`);
  }
}

/** Sends `req` (inject, or a socket on `port`) and fails when no answer comes within the timeout. */
export async function send(app: App, port: number | undefined, req: FuzzRequest): Promise<FuzzAnswer> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ANSWER_TIMEOUT_MS} ms (a hang): ${describe(req)}`)), ANSWER_TIMEOUT_MS);
  });
  try {
    const answer =
      req.socket && !req.audit && port !== undefined
        ? viaSocket(port, req)
        : (req.audit ? app.audit : app.core)
            .inject({ method: req.method as 'GET', url: req.url, headers: req.headers as Record<string, string>, payload: req.payload })
            .then((res) => ({ status: res.statusCode, headers: res.headers as FuzzAnswer['headers'], raw: res.body }));
    return await Promise.race([answer, deadline]);
  } catch (e) {
    throw new Error(`${(e as Error).message}\n  request: ${describe(req)}`);
  } finally {
    clearTimeout(timer);
  }
}

export function describe(req: FuzzRequest): string {
  const body = req.payload === undefined ? '' : req.payload.length > 300 ? ` body(${req.payload.length} chars): ${req.payload.slice(0, 200)}…` : ` body: ${req.payload}`;
  const headers = JSON.stringify(req.headers, (k, v) => (typeof v === 'string' && v.length > 100 ? `${v.slice(0, 40)}…(${v.length} chars)` : k === 'authorization' && typeof v === 'string' && !v.startsWith('junk') ? '<token>' : v));
  return `[${req.label}] ${req.method} ${req.url.length > 200 ? req.url.slice(0, 200) + '…' : req.url} ${headers}${body}`;
}

/** Throws with a description of `req` when `res` breaks a rule every answer must keep. */
export function checkAnswer(req: FuzzRequest, res: FuzzAnswer): void {
  const fail = (why: string) => {
    throw new Error(`${why}\n  request: ${describe(req)}\n  answer: ${res.status} ${res.raw.slice(0, 500)}`);
  };
  if (res.status >= 500) fail(`a ${res.status}`);
  if (res.status < 200) fail(`an unexpected status ${res.status}`);
  const type = String(res.headers['content-type'] ?? '');
  const emptyOk = res.status === 202 || res.status === 204 || req.method === 'HEAD';
  if (res.raw === '' && emptyOk) return;
  // The pages a person opens (the API reference and the console, with their assets) are not JSON,
  // and a browser asking for `/` is sent to the console.
  if (res.status < 400 && /^\/(docs|console)(\/|$|\?)/.test(req.url)) return;
  if (res.status >= 300 && res.status < 400) {
    if (!/^\/console\//.test(String(res.headers.location ?? ''))) fail(`a redirect to ${JSON.stringify(res.headers.location)}`);
    return;
  }
  if (!/^application\/json\b/.test(type)) fail(`content-type ${JSON.stringify(type)} is not JSON`);
  let body: unknown;
  try {
    body = JSON.parse(res.raw);
  } catch {
    fail('the body is not JSON');
  }
  if (res.status < 400) return;
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return fail('the error body is not an object');
  const e = body as Record<string, unknown>;
  if (Object.keys(e).sort().join() !== ERROR_KEYS.join()) fail(`the error object has keys ${Object.keys(e).sort().join()}`);
  if (e.status !== res.status) fail(`error.status ${e.status} differs from the HTTP status`);
  if (!(CODES[res.status] ?? []).includes(e.code as string)) fail(`error.code ${String(e.code)} does not belong to status ${res.status}`);
  if (typeof e.message !== 'string' || e.message === '') fail('error.message is not a non-empty string');
  if (typeof e.details !== 'object' || e.details === null || Array.isArray(e.details)) fail('error.details is not an object');
  if (typeof e.id !== 'string' || !/^[0-9a-f-]{36}$/.test(e.id)) fail('error.id is not a request id');
  // The body of an error never leaks internals.
  if (/\bat [\w.<>]+ \(|node_modules|SQLITE_|syntax error at or near/.test(res.raw)) fail('the error leaks internals');
}

// ---- the parts of a request ----------------------------------------------------------------------

const word = fc.stringMatching(/^[a-z][a-z0-9]{0,8}$/);
const validName = fc.stringMatching(/^[a-z][a-z0-9-]{0,10}[a-z0-9]$/);

/** Names as they appear in a URL path: valid ones and tricks. */
export const pathName: fc.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: validName },
  {
    weight: 4,
    arbitrary: fc.constantFrom(
      '..', '.', '%2e%2e', '..%2F..%2Fetc%2Fpasswd', '%2F', 'a%2Fb', '%00', 'a%00b', '%', '%zz', '%FF', '%ED%A0%80', '%C0%AF',
      'Upper', 'UPPER', 'trailing.', 'trailing..', 'dot.inside', '-lead', 'trail-', 'a', 'a'.repeat(64), 'a'.repeat(65), 'a'.repeat(256),
      'a'.repeat(257), 'a'.repeat(5000), '-query', '-schema', '-schema%2Fpermissions', '%2D%71uery', '__proto__', 'constructor', 'prototype',
      'hasOwnProperty', 'toString', '%E2%80%AE', '%F0%9F%92%A9', '%D7%A9%D7%9C%D7%95%D7%9D', 'a b', 'a%20b', 'a+b', '~', '*', "'", '"',
      '%22%3Cscript%3E', 'a;b', 'a,b', 'a=b', 'null', 'undefined', '0', '1e9',
    ),
  },
  {
    weight: 2,
    // arbitrary unicode, percent-encoded the way a client would (lone surrogates cannot be encoded as UTF-8: sent as raw escapes)
    arbitrary: fc.string({ unit: 'binary', maxLength: 12 }).map((s) => {
      try {
        return encodeURIComponent(s);
      } catch {
        return `${encodeURIComponent(s.replace(/[\ud800-\udfff]/g, ''))}%ED%B0%80`;
      }
    }),
  },
);

const queryString: fc.Arbitrary<string> = fc.oneof(
  { weight: 5, arbitrary: fc.constant('') },
  {
    weight: 3,
    arbitrary: fc
      .array(
        fc.tuple(
          fc.constantFrom('limit', 'dryRun', 'cursor', 'gvc', 'limit', 'watch', 'x', '__proto__', 'constructor[prototype][x]'),
          fc.oneof(fc.constantFrom('0', '-1', '1', '1000', '1001', '1e3', 'NaN', 'true', 'false', 'yes', '', '%00', '%FF', 'a'.repeat(3000)), word),
        ),
        { minLength: 1, maxLength: 3 },
      )
      .map((pairs) => '?' + pairs.map(([k, v]) => `${k}=${v}`).join('&')),
  },
);

const tokenHeader = (token: string): fc.Arbitrary<string | undefined> =>
  fc.oneof(
    { weight: 12, arbitrary: fc.constant(`Bearer ${token}`) },
    { weight: 2, arbitrary: fc.constant(token) },
    {
      weight: 2,
      arbitrary: fc.constantFrom(
        undefined, '', 'Bearer', 'Bearer ', 'Basic dXNlcjpwYXNz', 'junk', 'junk.a.b', `junk.${token}`, `Bearer ${token.slice(0, -1)}`,
        `Bearer ${token}x`, 'Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.', `junk ${'x'.repeat(6_000)}`, 'Bearer s0000000000000000.YWNtZS5zYS5hZG1pbg.secret',
      ),
    },
  );

export const CONTENT_TYPES = [
  'application/json', 'application/json; charset=utf-8', 'application/json; charset=UTF-8', 'application/json;charset="utf-8"',
  'application/json; charset=latin1', 'application/json; charset=utf-16', 'APPLICATION/JSON', 'Application/Json; Charset=UTF-8',
  'application/json; foo=bar', 'application/json ', 'text/plain', 'text/json', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x',
  'application/merge-patch+json', 'application/json-patch+json', 'application/yaml', 'application/octet-stream', '*/*', 'application/', ';', '',
];

const contentType: fc.Arbitrary<string | undefined> = fc.oneof(
  { weight: 8, arbitrary: fc.constant('application/json') },
  { weight: 3, arbitrary: fc.constantFrom(...CONTENT_TYPES) },
  { weight: 1, arbitrary: fc.constant(undefined) },
);

/** Header values Node's client can send: visible ASCII and spaces. */
const shortHeaderValue = fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength: 40 });
/** Up to 8 KB: one of these keeps a request within Node's 16 KiB header limit (beyond it Node itself answers 431). */
const headerValue = fc.oneof(shortHeaderValue, fc.integer({ min: 1000, max: 8_000 }).map((n) => 'v'.repeat(n)));

/** Headers only a real socket carries faithfully: duplicates, huge values (within Node's 16 KiB), odd names. */
const socketHeaders = fc.record(
  {
    'content-type': fc.oneof(fc.constantFrom(...CONTENT_TYPES), fc.constant(['application/json', 'text/plain']), fc.constant(['text/plain', 'application/json'])),
    'x-fuzz': headerValue,
    accept: fc.constantFrom('application/json', 'text/html', '*/*', 'application/xml', ''),
    'accept-encoding': fc.constantFrom('gzip', 'br', 'identity', 'deflate, gzip;q=0.5', ''),
    'x-request-id': shortHeaderValue,
    'x-forwarded-for': fc.constantFrom('1.2.3.4', 'junk', '::1, 10.0.0.1'),
  },
  { requiredKeys: [] },
);

// ---- bodies --------------------------------------------------------------------------------------

/** Keys a hostile client would try, anywhere in a body. */
const hostileKeys = fc.constantFrom('__proto__', 'constructor', 'prototype', '$proto', '__defineGetter__', 'toString', 'hasOwnProperty', 'valueOf');

/** Strings with the unicode a client may send: astral, RTL marks, NUL and lone surrogates as JSON escapes. */
const nastyString = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 20 }),
  fc.constantFrom('\u202eevil', '\u200f\u05e9\u05dc\u05d5\u05dd', '\ud83d\udca9', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢', 'a\u0000b', '\ud800', '\udfff', 'e\u0301', '\ufeff', ' ', '', 'x'.repeat(251)),
);

/** A JSON value with hostile keys and nasty strings, nested a little. */
const nastyValue: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    nastyString,
    fc.integer(),
    fc.double(),
    fc.boolean(),
    fc.constant(null),
    fc.array(tie('value'), { maxLength: 3 }),
    fc.array(fc.tuple(fc.oneof(word, hostileKeys, nastyString), tie('value')), { maxLength: 3 }).map(entriesToObject),
  ),
})).value;

function entriesToObject(entries: Array<[string, unknown]>): Record<string, unknown> {
  const o: Record<string, unknown> = {};
  for (const [k, v] of entries) Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
  return o;
}

/** `base` with one field set to anything at all (an invalid body, mostly). */
function spoilField(base: Record<string, unknown>, def: KindDef): fc.Arbitrary<Record<string, unknown>> {
  const fields = Object.keys(resourceSchema(def).properties ?? {});
  return fc.tuple(fc.oneof(fc.constantFrom(...fields), word, hostileKeys), nastyValue).map(([k, v]) => {
    const out = entriesToObject(Object.entries(base));
    Object.defineProperty(out, k, { value: v, enumerable: true, writable: true, configurable: true });
    return out;
  });
}

/** A create/replace body for `def`: valid per its schema, or spoiled in one field, or nonsense. */
export function kindBody(def: KindDef): fc.Arbitrary<unknown> {
  const valid = valueArb(resourceSchema(def)) as fc.Arbitrary<Record<string, unknown>>;
  return fc.oneof(
    { weight: 4, arbitrary: valid },
    { weight: 3, arbitrary: valid.chain((b) => spoilField(b, def)) },
    { weight: 1, arbitrary: nastyValue },
  );
}

/** Names of Object.prototype members: as property, sort, tag or rel names they are plain names. */
const PROTO_NAMES = ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf', 'isPrototypeOf', '__defineGetter__'];

/** Links in relative and absolute forms, and broken ones, as directive values. */
const linkForm = fc.oneof(
  fc.tuple(fc.constantFrom('serviceaccount', 'group', 'user', 'location', 'secret', 'policy'), fc.oneof(word, fc.constantFrom(...PROTO_NAMES))).chain(([kind, name]) =>
    fc.constantFrom(`//${kind}/${name}`, `/org/${ORG}/${kind}/${name}`),
  ),
  fc.tuple(fc.constantFrom('workload', 'identity', 'volumeset'), word).chain(([kind, name]) =>
    fc.constantFrom(`//${kind}/${name}`, `//gvc/${GVC}/${kind}/${name}`, `/org/${ORG}/gvc/${GVC}/${kind}/${name}`),
  ),
  fc.constantFrom('//', '///', '//gvc', `//gvc/${GVC}`, '//serviceaccount/', '/org/', '/org//serviceaccount/x', '//a/b/c/d/e'),
);

const DIRECTIVES = ['$drop', '$replace', '$append', '$patch', '$retain', '$merge', '$set', '$', '$$', '$drop/', '$append/', '$patch/__proto__', '$replace/constructor'];

/** Patch directives, valid and nonsense, at the top level or nested under a schema field. */
export function directiveBody(def: KindDef): fc.Arbitrary<unknown> {
  const fields = Object.keys(resourceSchema(def).properties ?? {});
  const field = fc.oneof(fc.constantFrom(...fields), word, hostileKeys, fc.constant(''));
  const directive = fc.oneof(
    fc.tuple(fc.constantFrom('$drop', '$replace', '$append', '$patch', '$retain'), field).map(([d, f]) => `${d}/${f}`),
    fc.constantFrom(...DIRECTIVES),
    fc.constant('$drop'),
  );
  const one = fc.tuple(
    directive,
    fc.oneof(nastyValue, fc.array(fc.oneof(word, fc.constantFrom(...fields)), { maxLength: 3 }), fc.array(fc.record({ name: word }), { maxLength: 2 }), fc.array(linkForm, { maxLength: 3 })),
  );
  return fc.tuple(fc.array(one, { minLength: 1, maxLength: 3 }), fc.option(fc.constantFrom(...fields.filter((f) => f !== 'name')), { nil: undefined })).map(([pairs, under]) => {
    const patch = entriesToObject(pairs);
    return under ? entriesToObject([[under, patch]]) : patch;
  });
}

const op = fc.oneof(fc.constantFrom('=', '>', '<', '>=', '<=', '!=', '~', 'exists', '!exists'), fc.constantFrom('==', 'like', '', 'EXISTS', '~*'), word);
const propertyName = fc.oneof(
  word,
  fc.constantFrom('name', 'description', 'spec.type', 'id', 'version', 'created', 'a.b.c', 'spec.__proto__.x', '', '*', 'data', 'data.payload', 'type'),
  fc.constantFrom(...PROTO_NAMES, ...PROTO_NAMES.map((p) => `spec.${p}`), ...PROTO_NAMES.map((p) => `tags.${p}`)),
);
const term = fc.oneof(
  fc.record({ op, property: propertyName, value: nastyValue }, { requiredKeys: ['op'] }),
  fc.record({ op, tag: fc.oneof(word, fc.constantFrom('*', '', 'team', ...PROTO_NAMES)), value: nastyValue }, { requiredKeys: ['op'] }),
  fc.record({ op, rel: fc.oneof(word, fc.constantFrom('gvc', 'location', 'self', ...PROTO_NAMES)), value: nastyValue }, { requiredKeys: ['op'] }),
  nastyValue,
);

/** A query body: well formed, subtly wrong, or nonsense. */
export const queryBody: fc.Arbitrary<unknown> = fc.oneof(
  fc.record(
    {
      kind: fc.oneof(fc.constantFrom('workload', 'gvc', 'query'), word),
      spec: fc.record(
        { match: fc.oneof(fc.constantFrom('all', 'any', 'none'), nastyValue), terms: fc.array(term, { maxLength: 4 }), sort: fc.record({ by: propertyName, order: fc.constantFrom('asc', 'desc', 'up') }) },
        { requiredKeys: [] },
      ),
      fetch: fc.constantFrom('items', 'links', 'bogus'),
    },
    { requiredKeys: [] },
  ),
  nastyValue,
);

// ---- whole requests --------------------------------------------------------------------------------

export interface Targets {
  token: string;
  /** Per kind, the name of an item created before fuzzing (when one could be), and its stored body. */
  seeded: Map<string, Record<string, unknown>>;
}

function withHeaders(t: Targets, body: unknown, base: { method: string; url: string; label: string }): fc.Arbitrary<FuzzRequest> {
  return fc.tuple(tokenHeader(t.token), contentType, fc.boolean(), fc.option(socketHeaders, { freq: 5, nil: undefined }), queryString).map(([auth, type, asJson, socket, qs]) => {
    const headers: Record<string, string | string[]> = {};
    if (auth !== undefined) headers.authorization = auth;
    let payload: string | undefined;
    if (body !== undefined) {
      payload = JSON.stringify(body);
      if (type !== undefined) headers['content-type'] = asJson ? type : type;
    }
    if (socket) Object.assign(headers, socket);
    if (socket && body === undefined) delete headers['content-type'];
    const req = { ...base, url: base.url + qs, headers, payload, socket: !!socket };
    // Node answers 431 (not Keel) beyond 16 KiB of request line and headers: stay under it on a socket.
    const size = () => req.url.length + Object.entries(headers).reduce((n, [k, v]) => n + k.length + String(v).length + 4, 0);
    if (req.socket && size() > 15_000) delete headers['x-fuzz'];
    if (req.socket && size() > 15_000) req.socket = false;
    return req;
  });
}

/** One random request about `def`: create, replace, patch, apply, get, list, query, delete, permissions. */
export function kindRequest(def: KindDef, t: Targets): fc.Arbitrary<FuzzRequest> {
  const base = kindPath(def);
  const seeded = t.seeded.get(def.kind);
  const itemName = seeded ? fc.oneof({ weight: 3, arbitrary: fc.constant(String(seeded.name)) }, { weight: 2, arbitrary: pathName }) : pathName;
  const validPatch = seeded ? (patchArb(resourceSchema(def), seeded, ['name']) as fc.Arbitrary<unknown>) : directiveBody(def);
  const withVersion = (b: unknown) =>
    fc.constantFrom(undefined, 1, 2, 0, -1, 1e12, '1', 'x', null).map((v) => (v === undefined || typeof b !== 'object' || b === null || Array.isArray(b) ? b : entriesToObject([...Object.entries(b), ['version', v]])));
  return fc.oneof(
    kindBody(def).chain((b) => withHeaders(t, b, { method: 'POST', url: base, label: `create ${def.kind}` })),
    kindBody(def).chain((b) => withHeaders(t, b, { method: 'PUT', url: base, label: `apply ${def.kind}` })),
    fc.tuple(itemName, kindBody(def)).chain(([n, b]) => withHeaders(t, b, { method: 'PUT', url: `${base}/${n}`, label: `replace ${def.kind}` })),
    fc.tuple(itemName, fc.oneof(validPatch, directiveBody(def), kindBody(def)).chain(withVersion)).chain(([n, b]) => withHeaders(t, b, { method: 'PATCH', url: `${base}/${n}`, label: `patch ${def.kind}` })),
    itemName.chain((n) => withHeaders(t, undefined, { method: 'GET', url: `${base}/${n}`, label: `get ${def.kind}` })),
    withHeaders(t, undefined, { method: 'GET', url: base, label: `list ${def.kind}` }),
    queryBody.chain((b) => withHeaders(t, b, { method: 'POST', url: `${base}/-query`, label: `query ${def.kind}` })),
    withHeaders(t, undefined, { method: 'GET', url: `${base}/-schema/permissions`, label: `permissions ${def.kind}` }),
    fc.tuple(itemName, fc.constantFrom('DELETE', 'HEAD', 'OPTIONS', 'POST', 'TRACE', 'PROPFIND')).chain(([n, m]) => withHeaders(t, undefined, { method: m, url: `${base}/${n}`, label: `${m} ${def.kind}` })),
  );
}

/** Any request: about one of the kinds, or to odd paths. */
export function anyRequest(t: Targets): fc.Arbitrary<FuzzRequest> {
  const oddPath = fc.oneof(
    fc.constantFrom('/', '/org', '/org/', '//org//acme', '/org/acme', '/org/ACME', '/org/other', '/org/acme/nokind', '/org/acme/gvc/missing/workload', '/org/acme/gvc/fz/gvc',
      '/org/acme/gvc/fz/workload/x/extra/more', '/org/%2e%2e/gvc', '/org/acme/./gvc', '/org/acme/../acme/gvc', '/about', '/discovery', '/docs', '/openapi.json', '/org/acme/-query'),
    fc.tuple(pathName, pathName).map(([a, b]) => `/org/${a}/${b}`),
  );
  return fc.oneof(
    { weight: 6, arbitrary: fc.constantFrom(...KINDS).chain((def) => kindRequest(def, t)) },
    { weight: 1, arbitrary: fc.tuple(oddPath, fc.constantFrom('GET', 'POST', 'PUT', 'PATCH', 'DELETE'), fc.option(nastyValue, { nil: undefined })).chain(([url, method, body]) => withHeaders(t, body, { method, url, label: 'odd path' })) },
  );
}

/** An audit context created before fuzzing, so custom events have somewhere to go. */
export const AUDIT_CONTEXT = 'fz-ctx';

const auditQueryString = fc
  .array(
    fc.tuple(
      fc.constantFrom('resourceType', 'resourceName', 'resourceId', 'subjectName', 'actionType', 'fromEvent', 'toEvent', 'contextName', 'limit', 'page', 'pageSize', 'cursor', 'location', '__proto__'),
      fc.oneof(
        fc.constantFrom('gvc', 'cpln', AUDIT_CONTEXT, '2020-01-01T00:00:00Z', '2999-12-31T23:59:59.999Z', 'not-a-time', '0', '-1', '1001', '1e3', '', '%00', '%FF', 'a'.repeat(3000)),
        word,
        fc.integer({ min: 0, max: 4_102_444_800_000 }).map((ms) => encodeURIComponent(new Date(ms).toISOString())),
      ),
    ),
    { maxLength: 4 },
  )
  .map((pairs) => (pairs.length ? '?' + pairs.map(([k, v]) => `${k}=${v}`).join('&') : ''));

/** A custom event: mostly the documented shape with odd values, sometimes anything at all. */
const eventTime = fc.oneof({ weight: 3, arbitrary: fc.integer({ min: 0, max: 4_102_444_800_000 }).map((ms) => new Date(ms).toISOString()) }, { weight: 1, arbitrary: nastyString });
const customEvent: fc.Arbitrary<unknown> = fc.oneof(
  // Valid events, so that accepted ones go into the chain the test verifies afterwards (the shapes
  // below are mostly refused: an odd context, time or Keel's own action is enough).
  {
    weight: 6,
    arbitrary: fc.record(
      {
        resource: fc.record({ type: word, id: word, name: word, data: nastyValue }, { requiredKeys: ['type'] }),
        action: fc.record({ type: word.filter((w) => ![...KEEL_ACTIONS].some((a) => a.toLowerCase() === w)), data: nastyValue }, { requiredKeys: ['type'] }),
        subject: fc.record({ email: word, data: nastyValue }, { requiredKeys: [] }),
        eventTime: fc.integer({ min: 0, max: 4_102_444_800_000 }).map((ms) => new Date(ms).toISOString()),
        context: fc.record({ data: nastyValue }, { requiredKeys: [] }),
      },
      { requiredKeys: ['resource', 'action'] },
    ),
  },
  {
    weight: 4,
    arbitrary: fc.record(
      {
        resource: fc.record({ type: fc.oneof(word, nastyString), id: fc.oneof(word, nastyString), name: fc.oneof(word, nastyString), data: nastyValue }, { requiredKeys: ['type'] }),
        action: fc.record({ type: fc.oneof(word, nastyString), data: nastyValue }, { requiredKeys: ['type'] }),
        subject: nastyValue,
        result: fc.oneof(fc.record({ status: fc.constantFrom('success', 'failure', ''), message: nastyString }, { requiredKeys: [] }), nastyValue),
        eventTime,
        context: nastyValue,
      },
      { requiredKeys: ['resource', 'action'] },
    ),
  },
  {
    weight: 2,
    arbitrary: fc.record({ resource: nastyValue, action: nastyValue, subject: nastyValue, eventTime: nastyValue, extra: nastyValue }, { requiredKeys: [] }),
  },
  { weight: 1, arbitrary: nastyValue },
);

/** One random Audit API request: queries, lookups by id, resource and subject, custom events. */
export function auditRequest(t: Targets): fc.Arbitrary<FuzzRequest> {
  const base = `/audit/org/${ORG}`;
  const org = fc.oneof({ weight: 4, arbitrary: fc.constant(ORG) }, { weight: 1, arbitrary: pathName });
  const context = fc.oneof({ weight: 3, arbitrary: fc.constant(AUDIT_CONTEXT) }, { weight: 1, arbitrary: fc.constant('cpln') }, { weight: 1, arbitrary: pathName });
  const audit = (r: fc.Arbitrary<FuzzRequest>) => r.map((req) => ({ ...req, audit: true, socket: false }));
  return audit(
    fc.oneof(
      fc.tuple(org, auditQueryString).chain(([o, q]) => withHeaders(t, undefined, { method: 'GET', url: `/audit/org/${o}${q}`, label: 'audit query' })),
      fc.tuple(fc.constantFrom('id', 'resource/id', 'resource/name', 'subject/email'), pathName).chain(([by, v]) => withHeaders(t, undefined, { method: 'GET', url: `${base}/${by}/${v}`, label: `audit by ${by}` })),
      fc.tuple(context, customEvent, fc.constantFrom('', '?async=true', '?async=false', '?async=maybe'), fc.nat(4)).chain(([c, body, q, chaos]) => {
        const req = { method: 'POST', url: `${base}/auditctx/${c}${q}`, label: 'custom audit event' };
        // Mostly a well-formed request, so that the event itself is what varies; sometimes any headers.
        if (chaos === 4) return withHeaders(t, body, req);
        return fc.constant({ ...req, headers: { authorization: `Bearer ${t.token}`, 'content-type': 'application/json' }, payload: JSON.stringify(body) });
      }),
      fc.tuple(fc.constantFrom('PUT', 'PATCH', 'DELETE'), fc.constantFrom(base, `${base}/auditctx/cpln`, `${base}/id/x`, '/audit', '/audit/org')).chain(([m, url]) =>
        withHeaders(t, { x: 1 }, { method: m, url, label: `${m} on the Audit API` }),
      ),
    ),
  );
}

/** Fixed hostile bodies: deep nesting, sizes around the limit, prototype keys, encodings. */
export function hostileRequests(t: Targets): FuzzRequest[] {
  const deepArrays = '['.repeat(10_000) + ']'.repeat(10_000);
  const deepObjects = '{"a":'.repeat(10_000) + '1' + '}'.repeat(10_000);
  const deepMixed = '{"spec":' + '[{"x":'.repeat(5_000) + '1' + '}]'.repeat(5_000) + '}';
  const nearLimit = (n: number) => JSON.stringify({ name: 'huge-one', description: 'x', tags: { big: 'y'.repeat(n) } });
  const pad = BODY_LIMIT - nearLimit(0).length;
  const bodies: Array<[string, string]> = [
    ['10k nested arrays', deepArrays],
    ['10k nested objects', deepObjects],
    ['5k nested array/object', deepMixed],
    ['name + 10k nested objects', `{"name":"deep","spec":${deepObjects}}`],
    ['1 byte under the limit', nearLimit(pad - 1)],
    ['exactly the limit', nearLimit(pad)],
    ['1 byte over the limit', nearLimit(pad + 1)],
    ['4 MiB', nearLimit(4 * BODY_LIMIT)],
    ['huge description', JSON.stringify({ name: 'huge-desc', description: 'd'.repeat(BODY_LIMIT - 100) })],
    ['40k tags', JSON.stringify({ name: 'many-tags', tags: Object.fromEntries(Array.from({ length: 40_000 }, (_, i) => [`t${i}`, 'v'])) })],
    ['wide array', JSON.stringify({ name: 'wide', memberLinks: Array.from({ length: 60_000 }, () => 'x') })],
    ['__proto__ top', '{"name":"proto-a","__proto__":{"polluted":true}}'],
    ['__proto__ nested', '{"name":"proto-b","tags":{"__proto__":{"polluted":true}},"spec":{"__proto__":{"isAdmin":true}}}'],
    ['constructor.prototype', '{"name":"proto-c","constructor":{"prototype":{"polluted":true}},"tags":{"constructor":{"prototype":{"x":1}}}}'],
    ['prototype key', '{"name":"proto-d","prototype":{"polluted":true},"tags":{"prototype":"x"}}'],
    ['$patch/__proto__', '{"$patch/__proto__":[{"name":"polluted"}],"$append/constructor":[1],"$drop":["__proto__","constructor"]}'],
    ['NUL escape', '{"name":"nul","description":"a\\u0000b"}'],
    ['lone surrogate', '{"name":"surrogate","description":"\\ud800","tags":{"\\udfff":"\\ud83d"}}'],
    ['astral + RTL', '{"name":"astral","description":"\u202e\ud83d\udca9\u05e9\u05dc\u05d5\u05dd","tags":{"\ud83d\udca9":"\u202e"}}'],
    ['BOM', '\ufeff{"name":"bom"}'],
    ['invalid UTF-8 bytes as latin1', Buffer.from([0x7b, 0x22, 0x6e, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d]).toString('latin1')],
    ['truncated', '{"name":"trunc'],
    ['trailing garbage', '{"name":"tg"} x'],
    ['two documents', '{"name":"a"}{"name":"b"}'],
    ['null', 'null'],
    ['array', '[]'],
    ['number', '1e400'],
    ['string', '"str"'],
    ['true', 'true'],
    ['empty', ''],
    ['whitespace', ' \n\t '],
    ['duplicate keys', '{"name":"dup","name":"dup-2","version":1,"version":"x"}'],
    ['huge number', '{"name":"bignum","version":1e308,"spec":{"initialCapacity":123456789012345678901234567890}}'],
    ['negative zero', '{"name":"negzero","version":-0}'],
  ];
  const urls = [
    ['POST', `/org/${ORG}/group`],
    ['PATCH', `/org/${ORG}/group/${String(t.seeded.get('group')?.name ?? 'none')}`],
    ['PUT', `/org/${ORG}/gvc/${GVC}/volumeset/hostile`],
    ['POST', `/org/${ORG}/workload/-query`],
    ['PUT', `/org/${ORG}/secret`],
  ];
  const out: FuzzRequest[] = [];
  for (const [label, payload] of bodies) {
    for (const [method, url] of urls) {
      out.push({ method, url, headers: { authorization: `Bearer ${t.token}`, 'content-type': 'application/json' }, payload, label });
    }
  }
  // Over a real socket too, where the HTTP parser and the body limit see the bytes.
  for (const [label, payload] of bodies.filter(([l]) => /limit|4 MiB|nested|BOM|latin1/.test(l))) {
    out.push({ method: 'POST', url: `/org/${ORG}/group`, headers: { authorization: `Bearer ${t.token}`, 'content-type': 'application/json; charset=utf-8' }, payload, label: `${label} (socket)`, socket: true });
  }
  // Content types on a valid body, including none and duplicates.
  for (const type of [...CONTENT_TYPES, undefined, ['application/json', 'application/json'], ['text/plain', 'application/json']]) {
    const headers: Record<string, string | string[]> = { authorization: `Bearer ${t.token}` };
    if (type !== undefined) headers['content-type'] = type;
    out.push({ method: 'POST', url: `/org/${ORG}/group`, headers, payload: '{"name":"ctype-probe","description":"x"}', label: `content-type ${JSON.stringify(type)}`, socket: Array.isArray(type) });
    out.push({ method: 'PATCH', url: `/org/${ORG}/group/ctype-probe`, headers, payload: '{"description":"y"}', label: `patch content-type ${JSON.stringify(type)}`, socket: true });
  }
  // Every kind: names of other types (validation coerces `true` to "true"), and fields of the wrong shape that hooks and defaults read.
  for (const def of KINDS) {
    const auth = { authorization: `Bearer ${t.token}`, 'content-type': 'application/json' };
    for (const name of [true, false, 123, null, {}, ['a'], { toString: 'x' }]) {
      out.push({ method: 'POST', url: kindPath(def), headers: auth, payload: JSON.stringify({ name, tags: {} }), label: `${def.kind} named ${JSON.stringify(name)}` });
    }
    for (const field of Object.keys(def.fields)) {
      for (const value of [true, 7, 'x', [], [1], { '': 1 }, { constructor: 'x', toString: 'y', hasOwnProperty: 'z', valueOf: 'v' }]) {
        out.push({ method: 'PUT', url: kindPath(def), headers: auth, payload: JSON.stringify({ name: 'shape', [field]: value }), label: `${def.kind}.${field} = ${JSON.stringify(value)}` });
      }
    }
  }
  // Secret data of every type with keys every object inherits.
  for (const type of SECRET_TYPES) {
    out.push({ method: 'PUT', url: `/org/${ORG}/secret`, headers: { authorization: `Bearer ${t.token}`, 'content-type': 'application/json' }, payload: JSON.stringify({ name: `inherited-${type}`, type, data: { constructor: 'x', toString: 'y', __proto__x: 'z' } }), label: `secret ${type} with inherited keys` });
  }
  // NUL and bad encodings on the meta and docs routes too (they are mounted in their own plugin context).
  for (const path of ['/openapi.json', '/docs', '/docs/json', '/docs/static/index.html', '/docs/nothing-here', '/about', '/discovery', '/healthz', '/readyz']) {
    for (const tail of ['?x=%00', '?x=%FF', '%00', '/%ED%A0%80', '/' + 'p'.repeat(300)]) {
      out.push({ method: 'GET', url: path + tail, headers: { authorization: `Bearer ${t.token}` }, label: `meta ${path}${tail.slice(0, 12)}` });
    }
  }
  // Huge header values within Node's 16 KiB header limit.
  out.push({ method: 'GET', url: `/org/${ORG}/group`, headers: { authorization: `Bearer ${t.token}`, 'x-big': 'h'.repeat(14_000) }, label: 'one 14 KB header', socket: true });
  out.push({ method: 'GET', url: `/org/${ORG}/group`, headers: { authorization: `Bearer ${'t'.repeat(14_000)}` }, label: '14 KB authorization', socket: true });
  out.push({ method: 'GET', url: `/org/${ORG}/group/${'n'.repeat(8_000)}`, headers: { authorization: `Bearer ${t.token}` }, label: '8 KB name in the path', socket: true });
  out.push({ method: 'GET', url: `/org/${ORG}/group?${'q=1&'.repeat(2_000)}`, headers: { authorization: `Bearer ${t.token}` }, label: '2000 query parameters', socket: true });
  return out;
}

/**
 * Creates one item per kind from random valid bodies (a few tries each; kinds whose hooks refuse
 * every random body, or that clients cannot create, stay unseeded), as targets for patches.
 */
export async function seedTargets(app: App, token: string, seed = 42): Promise<Map<string, Record<string, unknown>>> {
  const seeded = new Map<string, Record<string, unknown>>();
  for (const def of KINDS) {
    if (def.kind === 'org' || def.operations?.create === false) continue;
    const samples = fc.sample(valueArb(resourceSchema(def)), { numRuns: 15, seed });
    for (const [i, sample] of samples.entries()) {
      const body = { ...(sample as Record<string, unknown>), name: def.name ? (sample as Record<string, unknown>).name : `fz-${def.kind}-${i}` };
      const res = await app.core.inject({ method: 'POST', url: kindPath(def), headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, payload: JSON.stringify(body) });
      if (res.statusCode >= 500) throw new Error(`seeding ${def.kind}: ${res.statusCode} ${res.body} for ${JSON.stringify(body)}`);
      if (res.statusCode === 201) {
        seeded.set(def.kind, JSON.parse(res.body));
        break;
      }
    }
  }
  return seeded;
}
