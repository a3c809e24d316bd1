// Small builders for the JSON Schemas that kinds declare. The schemas are plain
// JSON Schema (draft-07 subset) so ajv validates them, the patch engine walks
// them and the OpenAPI document embeds them unchanged.

export type JsonSchema = {
  type?: 'object' | 'array' | 'string' | 'number' | 'integer' | 'boolean' | 'null' | Array<string>;
  properties?: Record<string, JsonSchema>;
  required?: string[];
  additionalProperties?: boolean | JsonSchema;
  items?: JsonSchema;
  enum?: unknown[];
  const?: unknown;
  maxLength?: number;
  minLength?: number;
  maxItems?: number;
  minItems?: number;
  maxProperties?: number;
  minimum?: number;
  maximum?: number;
  pattern?: string;
  format?: string;
  description?: string;
  default?: unknown;
  oneOf?: JsonSchema[];
  anyOf?: JsonSchema[];
  /** Array of objects whose items are identified by this property (patch `$drop/x`, `$patch/x`). */
  'x-key'?: string;
  /** Server-owned: ignored when a client sends it. */
  readOnly?: boolean;
  /** Cannot change once created (400 on update). */
  'x-immutable'?: boolean;
  /** An array that `$replace/x` may also set, because a client sends it that way. */
  'x-replaceable'?: boolean;
  [extra: string]: unknown;
};

type Opts = Omit<JsonSchema, 'type' | 'properties' | 'items'>;

export const str = (opts: Opts = {}): JsonSchema => ({ type: 'string', ...opts });
export const num = (opts: Opts = {}): JsonSchema => ({ type: 'number', ...opts });
export const int = (opts: Opts = {}): JsonSchema => ({ type: 'integer', ...opts });
export const bool = (opts: Opts = {}): JsonSchema => ({ type: 'boolean', ...opts });
export const oneOf = (values: readonly string[], opts: Opts = {}): JsonSchema => ({ type: 'string', enum: [...values], ...opts });

/** A closed object: unknown fields are rejected. */
export const obj = (properties: Record<string, JsonSchema>, opts: Opts = {}): JsonSchema => ({
  type: 'object',
  properties,
  additionalProperties: false,
  ...opts,
});

/** A map of free keys to values of one schema (tags, env maps, regions). */
export const map = (values: JsonSchema = {}, opts: Opts = {}): JsonSchema => ({
  type: 'object',
  additionalProperties: values,
  ...opts,
});

/** An object whose shape Keel does not detail (yet): any JSON object. */
export const anyObject = (opts: Opts = {}): JsonSchema => ({ type: 'object', ...opts });

export const arr = (items: JsonSchema, opts: Opts = {}): JsonSchema => ({ type: 'array', items, ...opts });

/** An array of objects identified by `key` (default `name`), as patch directives address them. */
export const keyed = (items: JsonSchema, key = 'name', opts: Opts = {}): JsonSchema => ({
  type: 'array',
  items,
  'x-key': key,
  ...opts,
});

/** A link to another resource: full (`/org/o/kind/n`) or relative (`//kind/n`). */
export const link = (opts: Opts = {}): JsonSchema => ({ type: 'string', format: 'keel-link', maxLength: 512, ...opts });

// Strings of a particular grammar, checked and explained by the formats of formats.ts.
export const cpu = (): JsonSchema => str({ maxLength: 32, format: 'keel-cpu' });
export const memory = (): JsonSchema => str({ maxLength: 32, format: 'keel-memory' });
export const duration = (): JsonSchema => str({ maxLength: 64, format: 'keel-duration' });
export const cronSchedule = (): JsonSchema => str({ minLength: 1, maxLength: 256, format: 'keel-cron' });
export const image = (): JsonSchema => str({ minLength: 1, maxLength: 1024, format: 'keel-image' });
export const dnsName = (): JsonSchema => str({ minLength: 1, maxLength: 253, format: 'keel-dns-name' });
export const hostPattern = (): JsonSchema => str({ minLength: 1, maxLength: 255, format: 'keel-host-pattern' });

export const readOnly = (schema: JsonSchema): JsonSchema => ({ ...schema, readOnly: true });
export const immutable = (schema: JsonSchema): JsonSchema => ({ ...schema, 'x-immutable': true });

export const NAME_PATTERN = '^[a-z]([-a-z0-9])*[a-z0-9]$';
export const nameSchema = (): JsonSchema => str({ minLength: 2, maxLength: 64, pattern: NAME_PATTERN });
export const descriptionSchema = (): JsonSchema => str({ maxLength: 250 });
export const tagsSchema = (): JsonSchema =>
  map({ type: ['string', 'number', 'boolean', 'null'], maxLength: 1024 } as JsonSchema, { maxProperties: 50 });

/** Every kind's name, as policies target them and queries name them. */
export const KIND_NAMES = [
  'org', 'cloudaccount', 'policy', 'user', 'group', 'resource', 'task', 'permissions', 'serviceaccount', 'secret',
  'location', 'gvc', 'workload', 'quota', 'identity', 'deployment', 'event', 'account', 'domain', 'image', 'ipset',
  'resourcepolicy', 'accessreport', 'agent', 'auditctx', 'dbcluster', 'memcachecluster', 'spicedbcluster', 'tenant',
  'mk8s', 'command', 'policymembership', 'primitive', 'foreign', 'link', 'imagesummary', 'volumeset',
] as const;

/** The query object of seed 2.3, as embedded in groups, policies and GVC placement. */
export const querySchema = (): JsonSchema =>
  obj({
    kind: oneOf(KIND_NAMES),
    context: anyObject(),
    fetch: oneOf(['items', 'links']),
    spec: obj({
      match: oneOf(['all', 'any', 'none']),
      // Terms have no name: patch directives identify them by their property, tag or rel value.
      terms: keyed(
        obj({
          op: oneOf(['=', '!=', '>', '>=', '<', '<=', '~', 'exists', '!exists']),
          property: str({ maxLength: 256 }),
          rel: str({ maxLength: 64 }),
          tag: str({ maxLength: 256 }),
          value: { type: ['string', 'number', 'boolean'] } as JsonSchema,
        }),
        '$term',
        { maxItems: 100 },
      ),
      sort: obj({ by: str({ maxLength: 256 }), order: oneOf(['asc', 'desc']) }),
    }),
  });

const endpoint = () => str({ maxLength: 1024 });

/** Tracing of an org or a GVC (public type Tracing): a sampling rate and one provider. */
export const tracingSchema = (): JsonSchema =>
  obj(
    {
      sampling: num({ minimum: 0, maximum: 100 }),
      lightstep: obj({ endpoint: endpoint(), credentials: link() }, { required: ['endpoint'] }),
      customTags: map(anyObject()),
      provider: obj({
        otel: obj({ endpoint: endpoint() }, { required: ['endpoint'] }),
        lightstep: obj({ endpoint: endpoint(), credentials: link() }, { required: ['endpoint'] }),
        controlplane: obj({}),
      }),
    },
    { required: ['sampling'] },
  );
