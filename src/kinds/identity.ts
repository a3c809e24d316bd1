import { defineKind, standardPermissions } from './define.js';
import { linksAt } from './references.js';
import { anyObject, arr, int, keyed, link, num, obj, oneOf, readOnly, str } from './schema.js';

// Seed 2.6 (create body), closed at every level. Field names follow the public types.

const strings = (max = 200) => arr(str({ maxLength: 1024 }), { maxItems: max });
const ports = () => arr(int({ minimum: 0, maximum: 65535 }), { maxItems: 100 });
const allowDeny = () => obj({ allow: strings(), deny: strings() });

export default defineKind({
  kind: 'identity',
  scope: 'gvc',
  summary: 'A workload identity: the cloud access, private-network access and service access granted to the workloads that use it.',
  fields: {
    aws: obj(
      {
        cloudAccountLink: link(),
        policyRefs: strings(),
        trustPolicy: obj({ Version: str({ maxLength: 64 }), Statement: arr(anyObject(), { maxItems: 100 }) }),
        roleName: str({ maxLength: 256 }),
      },
      { required: ['cloudAccountLink'] },
    ),
    gcp: obj(
      {
        cloudAccountLink: link(),
        scopes: strings(),
        serviceAccount: str({ maxLength: 256 }),
        bindings: arr(obj({ resource: str({ maxLength: 1024 }), roles: strings() }), { maxItems: 200 }),
      },
      { required: ['cloudAccountLink'] },
    ),
    azure: obj(
      {
        cloudAccountLink: link(),
        roleAssignments: arr(obj({ scope: str({ maxLength: 1024 }), roles: strings() }), { maxItems: 200 }),
      },
      { required: ['cloudAccountLink'] },
    ),
    ngs: obj(
      {
        cloudAccountLink: link(),
        pub: allowDeny(),
        sub: allowDeny(),
        resp: obj({ max: num(), ttl: str({ maxLength: 64 }) }),
        subs: num(),
        data: num(),
        payload: num(),
      },
      { required: ['cloudAccountLink'] },
    ),
    networkResources: keyed(
      obj(
        {
          name: str({ minLength: 1, maxLength: 64 }),
          agentLink: link(),
          IPs: arr(str({ maxLength: 64 }), { maxItems: 5 }),
          FQDN: str({ maxLength: 253 }),
          resolverIP: str({ maxLength: 64 }),
          ports: ports(),
        },
        { required: ['name'] },
      ),
    ),
    nativeNetworkResources: keyed(
      obj(
        {
          name: str({ minLength: 1, maxLength: 64 }),
          FQDN: str({ maxLength: 253 }),
          ports: ports(),
          awsPrivateLink: obj({ endpointServiceName: str({ maxLength: 512 }) }, { required: ['endpointServiceName'] }),
          gcpServiceConnect: obj({ targetService: str({ maxLength: 512 }) }, { required: ['targetService'] }),
        },
        { required: ['name'] },
      ),
    ),
    memcacheAccess: arr(obj({ clusterLink: link(), role: oneOf(['readWrite']) }, { required: ['clusterLink'] }), { maxItems: 50 }),
    spicedbAccess: arr(
      obj({ clusterLink: link(), role: oneOf(['checkPermission', 'read', 'write']) }, { required: ['clusterLink'] }),
      { maxItems: 50 },
    ),
    status: readOnly(anyObject()),
  },
  permissions: standardPermissions('identities', [
    { name: 'use', description: 'Refer to the identity from other resources, such as workloads' },
  ]),
  implied: { use: ['view'] },
  // The cloud accounts and agents whose access the identity hands to its workloads.
  references: (item) =>
    linksAt(item, [
      ...['aws', 'gcp', 'azure', 'ngs'].map((cloud) => ({ at: `${cloud}.cloudAccountLink`, kind: 'cloudaccount', permission: 'use' })),
      { at: 'networkResources[].agentLink', kind: 'agent', permission: 'use' },
    ]),
  // Status of the public types: the name of the object the identity is in the clouds, and for
  // each cloud it is given access to, whether that access can be used. Keel reaches no cloud, so
  // access is usable as soon as it is declared (as a simulated deployment is ready).
  derivedStatus(item) {
    const gvc = item.links.find((l) => l.rel === 'gvc')?.href.split('/').pop() ?? '';
    const org = item.links.find((l) => l.rel === 'org')?.href.split('/').pop() ?? '';
    const status: Record<string, unknown> = { objectName: `${org}-${gvc}-${item.name}` };
    for (const cloud of ['aws', 'gcp', 'azure']) if (item[cloud] !== undefined) status[cloud] = { usable: true };
    return status;
  },
});
