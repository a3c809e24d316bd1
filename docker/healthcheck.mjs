// The image's health check: GET /about on the Core API answers 200 within two seconds.
const host = !process.env.KEEL_HOST || process.env.KEEL_HOST === '0.0.0.0' ? '127.0.0.1' : process.env.KEEL_HOST === '::' ? '[::1]' : process.env.KEEL_HOST;
const port = process.env.KEEL_PORT || '8080';
try {
  const res = await fetch(`http://${host}:${port}/about`, { signal: AbortSignal.timeout(2000) });
  process.exit(res.ok ? 0 : 1);
} catch {
  process.exit(1);
}
