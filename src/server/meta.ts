import type { FastifyInstance } from 'fastify';
import type { Config } from '../config.js';
import { VERSION } from '../version.js';
const started = new Date();

/** Anonymous endpoints: build information and where the other services are. */
export function mountMeta(app: FastifyInstance, config: Config): void {
  app.get('/about', { config: { public: true } }, async () => ({
    name: 'keel',
    version: VERSION,
    epoch: Math.floor(started.getTime() / 1000),
    timestamp: started.toISOString(),
    build: process.env.KEEL_BUILD ?? 'dev',
  }));
  app.get('/discovery', { config: { public: true } }, async (request) => {
    const host = (request.headers.host ?? `${config.host}:${config.port}`).replace(/:\d+$/, '');
    const audit = `${request.protocol}://${host}:${config.auditPort}`;
    const api = `${request.protocol}://${request.headers.host ?? `${config.host}:${config.port}`}`;
    return { endpoints: { api, audit }, firebase: {} };
  });
}
