// Creating a secret through a form of its type. The types are described as data (which fields,
// which are required, which are multi-line, secret or lists) and one form renders any of them,
// so a new type is one entry here. The server validates: the form sends a dry run or the create
// and shows the API's 4xx message next to the field it names (details.errors[].path).
import type { ComponentChildren } from 'preact';
import { useState } from 'preact/hooks';
import { call, explain, Problem, selfOf, type Item } from './api';
import { go } from './route';
import { ErrorBox } from './widgets';

type Input = 'line' | 'secret' | 'text' | 'choice' | 'lines';

interface Field {
  name: string;
  label: string;
  input: Input;
  required?: boolean;
  choices?: readonly string[];
  hint?: string;
}

interface SecretType {
  type: string;
  label: string;
  /** fields: an object of the fields below; document: one JSON document as a string; pairs: a free key/value map. */
  data: 'fields' | 'document' | 'pairs';
  fields?: Field[];
  hint?: string;
}

const ENCODING = ['plain', 'base64'] as const;
const AWS_FIELDS: Field[] = [
  { name: 'accessKey', label: 'Access key', input: 'line', required: true },
  { name: 'secretKey', label: 'Secret key', input: 'secret', required: true },
  { name: 'roleArn', label: 'Role ARN', input: 'line' },
  { name: 'externalId', label: 'External id', input: 'line' },
];

const SECRET_TYPES: SecretType[] = [
  {
    type: 'opaque',
    label: 'Opaque',
    data: 'fields',
    fields: [
      { name: 'payload', label: 'Payload', input: 'text' },
      { name: 'encoding', label: 'Encoding', input: 'choice', choices: ENCODING },
    ],
  },
  {
    type: 'keypair',
    label: 'Key pair',
    data: 'fields',
    fields: [
      { name: 'secretKey', label: 'Secret (private) key', input: 'text', required: true, hint: 'PEM' },
      { name: 'publicKey', label: 'Public key', input: 'text' },
      { name: 'passphrase', label: 'Passphrase', input: 'secret' },
    ],
  },
  {
    type: 'userpass',
    label: 'Username and password',
    data: 'fields',
    fields: [
      { name: 'username', label: 'Username', input: 'line', required: true },
      { name: 'password', label: 'Password', input: 'secret', required: true },
      { name: 'encoding', label: 'Encoding', input: 'choice', choices: ENCODING },
    ],
  },
  { type: 'dictionary', label: 'Dictionary', data: 'pairs', hint: 'Each key maps to a string value.' },
  { type: 'aws', label: 'AWS', data: 'fields', fields: AWS_FIELDS },
  { type: 'gcp', label: 'GCP', data: 'document', hint: "The service account's JSON key file." },
  { type: 'azure-sdk', label: 'Azure SDK', data: 'document', hint: 'The JSON credentials (subscriptionId, tenantId, clientId, clientSecret).' },
  {
    type: 'azure-connector',
    label: 'Azure connector',
    data: 'fields',
    fields: [
      { name: 'url', label: 'Function URL', input: 'line', required: true },
      { name: 'code', label: 'Function code', input: 'secret', required: true },
    ],
  },
  { type: 'docker', label: 'Docker', data: 'document', hint: 'A Docker config JSON ({"auths": {…}}).' },
  { type: 'ecr', label: 'Amazon ECR', data: 'fields', fields: [...AWS_FIELDS, { name: 'repos', label: 'Repositories', input: 'lines', hint: 'One per line.' }] },
  {
    type: 'tls',
    label: 'TLS',
    data: 'fields',
    fields: [
      { name: 'key', label: 'Private key', input: 'text', hint: 'PEM' },
      { name: 'cert', label: 'Certificate', input: 'text', required: true, hint: 'PEM' },
      { name: 'chain', label: 'Chain', input: 'text', hint: 'PEM' },
    ],
  },
  {
    type: 'nats-account',
    label: 'NATS account',
    data: 'fields',
    fields: [
      { name: 'accountId', label: 'Account id', input: 'line', required: true },
      { name: 'privateKey', label: 'Private key', input: 'secret', required: true },
    ],
  },
];

type Values = Record<string, string>;

/** The create body of a type from what was typed; empty optional fields are left out, as a person would leave them out of YAML. */
function secretBody(spec: SecretType, name: string, description: string, values: Values, pairs: Array<[string, string]>): Record<string, unknown> {
  let data: unknown;
  if (spec.data === 'document') data = values.document ?? '';
  else if (spec.data === 'pairs') data = Object.fromEntries(pairs.filter(([k]) => k.trim()).map(([k, v]) => [k.trim(), v]));
  else {
    const out: Record<string, unknown> = {};
    for (const f of spec.fields ?? []) {
      const v = values[f.name] ?? '';
      if (v === '') continue;
      out[f.name] = f.input === 'lines' ? v.split('\n').map((s) => s.trim()).filter(Boolean) : v;
    }
    data = out;
  }
  return { kind: 'secret', name, ...(description ? { description } : {}), type: spec.type, data };
}

/** Field errors the API named (details.errors[].path), keyed by the form field they belong to. */
function fieldErrors(err: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  const errors = err instanceof Problem ? ((err.body as any)?.details?.errors as Array<{ path?: string; message?: string }> | undefined) : undefined;
  for (const e of errors ?? []) {
    if (typeof e.path !== 'string') continue;
    const field = e.path === 'data' ? 'data' : e.path.startsWith('data.') ? e.path.slice(5) : e.path;
    out[field] = `${e.path} ${e.message ?? 'is not valid'}`;
  }
  return out;
}

export function SecretForm(props: { collection: string; asYaml: (body: Record<string, unknown>) => void }) {
  const [type, setType] = useState(SECRET_TYPES[0].type);
  const [name, setName] = useState('');
  const [description, setDescription] = useState('');
  const [values, setValues] = useState<Values>({});
  const [pairs, setPairs] = useState<Array<[string, string]>>([['', '']]);
  const [error, setError] = useState<string>();
  const [errors, setErrors] = useState<Record<string, string>>({});
  const [checked, setChecked] = useState(false);
  const spec = SECRET_TYPES.find((t) => t.type === type)!;
  const body = () => secretBody(spec, name.trim(), description.trim(), values, pairs);

  const submit = async (dryRun: boolean) => {
    setError(undefined);
    setErrors({});
    setChecked(false);
    try {
      const created = await call<Item>('POST', `${props.collection}${dryRun ? '?dryRun=true' : ''}`, body());
      if (dryRun) setChecked(true);
      else go(selfOf(created));
    } catch (err) {
      setError(explain(err));
      setErrors(fieldErrors(err));
    }
  };
  const edited = () => (setChecked(false), setError(undefined));
  const set = (field: string, value: string) => (setValues((v) => ({ ...v, [field]: value })), edited());

  return (
    <section>
      <h1>New secret</h1>
      <form
        class="form"
        aria-label="New secret"
        onSubmit={(e) => {
          e.preventDefault();
          void submit(false);
        }}
      >
        <Labelled id="secret-type" label="Type">
          <select
            id="secret-type"
            value={type}
            onChange={(e) => {
              setType((e.target as HTMLSelectElement).value);
              setValues({});
              setErrors({});
              edited();
            }}
          >
            {SECRET_TYPES.map((t) => (
              <option key={t.type} value={t.type}>
                {t.label} ({t.type})
              </option>
            ))}
          </select>
        </Labelled>
        <Labelled id="secret-name" label="Name" required error={errors.name}>
          <input id="secret-name" value={name} aria-required="true" {...invalid('secret-name', errors.name)} onInput={(e) => (setName((e.target as HTMLInputElement).value), edited())} />
        </Labelled>
        <Labelled id="secret-description" label="Description" error={errors.description}>
          <input id="secret-description" value={description} {...invalid('secret-description', errors.description)} onInput={(e) => (setDescription((e.target as HTMLInputElement).value), edited())} />
        </Labelled>
        <fieldset class="type-fields">
          <legend>{spec.label} data</legend>
          {spec.hint ? <p class="muted">{spec.hint}</p> : null}
          {spec.data === 'document' ? (
            <Labelled id="secret-document" label="JSON document" error={errors.data}>
              <textarea id="secret-document" rows={8} spellcheck={false} value={values.document ?? ''} {...invalid('secret-document', errors.data)} onInput={(e) => set('document', (e.target as HTMLTextAreaElement).value)} />
            </Labelled>
          ) : null}
          {spec.data === 'pairs' ? <Pairs pairs={pairs} error={errors.data} onChange={(p) => (setPairs(p), edited())} /> : null}
          {(spec.data === 'fields' ? (spec.fields ?? []) : []).map((f) => (
            <FieldInput key={`${type}.${f.name}`} field={f} value={values[f.name] ?? ''} error={errors[f.name]} onInput={(v) => set(f.name, v)} />
          ))}
        </fieldset>
        <div class="actions">
          <button type="button" onClick={() => submit(true)}>
            Check (dry run)
          </button>
          <button type="submit" class="primary">
            Create
          </button>
          <button type="button" onClick={() => props.asYaml(body())}>
            Edit as YAML
          </button>
          {checked ? <span role="status">The server accepts this secret.</span> : null}
        </div>
        <ErrorBox error={error} />
      </form>
    </section>
  );
}

const invalid = (id: string, error: string | undefined) => (error ? { 'aria-invalid': 'true' as const, 'aria-describedby': `${id}-error` } : {});

function Labelled(props: { id: string; label: string; required?: boolean; error?: string; hint?: string; children: ComponentChildren }) {
  return (
    <div class="field">
      <label for={props.id}>
        {props.label}
        {props.required ? <span class="muted"> (required)</span> : null}
        {props.hint ? <span class="muted"> · {props.hint}</span> : null}
      </label>
      {props.children}
      {props.error ? (
        <span class="field-error" id={`${props.id}-error`} data-testid="field-error">
          {props.error}
        </span>
      ) : null}
    </div>
  );
}

function FieldInput(props: { field: Field; value: string; error?: string; onInput: (value: string) => void }) {
  const { field } = props;
  const id = `secret-data-${field.name}`;
  const common = { id, value: props.value, ...(field.required ? { 'aria-required': 'true' as const } : {}), ...invalid(id, props.error) };
  const onInput = (e: Event) => props.onInput((e.target as HTMLInputElement).value);
  let control;
  if (field.input === 'choice')
    control = (
      <select {...common} onChange={onInput}>
        <option value="">(default)</option>
        {(field.choices ?? []).map((c) => (
          <option key={c} value={c}>
            {c}
          </option>
        ))}
      </select>
    );
  else if (field.input === 'text' || field.input === 'lines') control = <textarea {...common} rows={field.input === 'lines' ? 3 : 5} spellcheck={false} onInput={onInput} />;
  else if (field.input === 'secret') control = <input {...common} type="password" autocomplete="off" onInput={onInput} />;
  else control = <input {...common} type="text" autocomplete="off" spellcheck={false} onInput={onInput} />;
  return (
    <Labelled id={id} label={field.label} required={field.required} error={props.error} hint={field.hint}>
      {control}
    </Labelled>
  );
}

function Pairs(props: { pairs: Array<[string, string]>; error?: string; onChange: (pairs: Array<[string, string]>) => void }) {
  const update = (i: number, at: 0 | 1, value: string) => props.onChange(props.pairs.map((p, j) => (j === i ? ((at === 0 ? [value, p[1]] : [p[0], value]) as [string, string]) : p)));
  return (
    <div>
      {props.pairs.map(([k, v], i) => (
        <div class="inline" key={i}>
          <label>
            Key {i + 1} <input value={k} onInput={(e) => update(i, 0, (e.target as HTMLInputElement).value)} />
          </label>
          <label>
            Value {i + 1} <input value={v} type="password" autocomplete="off" onInput={(e) => update(i, 1, (e.target as HTMLInputElement).value)} />
          </label>
          <button type="button" class="small" onClick={() => props.onChange(props.pairs.filter((_, j) => j !== i))}>
            Remove entry {i + 1}
          </button>
        </div>
      ))}
      <button type="button" class="small" onClick={() => props.onChange([...props.pairs, ['', '']])}>
        Add entry
      </button>
      {props.error ? <span class="field-error">{props.error}</span> : null}
    </div>
  );
}
