/**
 * A local token issuer: an ES256 key pair made at start-up, its public JWKS for the API's
 * verifier, and bearer tokens signed with it — what an identity provider and API Gateway's JWT
 * authorizer provide in AWS.
 */
import { exportJWK, generateKeyPair, type JWK, SignJWT } from "jose";
import { PERMISSION, TOKEN_VERIFIER_DEFAULTS } from "../shared/http/auth.ts";

/** The issuer and audience local tokens carry. */
export const LOCAL_ISSUER = "https://jobfence.local/issuer";
export const LOCAL_AUDIENCE = "jobfence-ops-api";

/** A key pair and what it signs. */
export interface LocalIssuer {
  readonly issuer: string;
  readonly audience: string;
  /** The public key set the verifier trusts. */
  readonly jwks: { keys: JWK[] };
  /**
   * Signs a token for `sub` granting `permissions` (in the `scope` claim), with `iat` now and `exp`
   * `ttlSeconds` later (default: as long as the verifier accepts a token's age).
   */
  sign(
    sub: string,
    permissions: readonly string[],
    options?: { ttlSeconds?: number; claims?: Record<string, unknown> },
  ): Promise<string>;
  /** The standard set: admin (all three permissions), read, replay, discard, none. */
  standardTokens(): Promise<Record<"admin" | "read" | "replay" | "discard" | "none", string>>;
}

export async function createLocalIssuer(): Promise<LocalIssuer> {
  const { publicKey, privateKey } = await generateKeyPair("ES256");
  const publicJwk = { ...(await exportJWK(publicKey)), kid: "local-1", alg: "ES256", use: "sig" };
  const issuer: LocalIssuer = {
    issuer: LOCAL_ISSUER,
    audience: LOCAL_AUDIENCE,
    jwks: { keys: [publicJwk] },
    async sign(sub, permissions, options = {}) {
      return new SignJWT({ scope: permissions.join(" "), ...options.claims })
        .setProtectedHeader({ alg: "ES256", kid: "local-1" })
        .setIssuer(LOCAL_ISSUER)
        .setAudience(LOCAL_AUDIENCE)
        .setSubject(sub)
        .setIssuedAt()
        .setExpirationTime(`${options.ttlSeconds ?? TOKEN_VERIFIER_DEFAULTS.maxTokenAgeSeconds}s`)
        .sign(privateKey);
    },
    async standardTokens() {
      return {
        admin: await issuer.sign("local-admin", Object.values(PERMISSION)),
        read: await issuer.sign("local-reader", [PERMISSION.read]),
        replay: await issuer.sign("local-replayer", [PERMISSION.replay]),
        discard: await issuer.sign("local-discarder", [PERMISSION.discard]),
        none: await issuer.sign("local-nobody", []),
      };
    },
  };
  return issuer;
}
