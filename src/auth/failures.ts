// Failed authentications, limited per what failed (see AuthFailures).
import { decodeJwt } from 'jose';
import { Buckets } from '../buckets.js';
import { ApiError } from '../errors.js';
import { WrongSecret } from './authenticator.js';
import { parseKey } from './keys.js';

/**
 * Failed authentications, counted against what failed and never against a credential that works:
 * a key id that exists, presented with a wrong secret, counts per address and key id; a JWT whose
 * claims can be read, per address and issuer and subject; everything else (unknown key ids,
 * malformed tokens, none at all), per address. Each bucket holds `authFailureLimit` a minute, as a
 * burst too. A token whose own bucket is empty is refused before it is checked (no key lookup, no
 * signature check); an unknown key is looked up first (nothing tells it from a good one before), and
 * answered 429 instead of 401 once its address has failed too often. A valid key from the same
 * address goes on working, whatever other keys that address sent.
 */
export class AuthFailures {
  private readonly buckets?: Buckets;
  constructor(private readonly perMinute: number) {
    if (perMinute > 0) this.buckets = new Buckets(perMinute / 60, perMinute);
  }

  /** The 429 for a token whose bucket is empty, before it is checked. */
  refusal(ip: string, token: string | undefined): ApiError | undefined {
    const wait = this.buckets?.wait(presented(ip, token)) ?? 0;
    return wait === 0 ? undefined : this.tooMany(wait);
  }

  /** Counts a failed authentication (`err`, a 401) and answers the 429 to send instead when its bucket was empty. */
  failed(ip: string, token: string | undefined, err: ApiError): ApiError | undefined {
    const unknownKey = token !== undefined && parseKey(token) !== undefined && !(err instanceof WrongSecret);
    const bucket = unknownKey ? `ip:${ip}` : presented(ip, token);
    const wait = this.buckets?.take(bucket) ?? 0;
    return wait === 0 ? undefined : this.tooMany(wait);
  }

  private tooMany(wait: number): ApiError {
    return new ApiError('rate_limited', `too many failed authentications from this address (authFailureLimit: ${this.perMinute} a minute); retry after ${wait} s`, { retryAfter: wait });
  }
}

/** The bucket of what a token presents: its key id or JWT subject with the address, or the address alone. */
function presented(ip: string, token: string | undefined): string {
  if (token === undefined) return `ip:${ip}`;
  const key = parseKey(token);
  if (key) return `key:${ip}\n${key.keyName}`;
  if (token.split('.').length === 3) {
    try {
      const { iss, sub } = decodeJwt(token);
      if (typeof iss === 'string' && typeof sub === 'string') return `jwt:${ip}\n${iss}\n${sub}`;
    } catch {
      // Not a JWT: counted with the address.
    }
  }
  return `ip:${ip}`;
}
