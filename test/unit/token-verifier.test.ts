/**
 * The bearer-token verifier's refusals, one per rule a token must meet (sub, iat and exp present;
 * not expired; iat neither older than the maximum token age nor in the future), each as the 401
 * problem document the API sends, naming the claim and never echoing the token. Also: the JWKS URL
 * must be https, in the verifier and in the API's environment, and the entry point hands the
 * configured maximum age to its verifier.
 */
import { afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { API_ENV, apiConfigFromEnv } from "../../functions/dead-letters-api/config.ts";
import { serveHttpApi } from "../../local/http-adapter.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { HttpProblem, PROBLEM } from "../../shared/errors/http.ts";
import {
  createTokenVerifier,
  MAX_TOKEN_AGE_BOUNDS,
  PERMISSION,
  TOKEN_VERIFIER_DEFAULTS,
  type TokenVerifier,
  type TokenVerifierOptions,
} from "../../shared/http/auth.ts";
import { PROBLEM_CONTENT_TYPE, problemResponse, problemType } from "../../shared/http/problem.ts";
import { type CraftedSigner, craftedSigner } from "../support/api-fixtures.ts";

const ISSUER = "https://issuer.example";
const AUDIENCE = "jobfence-ops";
const HOUR = 3600;

let signer: CraftedSigner;
let verify: TokenVerifier;

beforeAll(async () => {
  signer = await craftedSigner();
  verify = createTokenVerifier({ issuer: ISSUER, audience: AUDIENCE, jwks: signer.jwks });
});

const now = () => Math.floor(Date.now() / 1000);

/** Claims a good token carries; a test overrides or removes (`undefined`) one at a time. */
function claims(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { iss: ISSUER, aud: AUDIENCE, sub: "operator", scope: PERMISSION.read, ...extra };
}

/** The response the API sends for `verify`'s refusal of `token`. */
async function refusalOf(token: string, verifier: TokenVerifier = verify) {
  const error = await verifier(`Bearer ${token}`).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error, "the token was accepted").toBeInstanceOf(HttpProblem);
  const response = problemResponse(error as HttpProblem, "/v1/core/dead-letters");
  return { response, body: JSON.parse(response.body as string) };
}

/**
 * Asserts the refusal is RFC 6750's invalid_token with a 401 problem document whose detail matches
 * `why`, repeated as the challenge's error_description, and that nothing of the token leaks.
 */
function expectInvalidToken(
  refusal: Awaited<ReturnType<typeof refusalOf>>,
  token: string,
  why: RegExp,
): void {
  const { response, body } = refusal;
  expect(response.statusCode).toBe(401);
  expect(body).toMatchObject({
    type: problemType("unauthenticated"),
    title: PROBLEM.unauthenticated.title,
    status: 401,
  });
  expect(body.detail).toMatch(why);
  expect(response.headers?.["www-authenticate"]).toBe(
    `Bearer realm="jobfence", error="invalid_token", error_description="${body.detail}"`,
  );
  // RFC 6750 §3: error_description is printable ASCII without `"` and `\`.
  expect(body.detail).toMatch(/^[\x20\x21\x23-\x5B\x5D-\x7E]+$/);
  const everything = JSON.stringify(response);
  for (const part of token.split(".")) if (part) expect(everything).not.toContain(part);
}

describe("createTokenVerifier: what a token must carry", () => {
  it("defaults to 12 hours' maximum token age, 30 s of clock tolerance, RS256 and ES256", () => {
    expect(TOKEN_VERIFIER_DEFAULTS).toEqual({
      algorithms: ["RS256", "ES256"],
      maxTokenAgeSeconds: 12 * HOUR,
      clockToleranceSeconds: 30,
    });
    expect(MAX_TOKEN_AGE_BOUNDS).toEqual({ min: 60, max: 24 * HOUR });
  });

  it("accepts a token with sub, iat and exp, issued a moment ago, and reads the actor and permissions", async () => {
    const principal = await verify(`Bearer ${await signer.sign(claims())}`);
    expect(principal.actor).toBe("operator");
    expect([...principal.permissions]).toEqual([PERMISSION.read]);
  });

  it("accepts an exp far past iat while iat is recent: the token's age, not its exp, bounds its life", async () => {
    const token = await signer.sign(claims({ iat: now() - 60, exp: now() + 365 * 24 * HOUR }));
    await expect(verify(`Bearer ${token}`)).resolves.toMatchObject({ actor: "operator" });
  });

  it("accepts an iat a few seconds ahead of our clock, within the clock tolerance", async () => {
    const token = await signer.sign(claims({ iat: now() + 10 }));
    await expect(verify(`Bearer ${token}`)).resolves.toMatchObject({ actor: "operator" });
  });

  it("refuses a token without exp, naming exp", async () => {
    const token = await signer.sign(claims({ exp: undefined }));
    expectInvalidToken(await refusalOf(token), token, /\bexp\b/);
  });

  it("refuses a token without iat, naming iat", async () => {
    const token = await signer.sign(claims({ iat: undefined }));
    expectInvalidToken(await refusalOf(token), token, /\biat\b/);
  });

  it("refuses a token without sub, naming sub", async () => {
    const token = await signer.sign(claims({ sub: undefined }));
    expectInvalidToken(await refusalOf(token), token, /\bsub\b/);
  });

  it("refuses an expired token, naming exp", async () => {
    const token = await signer.sign(claims({ iat: now() - HOUR, exp: now() - 120 }));
    expectInvalidToken(await refusalOf(token), token, /expired.*\bexp\b/);
  });

  it("refuses a token whose iat is older than 12 hours although its exp is still ahead, naming iat", async () => {
    const maxAge = 12 * HOUR;
    const token = await signer.sign(claims({ iat: now() - maxAge - 120, exp: now() + HOUR }));
    expectInvalidToken(await refusalOf(token), token, new RegExp(`too old.*\\biat\\b.*${maxAge} seconds`));
  });

  it("refuses a token whose iat is ahead of our clock beyond the tolerance, naming iat", async () => {
    const token = await signer.sign(claims({ iat: now() + 120, exp: now() + HOUR }));
    expectInvalidToken(await refusalOf(token), token, /future.*\biat\b/);
  });

  it("honours a configured maximum token age", async () => {
    const strict = createTokenVerifier({
      issuer: ISSUER,
      audience: AUDIENCE,
      jwks: signer.jwks,
      maxTokenAgeSeconds: 600,
    });
    const token = await signer.sign(claims({ iat: now() - 900 }));
    await expect(verify(`Bearer ${token}`)).resolves.toMatchObject({ actor: "operator" });
    expectInvalidToken(await refusalOf(token, strict), token, /too old.*600 seconds/);
  });
});

describe("createTokenVerifier: its own configuration", () => {
  const base: TokenVerifierOptions = { issuer: ISSUER, audience: AUDIENCE };

  /** The ConfigurationError building a verifier from `options` throws. */
  function refusedOptions(options: TokenVerifierOptions): ConfigurationError {
    let thrown: unknown;
    try {
      createTokenVerifier(options);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(ConfigurationError);
    return thrown as ConfigurationError;
  }

  it("refuses an http:// JWKS URL at construction: keys fetched in the clear can be swapped", () => {
    const error = refusedOptions({ ...base, jwksUrl: "http://issuer.example/.well-known/jwks.json" });
    expect(error.problems).toEqual([expect.stringMatching(/jwksUrl must be an https:\/\/ URL/)]);
  });

  it("refuses a JWKS URL carrying a user name or password (fetch would refuse every request)", () => {
    const error = refusedOptions({ ...base, jwksUrl: "https://user:secret@issuer.example/jwks.json" });
    expect(error.problems).toEqual([expect.stringMatching(/must not carry a user name or password/)]);
  });

  it("answers 503, not 401, when the issuer's keys cannot be fetched: an outage is not the caller's fault", async () => {
    // Port 1 on loopback refuses the connection at once.
    const unreachable = createTokenVerifier({ ...base, jwksUrl: "https://127.0.0.1:1/jwks.json" });
    const token = await signer.sign(claims());
    const refusal = await refusalOf(token, unreachable);
    expect(refusal.response.statusCode).toBe(503);
    expect(refusal.body).toMatchObject({ status: 503, type: problemType("unavailable") });
  });

  it("builds a verifier for an https:// JWKS URL without fetching it", () => {
    expect(typeof createTokenVerifier({ ...base, jwksUrl: "https://issuer.example/jwks.json" })).toBe(
      "function",
    );
  });

  it("lists every problem at once: no URL, a maximum age out of bounds, a negative tolerance", () => {
    const error = refusedOptions({
      ...base,
      jwksUrl: "not a url",
      maxTokenAgeSeconds: 24 * HOUR + 1,
      clockToleranceSeconds: -1,
    });
    expect(error.problems).toEqual([
      expect.stringMatching(/^jwksUrl is not a URL/),
      expect.stringMatching(/^maxTokenAgeSeconds/),
      expect.stringMatching(/^clockToleranceSeconds/),
    ]);
  });
});

describe("the API's environment", () => {
  const env = {
    DATABASE_URL: "postgres://jobfence@127.0.0.1:5432/jobfence",
    JOBFENCE_JWT_ISSUER: ISSUER,
    JOBFENCE_JWT_AUDIENCE: AUDIENCE,
    JOBFENCE_SIGNING_KEY_SECRET_ARN: "arn:aws:secretsmanager:eu-west-1:123456789012:secret:k-AbCdEf",
  };

  it("refuses an http:// JOBFENCE_JWKS_URL", () => {
    expect(() =>
      apiConfigFromEnv({ ...env, [API_ENV.jwksUrl]: "http://issuer.example/.well-known/jwks.json" }),
    ).toThrow(/JOBFENCE_JWKS_URL: must be an https:\/\/ URL/);
  });

  it("takes an https:// JOBFENCE_JWKS_URL and defaults the maximum token age to 12 hours", () => {
    const config = apiConfigFromEnv({ ...env, [API_ENV.jwksUrl]: "https://issuer.example/jwks.json" });
    expect(config.jwksUrl).toBe("https://issuer.example/jwks.json");
    expect(config.jwtMaxAgeSeconds).toBe(12 * HOUR);
  });

  it("bounds JOBFENCE_JWT_MAX_AGE_SECONDS to between a minute and a day", () => {
    const withAge = (value: string) => ({
      ...env,
      [API_ENV.jwksUrl]: "https://issuer.example/jwks.json",
      [API_ENV.jwtMaxAgeSeconds]: value,
    });
    expect(apiConfigFromEnv(withAge("600")).jwtMaxAgeSeconds).toBe(600);
    for (const refused of ["59", "86401", "1.5", "soon"]) {
      expect(() => apiConfigFromEnv(withAge(refused)), refused).toThrow(/JOBFENCE_JWT_MAX_AGE_SECONDS/);
    }
  });
});

describe("the API's entry point", () => {
  afterEach(() => {
    vi.unstubAllEnvs();
    vi.resetModules();
  });

  it("verifies with JOBFENCE_JWT_MAX_AGE_SECONDS: a token older than it is 401 invalid_token", async () => {
    vi.stubEnv("DATABASE_URL", "postgres://jobfence@127.0.0.1:5432/jobfence");
    vi.stubEnv(API_ENV.issuer, ISSUER);
    vi.stubEnv(API_ENV.audience, AUDIENCE);
    vi.stubEnv(API_ENV.jwksUrl, "");
    vi.stubEnv(API_ENV.jwks, JSON.stringify(signer.jwks));
    vi.stubEnv(API_ENV.jwtMaxAgeSeconds, "600");
    vi.stubEnv(API_ENV.signingKeySecretArn, "arn:aws:secretsmanager:eu-west-1:123456789012:secret:k-AbCdEf");
    const { handler } = await import("../../functions/dead-letters-api/handler.ts");
    const server = await serveHttpApi(handler);
    try {
      const token = await signer.sign(claims({ iat: now() - 900 }));
      // Refused before the route opens a connection or reads the signing key: neither exists here.
      const response = await fetch(`${server.url}/v1/core/dead-letters`, {
        headers: { authorization: `Bearer ${token}` },
      });
      expect(response.status).toBe(401);
      expect(response.headers.get("content-type")).toBe(PROBLEM_CONTENT_TYPE);
      expect(response.headers.get("www-authenticate")).toMatch(/error="invalid_token".*600 seconds/);
    } finally {
      await server.close();
    }
  });
});
