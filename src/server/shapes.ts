// V8 keeps at most 1536 object shapes that grow from the empty object, and every object parsed from
// JSON grows from it: stored data whose tags or dictionaries have more distinct first keys than
// that (items in many orgs, each tagged its own way) uses them all up, for as long as those items
// live (the read cache holds them). From then on an object that gets a first key no shape exists
// for yet gets a shape of its own, and each access to its properties falls to V8's slowest lookups:
// a response's headers object took ten times as long to fill. The objects each request makes from
// an empty object are given their shapes here, when Keel starts, before any data is read; the
// objects that hold those shapes live as long as the process, and with them the shapes.
import { POSITION_HEADER } from '../streams/position.js';

/**
 * The first keys those objects get: a request's headers (Node's parser adds them in the client's
 * order, and clients send one of these first), a response's (in the order Keel and fastify set
 * them), and fastify's log bindings of each request.
 */
export const REQUEST_PATH_FIRST_KEYS = [
  'host', 'accept', 'authorization', 'user-agent', 'content-type', 'content-length', 'connection', 'accept-encoding', 'origin', 'cookie', 'x-forwarded-for',
  POSITION_HEADER, 'location', 'allow', 'retry-after', 'cache-control', 'vary', 'www-authenticate', 'access-control-allow-origin', 'content-security-policy', 'x-frame-options', 'range', 'docker-distribution-api-version',
  'reqId',
] as const;

/** One object of each of those shapes, exported so that it lives as long as the process. */
export const SHAPE_HOLDERS = REQUEST_PATH_FIRST_KEYS.map((key) => {
  const holder = {};
  Reflect.set(holder, key, '');
  return holder;
});
