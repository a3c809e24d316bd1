import { defineKind } from './define.js';
import { anyObject, arr, bool, int, obj, readOnly, str } from './schema.js';

// DeploymentStatus of the public types. Deployments live under their workload
// (…/workload/{w}/deployment/{location}) and are written only by Keel's workload reconciler.
const version = obj(
  { name: str(), created: str(), workload: int(), gvc: int(), containers: anyObject(), ready: bool(), message: str() },
  { additionalProperties: true },
);
export default defineKind({
  kind: 'deployment',
  scope: 'org',
  summary: 'The state of a workload in one location (named after the location); computed by the server.',
  fields: {
    spec: anyObject(),
    status: readOnly(
      obj(
        {
          endpoint: str(),
          remote: str(),
          lastProcessedVersion: int(),
          expectedDeploymentVersion: int(),
          internal: anyObject(),
          ready: bool(),
          deploying: bool(),
          versions: arr(version),
          jobExecutions: arr(anyObject()),
          message: str(),
        },
        { additionalProperties: true },
      ),
    ),
  },
  permissions: [
    { name: 'manage', description: 'Full access' },
    { name: 'view', description: 'Read-only access' },
  ],
  operations: { create: false, update: false, delete: false },
  writtenByService: true,
});
