import { defineKind } from './define.js';
import { linksAt, TRACING_SECRET_LINKS, type LinkField } from './references.js';
import { anyObject, arr, bool, int, link, map, obj, oneOf, readOnly, str, tracingSchema, type JsonSchema } from './schema.js';

// Org spec from the public types (types-ts org.ts, orgLogging.ts) and the Terraform provider's
// org structs: each external logging provider with its required fields and allowed values.

const CLOUDWATCH_REGIONS = [
  'af-south-1', 'ap-northeast-1', 'ap-northeast-2', 'ap-south-1', 'ap-southeast-1', 'ap-southeast-2', 'eu-central-1', 'eu-north-1', 'eu-south-1',
  'eu-west-1', 'eu-west-2', 'eu-west-3', 'me-south-1', 'sa-east-1', 'us-east-1', 'us-east-2', 'us-west-1', 'us-west-2',
] as const;

const STACKDRIVER_LOCATIONS = [
  'us-east1', 'us-east4', 'us-central1', 'us-west1', 'europe-west4', 'europe-west1', 'europe-west3', 'europe-west2', 'asia-east1',
  'asia-southeast1', 'asia-northeast1', 'asia-south1', 'australia-southeast1', 'southamerica-east1', 'africa-south1', 'asia-east2',
  'asia-northeast2', 'asia-northeast3', 'asia-south2', 'asia-southeast2', 'australia-southeast2', 'europe-central2', 'europe-north1',
  'europe-southwest1', 'europe-west10', 'europe-west12', 'europe-west6', 'europe-west8', 'europe-west9', 'me-central1', 'me-central2',
  'me-west1', 'northamerica-northeast1', 'northamerica-northeast2', 'southamerica-west1', 'us-east5', 'us-south1', 'us-west2', 'us-west3',
  'us-west4',
] as const;

const text = (max = 1024) => str({ maxLength: max });
const host = () => str({ minLength: 1, maxLength: 253 });
const port = () => int({ minimum: 1, maximum: 65535 });
const headers = () => map(str({ maxLength: 4096 }), { maxProperties: 50 });
const elastic = (fields: Record<string, JsonSchema>, required: string[]) => obj({ credentials: link(), index: text(), type: text(), ...fields }, { required: ['credentials', 'index', 'type', ...required] });

const loggingProviders = () =>
  obj({
    s3: obj({ bucket: text(), region: text(64), prefix: text(), credentials: link() }, { required: ['bucket', 'region', 'credentials'] }),
    coralogix: obj(
      { cluster: oneOf(['coralogix.com', 'coralogix.us', 'app.coralogix.in', 'app.eu2.coralogix.com', 'app.coralogixsg.com']), credentials: link(), app: text(), subsystem: text() },
      { required: ['cluster', 'credentials'] },
    ),
    datadog: obj(
      {
        host: oneOf(['http-intake.logs.datadoghq.com', 'http-intake.logs.us3.datadoghq.com', 'http-intake.logs.us5.datadoghq.com', 'http-intake.logs.datadoghq.eu']),
        credentials: link(),
      },
      { required: ['host', 'credentials'] },
    ),
    logzio: obj({ listenerHost: oneOf(['listener.logz.io', 'listener-nl.logz.io']), credentials: link() }, { required: ['listenerHost', 'credentials'] }),
    elastic: obj({
      aws: elastic({ host: host(), port: port(), region: text(64) }, ['host', 'port', 'region']),
      elasticCloud: elastic({ cloudId: text() }, ['cloudId']),
      generic: elastic({ host: host(), port: port(), path: text(), username: text(), password: text() }, ['host']),
    }),
    cloudWatch: obj(
      { region: oneOf(CLOUDWATCH_REGIONS), credentials: link(), retentionDays: int({ minimum: 1 }), groupName: text(), streamName: text(), extractFields: map(text()) },
      { required: ['region', 'credentials', 'groupName', 'streamName'] },
    ),
    fluentd: obj({ host: host(), port: port() }, { required: ['host'] }),
    stackdriver: obj({ credentials: link(), location: oneOf(STACKDRIVER_LOCATIONS) }, { required: ['credentials', 'location'] }),
    syslog: obj(
      { host: host(), port: port(), mode: oneOf(['tcp', 'udp', 'tls']), format: oneOf(['rfc3164', 'rfc5424']), severity: int({ minimum: 0, maximum: 7 }) },
      { required: ['host', 'port', 'mode', 'format', 'severity'] },
    ),
    opentelemetry: obj({ endpoint: text(), headers: headers(), credentials: link() }, { required: ['endpoint'] }),
    loki: obj({ endpoint: text(), credentials: link(), tenantId: text(256) }, { required: ['endpoint'] }),
  });

/** Where a logging provider names the secret it ships logs with, under spec.logging and each spec.extraLogging[]. */
const LOGGING_SECRET_LINKS: LinkField[] = ['spec.logging', 'spec.extraLogging[]'].flatMap((at) =>
  ['s3', 'coralogix', 'datadog', 'logzio', 'elastic.aws', 'elastic.elasticCloud', 'elastic.generic', 'cloudWatch', 'stackdriver', 'opentelemetry', 'loki'].map((provider) => ({
    at: `${at}.${provider}.credentials`,
    kind: 'secret',
    permission: 'use',
  })),
);

export default defineKind({
  kind: 'org',
  scope: 'org',
  summary: 'An organization: the top-level tenant that owns every other resource and its access policies.',
  fields: {
    spec: obj({
      logging: loggingProviders(),
      // Terraform's cpln_org_logging sets it with $replace/extraLogging.
      extraLogging: arr(loggingProviders(), { maxItems: 3, 'x-replaceable': true }),
      tracing: tracingSchema(),
      sessionTimeoutSeconds: int({ minimum: 0 }),
      authConfig: obj({ domainAutoMembers: arr(str({ maxLength: 253 }), { maxItems: 100 }), samlOnly: bool() }),
      observability: obj({
        logsRetentionDays: int({ minimum: 0 }),
        metricsRetentionDays: int({ minimum: 0 }),
        tracesRetentionDays: int({ minimum: 0 }),
        defaultAlertEmails: arr(str({ maxLength: 254, format: 'email' }), { maxItems: 100 }),
      }),
      security: obj({
        threatDetection: obj(
          {
            enabled: bool(),
            minimumSeverity: oneOf(['warning', 'error', 'critical']),
            syslog: obj(
              { transport: oneOf(['tcp', 'udp']), host: str({ maxLength: 253 }), port: int({ minimum: 1, maximum: 65535 }) },
              { required: ['host', 'port'] },
            ),
          },
          { required: ['enabled'] },
        ),
      }),
    }),
    status: readOnly(anyObject()),
  },
  permissions: [
    { name: 'edit', description: 'Modify the org' },
    { name: 'exec', description: 'Run commands in the org' },
    { name: 'exec.echo', description: 'Run the echo test command' },
    { name: 'grafanaAdmin', description: 'Administer the metrics dashboards of the org' },
    { name: 'manage', description: 'Full access' },
    { name: 'readLogs', description: 'Read the logs of the workloads in the org' },
    { name: 'readMetrics', description: 'Read the metrics of the org' },
    { name: 'readUsage', description: 'Read the usage and billing data of the org' },
    { name: 'view', description: 'Read-only access' },
    { name: 'viewAccessReport', description: 'Read access reports of the org' },
  ],
  implied: { readLogs: ['view'], exec: ['exec.echo'] },
  references: (item) => linksAt(item, [...LOGGING_SECRET_LINKS, ...TRACING_SECRET_LINKS]),
  operations: { delete: false },
  // OrgStatus: an org is active from its creation; its endpoints are named after it. Its
  // accountLink (the billing account that owns every org of a Keel) is stored at creation.
  derivedStatus: (item) => ({ active: true, endpointPrefix: item.name }),
});
