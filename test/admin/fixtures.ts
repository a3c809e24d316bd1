// A seed as a pipeline keeps one: a directory of `cpln apply -f` documents, several per file, in
// no particular order, links relative and absolute.
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const SEED_APP_YAML = `# the app: a workload before the gvc it lives in (apply puts them in order)
kind: workload
name: web
gvc: demo
spec:
  type: standard
  identityLink: //identity/app
  containers:
    - name: nginx
      image: nginx:latest
      ports:
        - protocol: http
          number: 8080
---
kind: identity
name: app
gvc: demo
---
kind: gvc
name: demo
spec:
  staticPlacement:
    locationLinks:
      - //location/aws-us-west-2
`;

export const SEED_BASE_JSON = (org: string) =>
  JSON.stringify(
    [
      { kind: 'serviceaccount', name: 'ci', description: 'the pipeline' },
      { kind: 'secret', name: 'creds', type: 'opaque', data: { payload: 's3cret', encoding: 'plain' } },
      {
        kind: 'policy',
        name: 'ci-reads-creds',
        targetKind: 'secret',
        targetLinks: [`/org/${org}/secret/creds`],
        bindings: [{ permissions: ['reveal'], principalLinks: ['//serviceaccount/ci'] }],
      },
    ],
    null,
    2,
  );

/** The names the seed creates, by kind. */
export const SEEDED = { gvc: ['demo'], workload: ['web'], identity: ['app'], secret: ['creds'], serviceaccount: ['ci'], policy: ['ci-reads-creds'] };

/** Writes the seed directory (two files) and returns its path. */
export function seedDir(org = 'acme'): string {
  const dir = mkdtempSync(join(tmpdir(), 'keel-seed-'));
  mkdirSync(join(dir, 'nested'));
  writeFileSync(join(dir, 'app.yaml'), SEED_APP_YAML);
  writeFileSync(join(dir, 'nested', 'base.json'), SEED_BASE_JSON(org));
  writeFileSync(join(dir, 'README.txt'), 'not a seed file: skipped');
  return dir;
}
