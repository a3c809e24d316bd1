// The string formats kind schemas name (`format: 'keel-cpu'`), each with what it allows in words.
// The validator (src/resources/validate.ts) registers every one with ajv and, when a value fails,
// answers the field's path with the reason and what is allowed, so all kinds refuse the same way.
import { parseSchedule } from './cron.js';

export interface StringFormat {
  /** Why `value` is refused, or undefined when it is allowed. */
  problem(value: string): string | undefined;
  /** What the field takes, for the error message. */
  allowed: string;
  /** Values it allows (for documentation and generated test data). */
  examples: string[];
}

// Kubernetes quantity notation: a non-negative decimal, then a binary (Ki…Ei) or decimal (n…E)
// suffix or a decimal exponent.
const QUANTITY = /^\+?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][-+]?\d+)?$/;
const BINARY: Record<string, number> = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60 };
const DECIMAL: Record<string, number> = { n: 1e-9, u: 1e-6, m: 1e-3, '': 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18 };

/** The value of a Kubernetes quantity (`50m` → 0.05, `128Mi` → 134217728), or undefined if it is not one. */
export function parseQuantity(text: string): number | undefined {
  const match = QUANTITY.exec(text);
  if (!match) return undefined;
  const suffix = match[3] ?? '';
  const number = Number(match[1]);
  if (/^[eE]/.test(suffix)) return number * 10 ** Number(suffix.slice(1));
  return number * (BINARY[suffix] ?? DECIMAL[suffix]);
}

const positiveQuantity = (text: string): string | undefined => {
  const value = parseQuantity(text);
  if (value === undefined) return `'${text}' is not a quantity`;
  return value > 0 ? undefined : 'must be more than zero';
};

// A Go duration (what the service's duration fields take): one or more number-unit pairs.
const DURATION = /^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$/;

// Image references as Docker and the registry take them: [HOST[:PORT]/]PATH[:TAG][@DIGEST], and
// the org registry's own links (/org/ORG/image/NAME:TAG, //image/NAME:TAG).
const COMPONENT = '[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*';
const HOST = '(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::\\d+)?/)';
const TAG = '(?::[\\w][\\w.-]{0,127})';
const DIGEST = '(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})';
const IMAGE = new RegExp(`^${HOST}?${COMPONENT}(?:/${COMPONENT})*${TAG}?${DIGEST}?$`);
/** An OCI image layout directory on the Keel host and a tag in it (what the runc runtime can run without a registry). */
const OCI_LAYOUT = /^oci:\/[^\s:]*:[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/;
const ORG_IMAGE = new RegExp(`^(/org/[a-z][-a-z0-9]*|/)/image/${COMPONENT}(?:/${COMPONENT})*${TAG}?${DIGEST}?$`);

const LABEL = '[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?';
const DNS_NAME = new RegExp(`^${LABEL}(?:\\.${LABEL})*$`);

function dnsProblem(text: string): string | undefined {
  if (text.length > 253) return 'is longer than 253 characters';
  if (!DNS_NAME.test(text)) return `'${text}' is not a DNS name`;
  return undefined;
}

export const FORMATS: Record<string, StringFormat> = {
  'keel-link': {
    // No whitespace, query or fragment: a link names an item, nothing more.
    problem: (text) => (/^\/(\/|org\/)[^\s?#]*$/.test(text) ? undefined : `'${text}' is not a link`),
    allowed: 'a link to a resource: /org/ORG/KIND/NAME, or //KIND/NAME in this org (no query, fragment or whitespace)',
    examples: ['/org/acme/secret/db', '//secret/db'],
  },
  'keel-cpu': {
    problem: positiveQuantity,
    allowed: 'a positive CPU quantity in Kubernetes notation, such as 50m, 250m, 0.5 or 2 (cores)',
    examples: ['50m', '250m', '0.5', '2'],
  },
  'keel-memory': {
    problem: positiveQuantity,
    allowed: 'a positive memory quantity in Kubernetes notation, such as 64Mi, 128Mi, 1Gi or 500M (bytes)',
    examples: ['64Mi', '128Mi', '1Gi', '500M'],
  },
  'keel-duration': {
    problem: (text) => (DURATION.test(text) ? undefined : `'${text}' is not a duration`),
    allowed: 'a duration of numbers with units ns, us, ms, s, m or h, such as 30s, 5m or 1h30m',
    examples: ['30s', '5m', '1h30m', '24h'],
  },
  'keel-cron': {
    problem: (text) => {
      try {
        parseSchedule(text);
        return undefined;
      } catch (err) {
        return (err as Error).message;
      }
    },
    allowed: 'a cron schedule of five fields (minute hour day-of-month month day-of-week, in UTC), such as */15 * * * * or 0 3 * * 1-5, or @hourly, @daily, @weekly, @monthly, @yearly',
    examples: ['*/15 * * * *', '0 3 * * 1-5', '@daily'],
  },
  'keel-image': {
    problem: (text) => (IMAGE.test(text) || ORG_IMAGE.test(text) || OCI_LAYOUT.test(text) ? undefined : `'${text}' is not an image reference`),
    allowed: "an image reference [HOST[:PORT]/]NAME[:TAG][@sha256:DIGEST] in lowercase, such as nginx:1.27 or ghcr.io/team/app:v2, //image/NAME[:TAG][@sha256:DIGEST] in the org's registry, or oci:/ABSOLUTE/DIR:TAG (an OCI image layout on the Keel host)",
    examples: ['nginx:1.27', 'ghcr.io/team/app:v2', 'registry.example.com:5000/app@sha256:0123456789abcdef0123456789abcdef', '//image/app:v1', 'oci:/srv/images/app:v1'],
  },
  'keel-dns-name': {
    problem: dnsProblem,
    allowed: 'a DNS name: lowercase labels of letters, digits and hyphens (1-63 characters, not starting or ending with a hyphen) joined by dots, at most 253 characters',
    examples: ['example.com', 'app.example.com'],
  },
  'keel-host-pattern': {
    problem: (text) => dnsProblem(text.startsWith('*.') ? text.slice(2) : text),
    allowed: 'a DNS name such as api.example.com, or *.example.com for all its subdomains',
    examples: ['api.example.com', '*.example.com'],
  },
};
