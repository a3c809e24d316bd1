#!/usr/bin/env node
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { KEEL_ACTOR } from './audit/events.js';
import { addAdminKey } from './admin/keys.js';
import { resetStore } from './admin/reset.js';
import { restoreSnapshot } from './admin/restore.js';
import { applySeed, readSeed, SeedError } from './admin/seed.js';
import { checkSnapshotName } from './store/snapshots.js';
import { verifyChain } from './audit/verify.js';
import { SYSTEM_PRINCIPAL, SystemAuthorizer } from './auth/system.js';
import { mintKey } from './auth/keys.js';
import { loadConfig, optionsHelp, printableConfig, storeNamed, type Config } from './config.js';
import { findKind } from './kinds/index.js';
import { accountLinkOf, createOrg } from './resources/orgs.js';
import { Resources } from './resources/service.js';
import { documentsText, exportOrg } from './resources/transfer.js';
import { checkProfileName, defaultProfileName, readProfile, removeProfile, writeProfile } from './cpln-profile.js';
import { deviceLogin } from './login.js';
import { Directory } from './auth/directory.js';
import { invitationLink } from './server/sign-in.js';
import { keepPrivate } from './data-dir.js';
import { describeStore, openStore, storeLocation } from './store/open.js';
import type { Store } from './store/types.js';

interface Command {
  usage: string;
  summary: string;
  /** Flags of the command itself; every other --flag is a setting (see `keel serve --help`). */
  flags?: string[];
  /** Boolean flags (no value). */
  switches?: string[];
  run(args: { positional: string[]; flags: Map<string, string>; config: () => Config }): Promise<number>;
}

const COMMANDS: Record<string, Command> = {
  serve: {
    usage: 'keel serve [settings] [--print-config]',
    summary: 'run the Core API and the Audit API',
    switches: ['--print-config'],
    async run({ flags, config }) {
      if (flags.has('--print-config')) {
        console.log(JSON.stringify(printableConfig(config()), null, 2));
        return 0;
      }
      const cfg = config();
      console.error(`keel: store ${describeStore(storeLocation(cfg))}`);
      // The server, and all it loads, only for the command that serves: the others start faster.
      const { serve } = await import('./serve.js');
      await serve(cfg);
      return -1; // keeps running until a signal
    },
  },
  mcp: {
    usage: 'keel mcp [--endpoint URL] [--token KEY] [--profile NAME] [--org ORG] [--toolsets core,keel]',
    summary: "serve MCP over stdio for a local agent, calling Keel's API as the token (--token, KEEL_TOKEN, or the cpln profile's; see docs/agents.md)",
    flags: ['--endpoint', '--token', '--profile', '--org', '--toolsets'],
    async run({ flags }) {
      // The MCP SDK is loaded only for this command.
      const { toolsetsIn } = await import('./mcp/tools.js');
      const { serveStdio } = await import('./mcp/stdio.js');
      const toolsets = flags.has('--toolsets') ? toolsetsIn(flags.get('--toolsets')!) : undefined;
      await serveStdio({ endpoint: flags.get('--endpoint'), token: flags.get('--token'), profile: flags.get('--profile'), org: flags.get('--org'), toolsets });
      return 0;
    },
  },
  status: {
    usage: 'keel status [--show-key]',
    summary: 'say where Keel serves (and whether it answers), its store, runtime and org, and the cpln profile line (the key only with --show-key)',
    switches: ['--show-key'],
    async run({ flags, config }) {
      const cfg = config();
      // Listening on every address, Keel is reached at the loopback address from this host.
      const host = cfg.host === '0.0.0.0' || cfg.host === '::' ? '127.0.0.1' : cfg.host;
      const endpoint = `http://${host}:${cfg.port}`;
      const location = storeLocation(cfg);
      const tokenFile = join(cfg.dataDir, 'admin.token');
      const runtime = !cfg.reconcile ? 'off (KEEL_RECONCILE=off)' : cfg.runtime === 'runc' ? `runc, workload endpoints on http://${host}:${cfg.ingressPort}${cfg.ingressProxy === 'haproxy' ? ' (HAProxy in front)' : ''}` : 'simulated (no replica runs)';
      const lines = [
        `Core API   ${endpoint} (${await answering(endpoint)})`,
        `Audit API  http://${host}:${cfg.auditPort}`,
        `Console    ${endpoint}/console/`,
        `Store      ${describeStore(location)}${location.dialect === 'sqlite' && !existsSync(location.file) ? ' (does not exist yet)' : ''}`,
        `Runtime    ${runtime}`,
        `Org        ${cfg.org}`,
        '',
        'Point the cpln CLI at it with:',
        '',
      ];
      if (flags.has('--show-key')) {
        const key = cfg.adminKey ?? (existsSync(tokenFile) ? readFileSync(tokenFile, 'utf8').trim() : undefined);
        if (!key) throw new Error(`no key to show: ${tokenFile} does not exist and KEEL_ADMIN_KEY is not set`);
        lines.push(`  cpln profile update keel --endpoint ${endpoint} --token ${key} --org ${cfg.org} --default`);
      } else {
        lines.push(`  cpln profile update keel --endpoint ${endpoint} --token <KEY> --org ${cfg.org} --default`, '', `<KEY>: a key of org '${cfg.org}' (${cfg.adminKey ? 'KEEL_ADMIN_KEY' : tokenFile}; keel status --show-key puts it in the line)`);
      }
      console.log(lines.join('\n'));
      return 0;
    },
  },
  'org create': {
    usage: 'keel org create NAME',
    summary: 'create an org with its built-ins and print a superuser key of it',
    async run({ positional, config }) {
      const name = required(positional[0], 'the org name');
      const cfg = config();
      const valid = /^[a-z]([-a-z0-9])*[a-z0-9]$/.test(name) && name.length <= 64;
      if (!valid) throw new UsageError(`'${name}' is not a valid org name (lowercase letters, digits and '-', 2 to 64 characters)`);
      return withStore(cfg, async (store) => {
        const { token } = await createOrg(store, { name, actor: KEEL_ACTOR, superusers: [], accountLink: accountLinkOf(cfg.org), adminServiceAccount: 'admin' });
        console.log(token);
        console.error(`keel: created org '${name}'; above is a superuser key of it (service account 'admin'), shown once`);
        return 0;
      });
    },
  },
  'org list': {
    usage: 'keel org list',
    summary: 'list the orgs in the store',
    run: ({ config }) =>
      withStore(config(), async (store) => {
        for (const org of await store.orgs()) console.log(org);
        return 0;
      }),
  },
  'key create': {
    usage: 'keel key create --org ORG',
    summary: "mint a new superuser key (service account 'admin' of ORG) and print it",
    flags: ['--org'],
    run: ({ flags, config }) =>
      withStore(config(), async (store) => {
        const org = required(flags.get('--org'), '--org ORG');
        const key = mintKey(org, 'admin');
        await addAdminKey(store, org, key, 'created by keel key create');
        console.log(key.token);
        console.error(`keel: added a key to service account 'admin' of org '${org}'; above is the key, shown once`);
        return 0;
      }),
  },
  'key generate': {
    usage: 'keel key generate --org ORG',
    summary: "print a fresh key for ORG's 'admin' account, stored nowhere (for KEEL_ADMIN_KEY)",
    flags: ['--org'],
    async run({ flags }) {
      const org = required(flags.get('--org'), '--org ORG');
      if (!/^[a-z]([-a-z0-9])*[a-z0-9]$/.test(org) || org.length > 64) throw new UsageError(`'${org}' is not a valid org name`);
      console.log(mintKey(org, 'admin').token);
      console.error(`keel: a key for service account 'admin' of org '${org}', stored nowhere (no store used): give it to keel serve as KEEL_ADMIN_KEY`);
      return 0;
    },
  },
  reset: {
    usage: 'keel reset',
    summary: 'drop every org, item, key (but the bootstrap key) and audit event, then apply the seed again (KEEL_ALLOW_RESET=on)',
    run: async ({ config }) => {
      const cfg = config();
      if (!cfg.allowReset) throw new Error('reset is off: set KEEL_ALLOW_RESET=on (or --allow-reset on) to allow it');
      return withStore(cfg, async (store) => {
        const started = performance.now();
        const result = await resetStore(store, cfg);
        console.log(`reset: org '${result.org}' and ${result.seeded} seeded documents in ${Math.round(performance.now() - started)} ms`);
        if (result.token) console.log(`the bootstrap key was gone; a new one is in ${cfg.dataDir}/admin.token`);
        return 0;
      });
    },
  },
  'registry gc': {
    usage: 'keel registry gc [--grace-minutes N]',
    summary: 'remove registry content no image of any org refers to (stored more than N minutes ago, default 60)',
    flags: ['--grace-minutes'],
    run: ({ flags, config }) => {
      const grace = flags.get('--grace-minutes');
      if (grace !== undefined && !/^\d+$/.test(grace)) throw new UsageError(`--grace-minutes must be a whole number, got '${grace}'`);
      const cfg = config();
      return withStore(cfg, async (store) => {
        const { closeRegistry, openRegistry } = await import('./registry/storage.js');
        const { collectGarbage } = await import('./registry/gc.js');
        const registry = openRegistry(cfg);
        try {
          const { removed, kept } = await collectGarbage(store, registry, grace === undefined ? undefined : Number(grace) * 60_000);
          console.log(`registry gc: removed ${removed} unreferenced blobs, kept ${kept}`);
        } finally {
          await closeRegistry(registry);
        }
        return 0;
      });
    },
  },
  'snapshot save': {
    usage: 'keel snapshot save NAME',
    summary: 'take a consistent copy of the whole instance (while it serves)',
    run: ({ positional, config }) =>
      withStore(snapshotsAllowed(config()), async (store) => {
        const info = await store.snapshots.save(checkSnapshotName(required(positional[0], 'the snapshot name')));
        console.log(`saved snapshot '${info.name}' (${info.created})`);
        return 0;
      }),
  },
  'snapshot restore': {
    usage: 'keel snapshot restore NAME',
    summary: "rewind every org's items to a snapshot, atomically (audit chains and key revocations stay; each changed org gets a restore event)",
    run: ({ positional, config }) =>
      withStore(snapshotsAllowed(config()), async (store) => {
        const name = checkSnapshotName(required(positional[0], 'the snapshot name'));
        const restored = await restoreSnapshot(store, name, KEEL_ACTOR);
        console.log(`restored snapshot '${name}'${restored.length ? `: ${restored.map((r) => `${r.org} to ${r.earlierChain ? 'a state from before the last reset' : `position ${r.position}`}`).join(', ')}` : ' (no org had changed)'}`);
        return 0;
      }),
  },
  'snapshot list': {
    usage: 'keel snapshot list',
    summary: 'list the snapshots (name, time taken, size)',
    run: ({ config }) =>
      withStore(snapshotsAllowed(config()), async (store) => {
        for (const s of await store.snapshots.list()) console.log(`${s.name}\t${s.created}\t${s.size ?? ''}`);
        return 0;
      }),
  },
  'snapshot delete': {
    usage: 'keel snapshot delete NAME',
    summary: 'delete a snapshot',
    run: ({ positional, config }) =>
      withStore(snapshotsAllowed(config()), async (store) => {
        const name = checkSnapshotName(required(positional[0], 'the snapshot name'));
        await store.snapshots.delete(name);
        console.log(`deleted snapshot '${name}'`);
        return 0;
      }),
  },
  'key revoke': {
    usage: 'keel key revoke --org ORG KEYNAME',
    summary: 'revoke a service-account key by its name (the part before the first dot)',
    flags: ['--org'],
    run: ({ positional, flags, config }) =>
      withStore(config(), async (store, cfg) => {
        const org = required(flags.get('--org'), '--org ORG');
        const keyName = required(positional[0], 'the key name');
        const record = await store.findKey(keyName);
        if (!record || record.org !== org) throw new Error(`org '${org}' has no key '${keyName}'`);
        const resources = systemResources(store, cfg);
        await resources.patch({ ...SYSTEM_PRINCIPAL, org }, findKind('serviceaccount')!, { org }, record.serviceAccount, { '$drop/keys': [keyName] });
        console.log(`revoked key ${keyName} of service account '${record.serviceAccount}'`);
        return 0;
      }),
  },
  login: {
    usage: 'keel login [--endpoint URL] [--org ORG] [--profile NAME]',
    summary: 'sign in as a person (a URL and a code to confirm in a browser) and keep the token in a cpln profile',
    flags: ['--endpoint', '--org', '--profile'],
    async run({ flags, config }) {
      const name = checkProfileName(flags.get('--profile') ?? defaultProfileName() ?? 'default');
      const existing = readProfile(name);
      const endpoint = (flags.get('--endpoint') ?? existing?.request?.endpoint ?? listenUrl(config())).replace(/\/+$/, '');
      const signedIn = await deviceLogin(endpoint, flags.get('--org'), (line) => console.log(line));
      writeProfile(name, { endpoint, org: signedIn.org, token: signedIn.token });
      console.log(`Signed in as ${signedIn.email} to org '${signedIn.org}'; profile '${name}' holds the token (cpln --profile ${name} ...)`);
      return 0;
    },
  },
  logout: {
    usage: 'keel logout [--profile NAME]',
    summary: 'remove the cpln profile keel login wrote (its token with it)',
    flags: ['--profile'],
    async run({ flags }) {
      const name = checkProfileName(flags.get('--profile') ?? defaultProfileName() ?? 'default');
      if (!removeProfile(name)) throw new Error(`there is no profile '${name}'`);
      console.log(`removed profile '${name}'`);
      return 0;
    },
  },
  'user invite': {
    usage: 'keel user invite EMAIL --org ORG',
    summary: "invite a person to ORG (they become its user); prints only the one-time link, valid 7 days",
    flags: ['--org'],
    run: ({ positional, flags, config }) =>
      withStore(config(), async (store, cfg) => {
        const org = required(flags.get('--org'), '--org ORG');
        const email = required(positional[0], 'the email').trim().toLowerCase();
        const resources = systemResources(store, cfg);
        const user = findKind('user')!;
        const principal = { ...SYSTEM_PRINCIPAL, org };
        const existing = await resources.get(principal, user, { org }, email).catch(() => undefined);
        if (!existing) await resources.create(principal, user, { org }, { name: email, email });
        console.log(invitationLink(cfg.publicUrl ?? listenUrl(cfg), await new Directory(store).invite(email, org)));
        return 0;
      }),
  },
  migrate: {
    usage: 'keel migrate',
    summary: 'bring the database schema up to date and exit',
    run: ({ config }) =>
      withStore(config(), async () => {
        console.log('database schema is up to date');
        return 0;
      }),
  },
  'audit verify': {
    usage: 'keel audit verify --org ORG',
    summary: "check ORG's audit hash chain; names the first broken link",
    flags: ['--org'],
    run: ({ flags, config }) =>
      withStore(config(), async (store) => {
        const org = required(flags.get('--org'), '--org ORG');
        const report = await verifyChain(store, org);
        if (report.ok) {
          console.log(`audit chain of org '${org}' is intact: ${report.events} events (${report.from}..${report.to})`);
          for (const r of report.restores) console.log(`  event ${r.seq} (${r.at}): ${r.by} restored snapshot '${r.snapshot}', ${r.earlierChain ? 'taken before a reset began this chain anew: back to a state no event of this chain records' : `back to the state at event ${r.position}`}`);
          return 0;
        }
        console.error(`audit chain of org '${org}' is BROKEN at event ${report.brokenAt}: ${report.reason}`);
        return 1;
      }),
  },
  export: {
    usage: 'keel export --org ORG [--format yaml|json] [--out FILE]',
    summary: "write ORG's resources as documents that keel import and cpln apply -f load (secret values included)",
    flags: ['--org', '--format', '--out'],
    run: ({ flags, config }) =>
      withStore(config(), async (store) => {
        const org = required(flags.get('--org'), '--org ORG');
        if (!(await store.orgs()).includes(org)) throw new Error(`org '${org}' does not exist`);
        const format = flags.get('--format') ?? 'yaml';
        if (format !== 'yaml' && format !== 'json') throw new UsageError('--format must be yaml or json');
        const docs = await exportOrg(store, org);
        const text = documentsText(docs, format);
        const out = flags.get('--out');
        if (out) writeFileSync(out, text, { mode: 0o600 });
        else process.stdout.write(text);
        if (out) console.error(`exported ${docs.length} resources of org '${org}' to ${out}`);
        return 0;
      }),
  },
  import: {
    usage: 'keel import --org ORG FILE',
    summary: 'create or replace the resources in FILE (YAML documents, a JSON array or list) in ORG, all in one transaction',
    flags: ['--org'],
    run: ({ positional, flags, config }) =>
      withStore(config(), async (store) => {
        const org = required(flags.get('--org'), '--org ORG');
        const file = required(positional[0], 'FILE');
        if (!(await store.orgs()).includes(org)) throw new Error(`org '${org}' does not exist; create it with 'keel org create ${org}'`);
        try {
          for (const r of await applySeed(store, org, readSeed(file, 'keel import'))) console.log(`${r.outcome} ${r.kind} '${r.name}'${r.gvc ? ` (gvc ${r.gvc})` : ''}`);
          return 0;
        } catch (err) {
          if (!(err instanceof SeedError)) throw err;
          console.error(`nothing imported: ${err.message}`);
          return 1;
        }
      }),
  },
};

class UsageError extends Error {}

function required(value: string | undefined, what: string): string {
  if (!value) throw new UsageError(`missing ${what}`);
  return value;
}

/** The configuration, when it allows snapshots (a restore rewinds every org, so it is asked for). */
function snapshotsAllowed(config: Config): Config {
  if (!config.allowSnapshots) throw new Error('snapshots are off: set KEEL_ALLOW_SNAPSHOTS=on (or --allow-snapshots on) to allow them');
  return config;
}

/** Configurations whose store the user named (KEEL_DATA_DIR, KEEL_DATABASE_URL, a flag or the config file). */
const named = new WeakSet<Config>();

/**
 * Opens the store for an admin command, saying which on stderr. A store left to the default
 * (./data) must exist already: run from the wrong folder, a command would otherwise create an
 * empty store there and report on it, or write to it, as if it were the server's.
 */
async function withStore(config: Config, fn: (store: Store, config: Config) => Promise<number>): Promise<number> {
  const location = storeLocation(config);
  if (location.dialect === 'sqlite' && !named.has(config) && !existsSync(location.file)) {
    throw new Error(`no Keel store at ${location.file} (the default, ./data); name one with KEEL_DATA_DIR or KEEL_DATABASE_URL (or --data-dir, --database-url), or run this where 'keel serve' keeps its data`);
  }
  console.error(`keel: store ${describeStore(location)}`);
  const store = await openStore(config);
  try {
    return await fn(store, config);
  } finally {
    await store.close();
  }
}

/** Whether a Keel answers at `endpoint` (its /about), as a person reads it. */
async function answering(endpoint: string): Promise<string> {
  try {
    const res = await fetch(`${endpoint}/about`, { signal: AbortSignal.timeout(2000) });
    const about = (await res.json().catch(() => undefined)) as { name?: string; version?: string } | undefined;
    return res.ok && about?.name === 'keel' ? `answering: Keel ${about.version}` : `something else answers there (HTTP ${res.status} to /about)`;
  } catch {
    return 'not answering';
  }
}

/** Where Keel listens, as a URL reached from this host. */
function listenUrl(config: Config): string {
  const host = config.host === '0.0.0.0' || config.host === '::' ? '127.0.0.1' : config.host;
  return `http://${host.includes(':') ? `[${host}]` : host}:${config.port}`;
}

function systemResources(store: Store, config: Config): Resources {
  return new Resources(store, new SystemAuthorizer(store), undefined, { audit: true, accountLink: accountLinkOf(config.org) });
}


function usage(): string {
  const lines = Object.values(COMMANDS).map((c) => `  ${c.usage.padEnd(52)} ${c.summary}`);
  return `Usage: keel <command> [flags]\n\nCommands:\n${lines.join('\n')}\n\nEvery command takes the settings below as flags, environment variables or a config file\n(--config FILE or KEEL_CONFIG, JSON or YAML); flags win over the environment, which wins over the file.\n\n${optionsHelp()}\n`;
}

async function main(argv: string[]): Promise<number> {
  // Whatever any command writes (database, snapshots, registry content, keys) is Keel's alone.
  keepPrivate();
  const two = `${argv[0]} ${argv[1]}`;
  const name = COMMANDS[two] ? two : argv[0];
  const command = name && !name.startsWith('-') ? COMMANDS[name] : undefined;
  if (!command) {
    const wantsHelp = argv.length === 0 || argv.includes('--help') || argv.includes('-h') || argv[0] === 'help';
    (wantsHelp ? console.log : console.error)(usage());
    return wantsHelp && argv.length > 0 ? 0 : 2;
  }
  if (argv.includes('--help') || argv.includes('-h')) {
    console.log(`Usage: ${command.usage}\n\n${command.summary}\n\nSettings (flags, environment, config file):\n${optionsHelp()}`);
    return 0;
  }
  // Split the command's own flags and positional arguments from the settings.
  const own = new Map<string, string>();
  const settings: string[] = [];
  const positional: string[] = [];
  const rest = argv.slice(name.split(' ').length);
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i];
    if (!arg.startsWith('--')) {
      positional.push(arg);
      continue;
    }
    const [flag, inline] = arg.includes('=') ? [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)] : [arg, undefined];
    if (command.switches?.includes(flag)) own.set(flag, 'true');
    else if (command.flags?.includes(flag)) own.set(flag, inline ?? required(rest[++i], `a value for ${flag}`));
    else settings.push(arg, ...(inline === undefined && rest[i + 1] !== undefined && !rest[i + 1].startsWith('--') ? [rest[++i]] : []));
  }
  const config = () => {
    const loaded = loadConfig({ argv: settings });
    if (storeNamed({ argv: settings })) named.add(loaded);
    return loaded;
  };
  return command.run({ positional, flags: own, config });
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exit(code);
  },
  (err) => {
    console.error(`keel: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(err instanceof UsageError ? 2 : 1);
  },
);
