#!/usr/bin/env node
import { changeEvent, KEEL_ACTOR } from './audit/events.js';
import { verifyChain } from './audit/verify.js';
import { findKind } from './kinds/index.js';
import { present } from './resources/present.js';
import { mintKey } from './auth/keys.js';
import { configFromEnv } from './config.js';
import { createOrg } from './resources/orgs.js';
import { serve } from './serve.js';
import { openStore } from './store/open.js';

const USAGE = `Usage: keel <command>

Commands:
  serve                         run the Core API (KEEL_PORT) and the Audit API (KEEL_AUDIT_PORT)
  org create NAME               create an org with its built-ins; prints a superuser key for it
  key create --org ORG          mint a new superuser key for ORG (service account 'admin')
  migrate                       bring the database schema up to date and exit
  audit verify --org ORG        check ORG's audit hash chain; names the first broken link

Configuration comes from the environment: KEEL_HOST, KEEL_PORT, KEEL_AUDIT_PORT, KEEL_DATA_DIR,
KEEL_DATABASE_URL (postgres://... selects PostgreSQL), KEEL_ORG, KEEL_LOG_LEVEL.`;

function flag(args: string[], name: string): string | undefined {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
}

async function main(argv: string[]): Promise<number> {
  const [command, sub, ...rest] = argv;
  if (!command || command === '--help' || command === '-h' || command === 'help') {
    console.log(USAGE);
    return command ? 0 : 2;
  }
  const config = configFromEnv();
  switch (command) {
    case 'serve':
      await serve(config);
      return -1; // keeps running
    case 'migrate': {
      const store = await openStore(config);
      await store.close();
      console.log('database schema is up to date');
      return 0;
    }
    case 'org': {
      const name = rest[0];
      if (sub !== 'create' || !name) break;
      if (!/^[a-z]([-a-z0-9])*[a-z0-9]$/.test(name) || name.length > 64) {
        console.error(`'${name}' is not a valid org name (lowercase letters, digits and '-', 2 to 64 characters)`);
        return 2;
      }
      const store = await openStore(config);
      try {
        const { token } = await createOrg(store, { name, actor: KEEL_ACTOR, superusers: [], adminServiceAccount: 'admin' });
        console.log(token);
      } finally {
        await store.close();
      }
      return 0;
    }
    case 'key': {
      const org = flag([sub, ...rest], '--org');
      if (sub !== 'create' || !org) break;
      const store = await openStore(config);
      try {
        const key = await addAdminKey(store, org);
        console.log(key);
      } finally {
        await store.close();
      }
      return 0;
    }
    case 'audit': {
      const org = flag([sub, ...rest], '--org');
      if (sub !== 'verify' || !org) break;
      const store = await openStore(config);
      try {
        const report = await verifyChain(store, org);
        if (report.ok) {
          console.log(`audit chain of org '${org}' is intact: ${report.events} events (${report.from}..${report.to})`);
          return 0;
        }
        console.error(`audit chain of org '${org}' is BROKEN at event ${report.brokenAt}: ${report.reason}`);
        return 1;
      } finally {
        await store.close();
      }
    }
  }
  console.error(USAGE);
  return 2;
}

/** A new key for the org's 'admin' service account (a superuser from the org's creation). */
async function addAdminKey(store: Awaited<ReturnType<typeof openStore>>, org: string): Promise<string> {
  const created = new Date().toISOString();
  const key = mintKey(org, 'admin');
  await store.transaction(async (tx) => {
    const sa = await tx.get({ org, kind: 'serviceaccount', gvc: '', name: 'admin' }, 'update');
    if (!sa) throw new Error(`org '${org}' has no service account 'admin'; create the org with 'keel org create ${org}'`);
    const keys = [...((sa.data.keys as unknown[]) ?? []), { name: key.keyName, description: 'created by keel key create', created }];
    const updated = { ...sa, version: sa.version + 1, lastModified: created, data: { ...sa.data, keys } };
    await tx.update(updated, sa.version);
    await tx.putKey({ keyName: key.keyName, org, serviceAccount: 'admin', secretHash: key.secretHash, created });
    await tx.appendAudit(changeEvent(org, KEEL_ACTOR, 'addKey', present(findKind('serviceaccount')!, updated)));
  });
  return key.token;
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exit(code);
  },
  (err) => {
    console.error(`keel: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  },
);
