/**
 * Bearer-token authorization (docs/api.md, "Authentication"). In AWS, API Gateway's JWT authorizer has already checked
 * the token and the route's scope; the handler checks both again (defence in depth, and the local
 * stack has no API Gateway). Permissions come from the space-separated `scope` claim or a
 * `permissions` array; the actor recorded in `resolved_by` is the token's `sub`. A token must carry
 * `sub`, `iat` and `exp`, and is refused once `iat` is older than the maximum token age.
 */
import { createLocalJWKSet, createRemoteJWKSet, errors, type JWK, type JWTPayload, jwtVerify } from "jose";
import { storableText } from "../envelope/envelope.ts";
import { ConfigurationError } from "../errors/configuration.ts";
import { HttpProblem } from "../errors/http.ts";

/** The permissions of the dead-letter API. */
export const PERMISSION = {
  read: "core.dead_letters.read",
  replay: "core.dead_letters.replay",
  discard: "core.dead_letters.discard",
} as const;

/** One of {@link PERMISSION}. */
export type Permission = (typeof PERMISSION)[keyof typeof PERMISSION];

/** Defaults of {@link TokenVerifierOptions}. */
export const TOKEN_VERIFIER_DEFAULTS = {
  algorithms: ["RS256", "ES256"],
  /**
   * A token is refused this long after its `iat`, whatever its `exp` says: one working shift, so a
   * token leaked from an operator's shell replays and discards for hours, not days. It is also
   * what the local issuer mints.
   */
  maxTokenAgeSeconds: 12 * 3600,
  /**
   * Slack for the issuer's clock against ours on `exp`, `nbf` and `iat`. Both sides run on
   * NTP-synced clocks, so this only absorbs transit and a second boundary.
   */
  clockToleranceSeconds: 30,
} as const;

/**
 * The accepted range of `maxTokenAgeSeconds`. Below a minute a token would go stale between being
 * issued and being sent; beyond a day a bearer token is a standing credential.
 */
export const MAX_TOKEN_AGE_BOUNDS = { min: 60, max: 24 * 3600 } as const;

/** The largest `clockToleranceSeconds` accepted: more would make `exp` a suggestion. */
const MAX_CLOCK_TOLERANCE_SECONDS = 300;

/**
 * Claims every token must carry, beside `iss` and `aud`: `sub` is the actor, `iat` bounds the
 * token's age and `exp` its issuer's own idea of its lifetime.
 */
export const REQUIRED_CLAIMS = ["sub", "iat", "exp"] as const;

/** Where verification keys come from and what the token must say. */
export interface TokenVerifierOptions {
  /** Required `iss`. */
  readonly issuer: string;
  /** Required `aud` (one of). */
  readonly audience: string;
  /** The issuer's JWKS endpoint (production; https only), or… */
  readonly jwksUrl?: string;
  /** …public keys given directly (the local stack's signing key). */
  readonly jwks?: { keys: JWK[] };
  /** Accepted signature algorithms. @default TOKEN_VERIFIER_DEFAULTS.algorithms */
  readonly algorithms?: readonly string[];
  /** Oldest accepted `iat`, in seconds before now. @default TOKEN_VERIFIER_DEFAULTS.maxTokenAgeSeconds */
  readonly maxTokenAgeSeconds?: number;
  /** Clock skew allowed on `exp`, `nbf` and `iat`. @default TOKEN_VERIFIER_DEFAULTS.clockToleranceSeconds */
  readonly clockToleranceSeconds?: number;
}

/** A verified caller. */
export interface Principal {
  /** The token's `sub`: who acts. */
  readonly actor: string;
  readonly permissions: ReadonlySet<string>;
  readonly claims: JWTPayload;
}

/** Verifies a bearer token; throws HttpProblem 401 for anything but a valid one. */
export type TokenVerifier = (authorization: string | undefined) => Promise<Principal>;

/** The permissions a token grants: its `scope` words and its `permissions` array. */
export function permissionsOf(claims: JWTPayload): Set<string> {
  const granted = new Set<string>();
  if (typeof claims.scope === "string")
    for (const word of claims.scope.split(" ")) if (word) granted.add(word);
  if (Array.isArray(claims.permissions)) {
    for (const p of claims.permissions) if (typeof p === "string") granted.add(p);
  }
  return granted;
}

// The scheme name is case-insensitive (RFC 9110 §11.1).
const BEARER = /^Bearer ([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*)$/i;

/** Claim names a refusal may name; anything else jose reports is described generically. */
const NAMED_CLAIMS: ReadonlySet<string> = new Set(["iss", "aud", "sub", "iat", "exp", "nbf"]);

/**
 * Why jose refused a token, in words for `detail` and `error_description`: which claim and how,
 * never a claim's value nor the token. Decided on jose's error class and its `claim` and `reason`
 * fields. The words stay within RFC 6750's error_description characters (no `"` and no `\`).
 */
function tokenRefusal(error: unknown, maxTokenAgeSeconds: number): string {
  // jose throws JWTExpired (exp past, or iat too old) apart from JWTClaimValidationFailed: siblings.
  if (error instanceof errors.JWTExpired && error.claim === "exp") {
    return "the bearer token has expired (exp is past)";
  }
  if (error instanceof errors.JWTExpired && error.claim === "iat") {
    return `the bearer token is too old (iat is more than ${maxTokenAgeSeconds} seconds ago)`;
  }
  if (error instanceof errors.JWTClaimValidationFailed && NAMED_CLAIMS.has(error.claim)) {
    const claim = error.claim;
    if (error.reason === "missing") return `the bearer token has no ${claim} claim`;
    if (error.reason === "invalid") return `the bearer token's ${claim} claim is not a valid value`;
    if (claim === "iat") return "the bearer token was issued in the future (iat is ahead of our clock)";
    if (claim === "nbf") return "the bearer token is not valid yet (nbf is in the future)";
    if (claim === "iss") return "the bearer token's iss is not this API's issuer";
    if (claim === "aud") return "the bearer token's aud does not name this API";
    return `the bearer token's ${claim} claim is not valid`;
  }
  if (error instanceof errors.JOSEAlgNotAllowed) {
    return "the bearer token is signed with an algorithm this API does not accept";
  }
  if (error instanceof errors.JWKSNoMatchingKey || error instanceof errors.JWSSignatureVerificationFailed) {
    return "the bearer token's signature does not verify with the issuer's keys";
  }
  return "the bearer token is not valid for this API";
}

/**
 * Whether fetching the remote key set failed (timeout, network, a non-200 answer, a body that is
 * no key set), as opposed to the token being bad. jose's fetch errors are a generic JOSEError (the
 * HTTP status) or the fetch's own TypeError; every token problem has a class of its own.
 */
function keysUnreachable(error: unknown): boolean {
  return (
    error instanceof errors.JWKSTimeout ||
    error instanceof errors.JWKSInvalid ||
    error instanceof TypeError ||
    (error instanceof errors.JOSEError && error.code === "ERR_JOSE_GENERIC")
  );
}

/** A 401 for a token that was sent but is not good: RFC 6750's invalid_token, saying why. */
function invalidToken(description: string, cause?: unknown): HttpProblem {
  return new HttpProblem("unauthenticated", description, {
    headers: {
      "www-authenticate": `Bearer realm="jobfence", error="invalid_token", error_description="${description}"`,
    },
    cause,
  });
}

/** The options' problems, all of them; and the JWKS URL, parsed, when it is one. */
function checkOptions(options: TokenVerifierOptions): { problems: string[]; jwksUrl?: URL } {
  const problems: string[] = [];
  let jwksUrl: URL | undefined;
  if (!options.jwksUrl === !options.jwks) problems.push("give exactly one of jwksUrl and jwks");
  if (options.jwksUrl) {
    jwksUrl = URL.parse(options.jwksUrl) ?? undefined;
    if (!jwksUrl) problems.push("jwksUrl is not a URL");
    // Keys fetched over plain HTTP are whatever anyone on the path says they are.
    else if (jwksUrl.protocol !== "https:")
      problems.push(`jwksUrl must be an https:// URL, not ${jwksUrl.protocol}`);
    // fetch refuses a URL carrying credentials: it would fail on every request, not here.
    else if (jwksUrl.username !== "" || jwksUrl.password !== "")
      problems.push("jwksUrl must not carry a user name or password");
  }
  const { maxTokenAgeSeconds, clockToleranceSeconds } = options;
  if (
    maxTokenAgeSeconds !== undefined &&
    !(
      Number.isInteger(maxTokenAgeSeconds) &&
      maxTokenAgeSeconds >= MAX_TOKEN_AGE_BOUNDS.min &&
      maxTokenAgeSeconds <= MAX_TOKEN_AGE_BOUNDS.max
    )
  ) {
    problems.push(
      `maxTokenAgeSeconds must be a whole number from ${MAX_TOKEN_AGE_BOUNDS.min} to ${MAX_TOKEN_AGE_BOUNDS.max}`,
    );
  }
  if (
    clockToleranceSeconds !== undefined &&
    !(
      Number.isInteger(clockToleranceSeconds) &&
      clockToleranceSeconds >= 0 &&
      clockToleranceSeconds <= MAX_CLOCK_TOLERANCE_SECONDS
    )
  ) {
    problems.push(`clockToleranceSeconds must be a whole number from 0 to ${MAX_CLOCK_TOLERANCE_SECONDS}`);
  }
  return jwksUrl ? { problems, jwksUrl } : { problems };
}

/**
 * A verifier for one issuer and audience; refuses (ConfigurationError) options it cannot honour,
 * an http:// JWKS URL among them, with every problem listed.
 */
export function createTokenVerifier(options: TokenVerifierOptions): TokenVerifier {
  const { problems, jwksUrl } = checkOptions(options);
  if (problems.length > 0) throw new ConfigurationError("token verifier", problems);
  const keys = options.jwks ? createLocalJWKSet(options.jwks) : createRemoteJWKSet(jwksUrl as URL);
  const algorithms = [...(options.algorithms ?? TOKEN_VERIFIER_DEFAULTS.algorithms)];
  const maxTokenAgeSeconds = options.maxTokenAgeSeconds ?? TOKEN_VERIFIER_DEFAULTS.maxTokenAgeSeconds;
  const clockTolerance = options.clockToleranceSeconds ?? TOKEN_VERIFIER_DEFAULTS.clockToleranceSeconds;
  // No credentials at all: RFC 6750 §3.1 says the challenge then carries no error code.
  const challenge = { "www-authenticate": 'Bearer realm="jobfence"' };

  return async (authorization) => {
    const match = authorization ? BEARER.exec(authorization.trim()) : null;
    if (!match) {
      throw new HttpProblem("unauthenticated", "send Authorization: Bearer <token>", { headers: challenge });
    }
    let claims: JWTPayload;
    try {
      ({ payload: claims } = await jwtVerify(match[1] as string, keys, {
        issuer: options.issuer,
        audience: options.audience,
        algorithms,
        requiredClaims: [...REQUIRED_CLAIMS],
        // Bounds the token's age by iat whatever its exp says, and refuses an iat in the future, so
        // no separate bound on exp − iat is needed: a token lives at most this long after issue.
        maxTokenAge: maxTokenAgeSeconds,
        clockTolerance,
      }));
    } catch (error) {
      if (options.jwksUrl !== undefined && keysUnreachable(error)) {
        // Not the caller's fault: a 503 (logged with a correlation id, as every 5xx is), so an
        // issuer outage is seen, instead of every valid token answered "invalid".
        throw new HttpProblem(
          "unavailable",
          "the issuer's signing keys could not be fetched; try again shortly",
          {
            cause: error,
          },
        );
      }
      throw invalidToken(tokenRefusal(error, maxTokenAgeSeconds), error);
    }
    // The subject is recorded in resolved_by: it must be text the database can store.
    if (
      typeof claims.sub !== "string" ||
      !storableText.safeParse(claims.sub).success ||
      !/\S/.test(claims.sub) ||
      claims.sub.length > 255
    ) {
      throw invalidToken("the bearer token's sub is not usable as the actor (blank, too long or not text)");
    }
    return { actor: claims.sub, permissions: permissionsOf(claims), claims };
  };
}

/** Refuses (403) a principal holding none of `permissions`. */
export function requireAnyPermission(principal: Principal, permissions: readonly Permission[]): void {
  if (permissions.some((p) => principal.permissions.has(p))) return;
  const [only] = permissions;
  if (permissions.length === 1 && only) requirePermission(principal, only);
  throw new HttpProblem(
    "forbidden",
    `this operation requires one of the permissions ${permissions.join(", ")}`,
    {
      extensions: { any_of_permissions: [...permissions] },
    },
  );
}

/** Throws HttpProblem 403 unless the principal holds `permission`. */
export function requirePermission(principal: Principal, permission: Permission): void {
  if (!principal.permissions.has(permission)) {
    throw new HttpProblem("forbidden", `this operation requires the ${permission} permission`, {
      extensions: { required_permission: permission },
    });
  }
}
