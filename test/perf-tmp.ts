import { startKeel } from './support/keel.js';
import Fastify from 'fastify';
const k = await startKeel('sqlite');
await k.call('POST', '/org/acme/gvc', { name: 'bench' });
const hello = Fastify({ logger: false });
hello.get('/x', async () => ({ kind: 'gvc', name: 'bench', hello: 'world' }));
await hello.ready();
const headers = { authorization: `Bearer ${k.token}` };
async function time(label: string, fn: () => Promise<unknown>, n = 20000) {
  for (let i = 0; i < 2000; i++) await fn();
  const t = process.hrtime.bigint();
  for (let i = 0; i < n; i++) await fn();
  const us = Number(process.hrtime.bigint() - t) / 1000 / n;
  console.log(label, us.toFixed(1), 'us/req');
}
await time('hello inject', () => hello.inject({ method: 'GET', url: '/x' }));
await time('keel GET gvc', () => k.app.core.inject({ method: 'GET', url: '/org/acme/gvc/bench', headers }));
await time('keel /about', () => k.app.core.inject({ method: 'GET', url: '/about' }));
let n = 0;
await time('keel PATCH gvc', () => k.app.core.inject({ method: 'PATCH', url: '/org/acme/gvc/bench', headers: { ...headers, 'content-type': 'application/json' }, payload: JSON.stringify({ tags: { n: String(++n) } }) }), 3000);
await k.close();
