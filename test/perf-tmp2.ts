import { startKeel } from './support/keel.js';
const k = await startKeel('sqlite');
await k.call('POST', '/org/acme/gvc', { name: 'bench' });
const headers = { authorization: `Bearer ${k.token}`, 'content-type': 'application/json' };
let n = 0;
const mode = process.env.MODE;
for (let i = 0; i < 6000; i++) {
  if (mode === 'get') await k.app.core.inject({ method: 'GET', url: '/org/acme/gvc/bench', headers });
  else await k.app.core.inject({ method: 'PATCH', url: '/org/acme/gvc/bench', headers, payload: JSON.stringify({ tags: { n: String(++n) } }) });
}
await k.close();
