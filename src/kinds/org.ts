import { defineKind } from './define.js';
import { anyObject, arr, bool, int, obj, oneOf, readOnly, str } from './schema.js';

// Org spec from the public types (types-ts org.ts). Logging providers and tracing are stored as
// sent; the provider names themselves are checked.

const loggingProviders = () =>
  obj({
    s3: anyObject(),
    coralogix: anyObject(),
    datadog: anyObject(),
    logzio: anyObject(),
    elastic: anyObject(),
    cloudWatch: anyObject(),
    fluentd: anyObject(),
    stackdriver: anyObject(),
    syslog: anyObject(),
    opentelemetry: anyObject(),
  });

export default defineKind({
  kind: 'org',
  scope: 'org',
  summary: 'An organization: the top-level tenant that owns every other resource and its access policies.',
  fields: {
    spec: obj({
      logging: loggingProviders(),
      // Terraform's cpln_org_logging sets it with $replace/extraLogging.
      extraLogging: arr(loggingProviders(), { maxItems: 3, 'x-replaceable': true }),
      tracing: anyObject(),
      sessionTimeoutSeconds: int({ minimum: 0 }),
      authConfig: obj({ domainAutoMembers: arr(str({ maxLength: 253 }), { maxItems: 100 }), samlOnly: bool() }),
      observability: obj({
        logsRetentionDays: int({ minimum: 0 }),
        metricsRetentionDays: int({ minimum: 0 }),
        tracesRetentionDays: int({ minimum: 0 }),
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
  operations: { delete: false },
  // OrgStatus: an org is active from its creation; its endpoints are named after it. Its
  // accountLink (the billing account that owns every org of a Keel) is stored at creation.
  derivedStatus: (item) => ({ active: true, endpointPrefix: item.name }),
});
