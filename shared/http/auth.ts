/**
 * Bearer-token authorization (SPEC §6). In AWS, API Gateway's JWT authorizer has already checked
 * the token and the route's scope; the handler checks both again (defence in depth, and the local
 * stack has no API Gateway). Permissions come from the space-separated `scope` claim or a
 * `permissions` array; the actor recorded in `resolved_by` is the token's `sub`.
 */
import { createLocalJWKSet, createRemoteJWKSet, type JWK, type JWTPayload, jwtVerify } from "jose";
import { storableText } from "../envelope/envelope.ts";
import { ConfigurationError, HttpProblem } from "../errors.ts";

/** The permissions of the dead-letter API. */
export const PERMISSION = {
  read: "core.dead_letters.read",
  replay: "core.dead_letters.replay",
  discard: "core.dead_letters.discard",
} as const;

/** One of {@link PERMISSION}. */
export type Permission = (typeof PERMISSION)[keyof typeof PERMISSION];

/** Where verification keys come from and what the token must say. */
export interface TokenVerifierOptions {
  /** Required `iss`. */
  readonly issuer: string;
  /** Required `aud` (one of). */
  readonly audience: string;
  /** The issuer's JWKS endpoint (production), or… */
  readonly jwksUrl?: string;
  /** …public keys given directly (the local stack's signing key). */
  readonly jwks?: { keys: JWK[] };
  /** Accepted signature algorithms. @default ["RS256", "ES256"] */
  readonly algorithms?: string[];
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

export function createTokenVerifier(options: TokenVerifierOptions): TokenVerifier {
  if (!options.jwksUrl === !options.jwks) {
    throw new ConfigurationError("token verifier", ["give exactly one of jwksUrl and jwks"]);
  }
  const keys = options.jwks
    ? createLocalJWKSet(options.jwks)
    : createRemoteJWKSet(new URL(options.jwksUrl as string));
  const algorithms = options.algorithms ?? ["RS256", "ES256"];
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
      }));
    } catch (error) {
      throw new HttpProblem("unauthenticated", "the bearer token is not valid for this API", {
        headers: { "www-authenticate": 'Bearer realm="jobfence", error="invalid_token"' },
        cause: error,
      });
    }
    // The subject is recorded in resolved_by: it must be text the database can store.
    if (
      typeof claims.sub !== "string" ||
      !storableText.safeParse(claims.sub).success ||
      !/\S/.test(claims.sub) ||
      claims.sub.length > 255
    ) {
      throw new HttpProblem("unauthenticated", "the bearer token has no subject to record as the actor", {
        headers: challenge,
      });
    }
    return { actor: claims.sub, permissions: permissionsOf(claims), claims };
  };
}

/** Throws HttpProblem 403 unless the principal holds `permission`. */
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

export function requirePermission(principal: Principal, permission: Permission): void {
  if (!principal.permissions.has(permission)) {
    throw new HttpProblem("forbidden", `this operation requires the ${permission} permission`, {
      extensions: { required_permission: permission },
    });
  }
}
