// KEEL_JWT_ISSUERS: the identity providers whose JWTs Keel trusts, as a JSON array of
// {issuer, audience, jwksUrl | jwksFile | publicKey (PEM), emailClaim?}.

export interface TrustedIssuer {
  /** The exact `iss` claim. */
  issuer: string;
  /** Accepted `aud` values (one is enough). */
  audience: string[];
  /** Where the verification keys come from: exactly one. */
  jwksUrl?: string;
  jwksFile?: string;
  publicKey?: string;
  /** The claim holding the user's email (default `email`). */
  emailClaim: string;
}

/** Parses and checks the variable's value; throws an Error naming the first problem. */
export function parseIssuers(value: string, name = 'KEEL_JWT_ISSUERS'): TrustedIssuer[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch (err) {
    throw new Error(`${name} must be a JSON array of {issuer, audience, jwksUrl | jwksFile | publicKey, emailClaim?}: ${(err as Error).message}`);
  }
  if (!Array.isArray(parsed)) throw new Error(`${name} must be a JSON array, got ${typeof parsed}`);
  const seen = new Set<string>();
  return parsed.map((entry, i) => {
    const at = `${name}[${i}]`;
    if (!entry || typeof entry !== 'object' || Array.isArray(entry)) throw new Error(`${at} must be an object`);
    const e = entry as Record<string, unknown>;
    const known = new Set(['issuer', 'audience', 'jwksUrl', 'jwksFile', 'publicKey', 'emailClaim']);
    const unknown = Object.keys(e).filter((k) => !known.has(k));
    if (unknown.length) throw new Error(`${at} has unknown field(s) ${unknown.join(', ')}`);
    if (typeof e.issuer !== 'string' || !e.issuer) throw new Error(`${at}.issuer must be a non-empty string`);
    if (seen.has(e.issuer)) throw new Error(`${at}.issuer '${e.issuer}' is listed twice`);
    seen.add(e.issuer);
    const audience = typeof e.audience === 'string' ? [e.audience] : e.audience;
    if (!Array.isArray(audience) || audience.length === 0 || !audience.every((a) => typeof a === 'string' && a)) {
      throw new Error(`${at}.audience must be a non-empty string or array of strings`);
    }
    const sources = (['jwksUrl', 'jwksFile', 'publicKey'] as const).filter((k) => e[k] !== undefined);
    if (sources.length !== 1) throw new Error(`${at} needs exactly one of jwksUrl, jwksFile or publicKey (got ${sources.length})`);
    for (const k of sources) if (typeof e[k] !== 'string' || !e[k]) throw new Error(`${at}.${k} must be a non-empty string`);
    if (typeof e.jwksUrl === 'string' && !/^https?:\/\//.test(e.jwksUrl)) throw new Error(`${at}.jwksUrl must be an http(s) URL`);
    if (typeof e.publicKey === 'string' && !e.publicKey.includes('-----BEGIN PUBLIC KEY-----')) throw new Error(`${at}.publicKey must be a PEM (SPKI) public key`);
    if (e.emailClaim !== undefined && (typeof e.emailClaim !== 'string' || !e.emailClaim)) throw new Error(`${at}.emailClaim must be a non-empty string`);
    return {
      issuer: e.issuer,
      audience: audience as string[],
      ...(sources[0] === 'jwksUrl' ? { jwksUrl: e.jwksUrl as string } : {}),
      ...(sources[0] === 'jwksFile' ? { jwksFile: e.jwksFile as string } : {}),
      ...(sources[0] === 'publicKey' ? { publicKey: e.publicKey as string } : {}),
      emailClaim: (e.emailClaim as string | undefined) ?? 'email',
    };
  });
}
