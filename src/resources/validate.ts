import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import addFormats from 'ajv-formats';
import { ApiError, type FieldError } from '../errors.js';
import { resourceSchema } from '../kinds/derive.js';
import { FORMATS } from '../kinds/formats.js';
import type { KindDef } from '../kinds/types.js';

// One ajv instance for every kind. coerceTypes turns the strings the CLI sends ("20", "false")
// into the schema's numbers and booleans, in place; verbose keeps the refused value on an error,
// so that a format's message can say what was wrong with it.
// No optimization pass over the generated code: it counts each generated variable (err12, _errs7,
// data3, ...) as the first key of a fresh object, thousands of them, and V8 keeps at most 1536
// shapes that start from the empty object. Once those are taken, every object that gets its first
// key afterwards (each request's headers, each response's) gets a shape of its own, and every
// property access on the request path falls to V8's slowest lookups (test/kinds/object-shapes.test.ts).
const ajv = new Ajv({ allErrors: true, coerceTypes: true, strict: false, useDefaults: false, verbose: true, code: { optimize: false } });
addFormats.default(ajv);
for (const [name, format] of Object.entries(FORMATS)) {
  ajv.addFormat(name, { type: 'string', validate: (value: string) => format.problem(value) === undefined });
}
ajv.addKeyword({ keyword: 'x-key' });
ajv.addKeyword({ keyword: 'x-immutable' });

const compiled = new Map<string, ValidateFunction>();

function validatorFor(def: KindDef): ValidateFunction {
  let validate = compiled.get(def.kind);
  if (!validate) {
    validate = ajv.compile(resourceSchema(def));
    compiled.set(def.kind, validate);
  }
  return validate;
}

/** Validates (and coerces, in place) a resource body against its kind's full schema. */
export function validateResource(def: KindDef, item: Record<string, unknown>): void {
  const validate = validatorFor(def);
  if (!validate(item)) {
    const errors = (validate.errors ?? []).map(fieldError);
    throw ApiError.badRequest(`invalid ${def.kind}: ${errors.map((e) => `${e.path || '(body)'} ${e.message}`).join('; ')}`, errors);
  }
}

function fieldError(e: ErrorObject): FieldError {
  let path = e.instancePath
    .split('/')
    .slice(1)
    .map((seg) => seg.replace(/~1/g, '/').replace(/~0/g, '~'))
    .map((seg) => (/^\d+$/.test(seg) ? `[${seg}]` : `.${seg}`))
    .join('')
    .replace(/^\./, '');
  let message = e.message ?? 'is invalid';
  if (e.keyword === 'additionalProperties') {
    const extra = (e.params as { additionalProperty: string }).additionalProperty;
    path = path ? `${path}.${extra}` : extra;
    message = 'is not a known field';
  } else if (e.keyword === 'required') {
    const missing = (e.params as { missingProperty: string }).missingProperty;
    path = path ? `${path}.${missing}` : missing;
    message = 'is required';
  } else if (e.keyword === 'enum') {
    message = `must be one of: ${(e.params as { allowedValues: unknown[] }).allowedValues.join(', ')}`;
  } else if (e.keyword === 'not' && Array.isArray((e.schema as { enum?: unknown[] }).enum)) {
    message = `must not be one of: ${(e.schema as { enum: unknown[] }).enum.join(', ')} (reserved)`;
  } else if (e.keyword === 'format' && FORMATS[(e.params as { format: string }).format]) {
    const format = FORMATS[(e.params as { format: string }).format];
    message = `${format.problem(String(e.data))}: must be ${format.allowed}`;
  }
  return { path, message };
}
