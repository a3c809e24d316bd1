// Preloaded into every cpln process the CLI suite runs (NODE_OPTIONS=--require): records each
// outgoing connection and name lookup in $KEEL_GUARD_LOG and refuses any that is not to Keel
// ($KEEL_GUARD_ALLOW: host:port pairs), so a test sees every request the CLI tried elsewhere.
'use strict';
const fs = require('node:fs');
const net = require('node:net');
const dns = require('node:dns');

const log = process.env.KEEL_GUARD_LOG;
const allowed = new Set((process.env.KEEL_GUARD_ALLOW || '').split(',').filter(Boolean));
const note = (line) => {
  if (log) fs.appendFileSync(log, `${line}\n`);
};

const connect = net.Socket.prototype.connect;
net.Socket.prototype.connect = function (...args) {
  const options = typeof args[0] === 'object' && args[0] !== null ? (Array.isArray(args[0]) ? args[0][0] : args[0]) : { port: args[0], host: args[1] };
  if (options && options.path === undefined && options.port !== undefined) {
    const target = `${options.host || 'localhost'}:${options.port}`;
    const normalized = target.replace(/^(localhost|\[?::1\]?):/, '127.0.0.1:');
    if (!allowed.has(normalized)) {
      note(`REFUSED ${target}`);
      process.nextTick(() => this.destroy(Object.assign(new Error(`connection to ${target} refused by the test guard (not Keel)`), { code: 'ECONNREFUSED' })));
      return this;
    }
    note(`CONNECT ${target}`);
  }
  return connect.apply(this, args);
};

const lookup = dns.lookup;
dns.lookup = function (hostname, ...rest) {
  if (!['127.0.0.1', 'localhost', '::1'].includes(hostname)) note(`LOOKUP ${hostname}`);
  return lookup.call(this, hostname, ...rest);
};
