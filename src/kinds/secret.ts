import { ApiError } from '../errors.js';
import { defineKind, standardPermissions } from './define.js';
import { immutable, oneOf, type JsonSchema } from './schema.js';

// Secret types and data shapes from the public types (types-ts secret.ts). `data` is an object
// or a string depending on the type; its shape per type is checked in `check`, where the type
// is known. Plain reads hide `data`; GET …/-reveal shows it.

export const SECRET_TYPES = [
  'opaque', 'tls', 'gcp', 'aws', 'docker', 'userpass', 'keypair', 'azure-sdk', 'azure-connector', 'ecr', 'dictionary', 'nats-account',
] as const;
type SecretType = (typeof SECRET_TYPES)[number];

interface Shape {
  /** Field name -> allowed values (undefined: any string). */
  fields: Record<string, readonly string[] | undefined>;
  required: string[];
  /** Arrays of strings instead of a single string. */
  lists?: string[];
}

const ENCODING = ['plain', 'base64'] as const;

const SHAPES: Partial<Record<SecretType, Shape>> = {
  opaque: { fields: { payload: undefined, encoding: ENCODING }, required: [] },
  tls: { fields: { key: undefined, cert: undefined, chain: undefined }, required: ['cert'] },
  aws: { fields: { accessKey: undefined, secretKey: undefined, roleArn: undefined, externalId: undefined }, required: ['accessKey', 'secretKey'] },
  ecr: {
    fields: { accessKey: undefined, secretKey: undefined, roleArn: undefined, externalId: undefined, repos: undefined },
    required: ['accessKey', 'secretKey'],
    lists: ['repos'],
  },
  userpass: { fields: { username: undefined, password: undefined, encoding: ENCODING }, required: ['username', 'password'] },
  keypair: { fields: { secretKey: undefined, publicKey: undefined, passphrase: undefined }, required: ['secretKey'] },
  'azure-connector': { fields: { url: undefined, code: undefined }, required: ['url', 'code'] },
  'nats-account': { fields: { accountId: undefined, privateKey: undefined }, required: ['accountId', 'privateKey'] },
};

/** Types whose data is a JSON document carried as a string (an object is tolerated as well). */
const DOCUMENT_TYPES: readonly SecretType[] = ['gcp', 'docker', 'azure-sdk'];

const MAX_DATA = 1024 * 1024;

function bad(path: string, message: string): ApiError {
  return ApiError.badRequest(`invalid secret: ${path} ${message}`, [{ path, message }]);
}

function checkData(type: SecretType, data: unknown): void {
  if (data === undefined) return;
  if (DOCUMENT_TYPES.includes(type)) {
    if (typeof data !== 'string' && (typeof data !== 'object' || data === null || Array.isArray(data))) {
      throw bad('data', `must be a string (or a JSON object) for type ${type}`);
    }
    return;
  }
  if (typeof data !== 'object' || data === null || Array.isArray(data)) throw bad('data', `must be an object for type ${type}`);
  const record = data as Record<string, unknown>;
  if (type === 'dictionary') {
    for (const [key, value] of Object.entries(record)) {
      if (typeof value !== 'string') throw bad(`data.${key}`, 'must be a string');
    }
    return;
  }
  const shape = SHAPES[type]!;
  for (const [key, value] of Object.entries(record)) {
    if (!Object.hasOwn(shape.fields, key)) throw bad(`data.${key}`, 'is not a known field'); // own keys only: `constructor` is in every object
    if (shape.lists?.includes(key)) {
      if (!Array.isArray(value) || value.some((v) => typeof v !== 'string')) throw bad(`data.${key}`, 'must be an array of strings');
      continue;
    }
    if (typeof value !== 'string') throw bad(`data.${key}`, 'must be a string');
    const allowed = shape.fields[key];
    if (allowed && !allowed.includes(value)) throw bad(`data.${key}`, `must be one of: ${allowed.join(', ')}`);
  }
  for (const key of shape.required) {
    if (record[key] === undefined) throw bad(`data.${key}`, 'is required');
  }
}

const dataSchema: JsonSchema = { type: ['object', 'string'], maxLength: MAX_DATA, description: 'shape depends on type' };

export default defineKind({
  kind: 'secret',
  scope: 'org',
  summary: 'A named secret value (opaque payload, TLS material, cloud or registry credentials, key pair, dictionary …).',
  fields: {
    type: immutable(oneOf(SECRET_TYPES)),
    data: dataSchema,
  },
  required: ['type'],
  permissions: standardPermissions('secrets', [
    { name: 'reveal', description: 'Read the secret value' },
    { name: 'use', description: 'Refer to the secret from other resources, such as workloads and identities' },
  ]),
  implied: { reveal: ['view'], use: ['view'] },
  check(item) {
    checkData(item.type as SecretType, item.data);
    if (JSON.stringify(item.data ?? null).length > MAX_DATA) throw bad('data', 'is larger than 1 MiB');
  },
  hidden: ['data'],
});
