// Configuration: defaults < config file < environment < flags, every value checked with a clear message.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { DEFAULTS, loadConfig, printableConfig } from '../src/config.js';

const dir = mkdtempSync(join(tmpdir(), 'keel-config-'));
const file = (name: string, text: string) => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};

test('defaults apply when nothing is set', () => {
  const config = loadConfig({ env: {}, argv: [] });
  assert.equal(config.port, 8080);
  assert.equal(config.auditPort, 8081);
  assert.equal(config.host, '127.0.0.1');
  assert.equal(config.org, 'default');
  assert.equal(config.databaseUrl, undefined);
  assert.equal(config.bodyLimit, DEFAULTS.bodyLimit);
  assert.ok(config.dataDir.endsWith('/data'));
});

test('a config file is overridden by the environment, which is overridden by flags', () => {
  const yaml = file('keel.yaml', 'port: 9000\nauditPort: 9001\norg: from-file\nlogLevel: warn\nrateLimit: 50\n');
  const fromFile = loadConfig({ env: { KEEL_CONFIG: yaml }, argv: [] });
  assert.deepEqual([fromFile.port, fromFile.auditPort, fromFile.org, fromFile.logLevel, fromFile.rateLimit, fromFile.rateBurst], [9000, 9001, 'from-file', 'warn', 50, 100]);
  const envWins = loadConfig({ env: { KEEL_CONFIG: yaml, KEEL_PORT: '9100' }, argv: [] });
  assert.equal(envWins.port, 9100);
  assert.equal(envWins.auditPort, 9001);
  const flagWins = loadConfig({ env: { KEEL_CONFIG: yaml, KEEL_PORT: '9100' }, argv: ['--port', '9200', '--org=from-flag'] });
  assert.equal(flagWins.port, 9200);
  assert.equal(flagWins.org, 'from-flag');
  const json = file('keel.json', JSON.stringify({ maxInFlight: 7, audit: false }));
  const fromJson = loadConfig({ env: {}, argv: ['--config', json] });
  assert.equal(fromJson.maxInFlight, 7);
  assert.equal(fromJson.audit, false);
});

test('bad values are refused with a message naming the setting', () => {
  const cases: Array<[Parameters<typeof loadConfig>[0], RegExp]> = [
    [{ env: { KEEL_PORT: 'eighty' } }, /KEEL_PORT must be a whole number from 0 to 65535, got 'eighty'/],
    [{ env: { KEEL_PORT: '70000' } }, /KEEL_PORT/],
    [{ env: { KEEL_ORG: 'Bad_Org' } }, /KEEL_ORG 'Bad_Org' is not a valid org name/],
    [{ env: { KEEL_DATABASE_URL: 'mysql://x' } }, /KEEL_DATABASE_URL must be a postgres:\/\/ URL/],
    [{ env: { KEEL_LOG_LEVEL: 'loud' } }, /KEEL_LOG_LEVEL must be one of/],
    [{ env: { KEEL_AUDIT: 'maybe' } }, /KEEL_AUDIT must be one of on, off/],
    [{ env: { KEEL_READ_LEASE_MS: '1' } }, /KEEL_READ_LEASE_MS must be 0 \(off\) or a whole number from 300 to 60000, got '1'/],
    [{ env: { KEEL_READ_LEASE_MS: '60001' } }, /KEEL_READ_LEASE_MS must be a whole number from 0 to 60000/],
    [{ env: {}, argv: ['--bogus', '1'] }, /unknown flag --bogus/],
    [{ env: {}, argv: ['--port'] }, /--port needs a value/],
    [{ env: {}, argv: ['--config', join(dir, 'missing.yaml')] }, /cannot read config file/],
    [{ env: {}, argv: ['--config', file('bad.yaml', 'port: [1, 2')] }, /is not valid YAML/],
    [{ env: {}, argv: ['--config', file('unknown.yaml', 'colour: blue')] }, /unknown setting\(s\) colour/],
    [{ env: {}, argv: ['--config', file('typed.json', '{"port": "x"}')] }, /typed.json: port must be a whole number/],
  ];
  for (const [sources, message] of cases) assert.throws(() => loadConfig(sources), message, JSON.stringify(sources));
});

test('the printable configuration masks a database password', () => {
  const config = loadConfig({ env: { KEEL_DATABASE_URL: 'postgres://keel:s3cret@db:5432/keel' } });
  const printed = JSON.stringify(printableConfig(config));
  assert.ok(!printed.includes('s3cret'));
  assert.match(printed, /postgres:\/\/keel:\*\*\*\*@db:5432\/keel/);
});

test('the limits against hostile callers are settings with defaults, checked like the others', () => {
  const defaults = loadConfig({ env: {}, argv: [] });
  assert.deepEqual(defaults.orgCreators, ['superusers']);
  assert.ok(defaults.queryBudgetMs > 0 && defaults.bodyTimeoutMs > 0 && defaults.maxInFlightPerPrincipal < defaults.maxInFlight && defaults.authFailureLimit > 0);
  const set = loadConfig({
    env: { KEEL_ORG_CREATORS: 'superusers, /org/acme/serviceaccount/ci,alice@example.com', KEEL_QUERY_BUDGET_MS: '500', KEEL_MAX_LONG_READS_IN_FLIGHT: '3', KEEL_READS_QUEUED_PER_PRINCIPAL: '0' },
    argv: ['--max-orgs-per-principal', '3', '--body-timeout-ms=2000', '--auth-failure-limit', '0', '--max-in-flight-per-principal', '8', '--mutations-queued-per-principal', '5'],
  });
  assert.deepEqual(set.orgCreators, ['superusers', '/org/acme/serviceaccount/ci', 'alice@example.com']);
  assert.deepEqual(
    [set.queryBudgetMs, set.maxOrgsPerPrincipal, set.bodyTimeoutMs, set.authFailureLimit, set.maxInFlightPerPrincipal, set.maxLongReadsInFlight, set.readsQueuedPerPrincipal, set.mutationsQueuedPerPrincipal],
    [500, 3, 2000, 0, 8, 3, 0, 5],
  );
  assert.ok(defaults.maxLongReadsInFlight < defaults.maxMutationsInFlight && defaults.maxMutationsInFlight < defaults.maxReadsInFlight && defaults.maxReadsInFlight < defaults.maxInFlight);
  assert.throws(() => loadConfig({ env: { KEEL_MAX_LONG_READS_IN_FLIGHT: '0' } }), /KEEL_MAX_LONG_READS_IN_FLIGHT must be a whole number from 1/);
  assert.throws(() => loadConfig({ env: {}, argv: ['--config', file('old.json', '{"queriesPerPrincipal": 2}')] }), /unknown setting\(s\) queriesPerPrincipal/);
  assert.deepEqual(loadConfig({ env: {}, argv: ['--config', file('creators.json', '{"orgCreators": ["anyone"]}')] }).orgCreators, ['anyone']);
  assert.throws(() => loadConfig({ env: { KEEL_ORG_CREATORS: 'everybody' } }), /KEEL_ORG_CREATORS must list superusers, anyone, principal links .* got 'everybody'/);
  assert.throws(() => loadConfig({ env: { KEEL_QUERY_BUDGET_MS: '5' } }), /KEEL_QUERY_BUDGET_MS must be a whole number from 10/);
});

test('the runtime settings: a runtime by name, an ingress port, a subnet as its network address and prefix', () => {
  const config = loadConfig({ env: { KEEL_RUNTIME: 'runc', KEEL_INGRESS_PORT: '9082', KEEL_RUNTIME_SUBNET: '10.99.0.0/24' }, argv: [] });
  assert.deepEqual([config.runtime, config.ingressPort, config.runtimeSubnet], ['runc', 9082, '10.99.0.0/24']);
  assert.deepEqual([DEFAULTS.runtime, DEFAULTS.ingressPort, DEFAULTS.runtimeSubnet], ['simulated', 8082, '10.213.0.0/16']);
  assert.throws(() => loadConfig({ env: { KEEL_RUNTIME: 'docker' }, argv: [] }), /KEEL_RUNTIME must be one of simulated, runc/);
  assert.equal(DEFAULTS.ingressProxy, 'keel');
  assert.equal(loadConfig({ env: {}, argv: ['--ingress-proxy', 'haproxy'] }).ingressProxy, 'haproxy');
  assert.throws(() => loadConfig({ env: { KEEL_INGRESS_PROXY: 'nginx' }, argv: [] }), /KEEL_INGRESS_PROXY must be one of keel, haproxy/);
  for (const bad of ['10.213.0.0', '10.213.0.1/16', '10.300.0.0/16', '10.0.0.0/4', '10.0.0.0/30', 'fd00::/64']) {
    assert.throws(() => loadConfig({ env: { KEEL_RUNTIME_SUBNET: bad }, argv: [] }), /KEEL_RUNTIME_SUBNET must/, bad);
  }
});
