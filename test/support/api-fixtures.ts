/**
 * Helpers for the dead-letter API's acceptance and robustness tests: seeding many dead letters in
 * one statement, snapshots of the columns a decision may change, problem+json assertions, and a
 * second API server whose verifier trusts a key the test controls (so tokens with any claims, or
 * none, can be signed). Queue helpers are in sqs.ts.
 */
import { exportJWK, generateKeyPair, type JWK, type JWTPayload, SignJWT } from "jose";
import { expect } from "vitest";
import { createDeadLetterApi } from "../../functions/dead-letters-api/api.ts";
import { serveHttpApi } from "../../local/http-adapter.ts";
import { createTokenVerifier } from "../../shared/http/auth.ts";
import { PROBLEM_CONTENT_TYPE } from "../../shared/http/problem.ts";
import { type ApiResponse, type ApiTestBed, TEST_SEAL_KEY } from "./api-harness.ts";
import type { TestDatabase } from "./database.ts";
import { type DeadLetterValues, deadLetter, registerConsumers } from "./fixtures.ts";

/** Where the API lives. */
export const BASE = "/v1/core/dead-letters";

/** What the request options of {@link ApiTestBed.call} are. */
export type CallOptions = NonNullable<Parameters<ApiTestBed["call"]>[2]>;

/** A call to an API at some base URL, answering as {@link ApiTestBed.call} does. */
export type ApiCall = (method: string, path: string, options?: CallOptions) => Promise<ApiResponse>;

/** The columns a replay or discard may change, per dead letter, in id order. */
export interface DeadLetterState {
  readonly id: string;
  readonly status: string;
  readonly discard_reason: string | null;
  readonly resolved_at: string | null;
  readonly resolved_by: string | null;
}

/** Every dead letter's decision columns, as the migrator sees them. */
export async function deadLetterStates(db: TestDatabase): Promise<DeadLetterState[]> {
  return db.withClient(async (c) => {
    const { rows } = await c.query<DeadLetterState>(
      `SELECT id, status, discard_reason, resolved_at::text AS resolved_at, resolved_by
         FROM core.dead_letters ORDER BY id`,
    );
    return rows;
  });
}

/** A dead letter to seed: column values, and optionally its creation instant (default now()). */
export type SeedRow = Partial<DeadLetterValues> & { readonly created_at?: string };

/**
 * Inserts the rows in ONE statement, so every row without an explicit `created_at` shares the
 * statement's now() exactly. Returns the ids in the order given.
 */
export async function seedDeadLetters(db: TestDatabase, rows: readonly SeedRow[]): Promise<string[]> {
  const records = rows.map((row, ordinal) => {
    const { created_at, ...values } = row;
    return { ordinal, created_at: created_at ?? null, ...deadLetter(values) };
  });
  return db.withClient(async (c) => {
    const { rows: inserted } = await c.query<{ id: string }>(
      `INSERT INTO core.dead_letters
         (job_id, consumer, queue, tenant_id, payload, message_attributes, attempts, error_kind, last_error,
          status, correlation_id, created_at, body_form, body)
       SELECT job_id, consumer, queue, tenant_id, payload, message_attributes, attempts, error_kind, last_error,
              status, correlation_id, coalesce(created_at, now()), 'text', payload::text
         FROM jsonb_to_recordset($1::jsonb) AS r(
                ordinal int, job_id text, consumer text, queue text, tenant_id text, payload jsonb,
                message_attributes jsonb, attempts int, error_kind text, last_error jsonb, status text,
                correlation_id text, created_at timestamptz)
        ORDER BY ordinal
       RETURNING id`,
      [JSON.stringify(records)],
    );
    expect(inserted).toHaveLength(rows.length);
    return inserted.map((r) => r.id);
  });
}

/**
 * Resolves dead letters directly as the migrator, in one multi-row UPDATE. Superseded ones get
 * their job's fence first: the database allows `superseded` only for an applied job.
 */
export async function resolveDirectly(
  db: TestDatabase,
  ids: readonly string[],
  status: "replayed" | "superseded" | "discarded",
  actor = "sql-fixture",
): Promise<void> {
  await db.withClient(async (c) => {
    if (status === "superseded") {
      const { rows: consumers } = await c.query<{ consumer: string }>(
        "SELECT DISTINCT consumer FROM core.dead_letters WHERE id = ANY($1::uuid[])",
        [ids],
      );
      await registerConsumers(
        c,
        consumers.map((r) => r.consumer),
      );
      await c.query(
        `INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, expires_at)
         SELECT DISTINCT d.job_id, r.id, coalesce(d.tenant_id, 'fixture'), now() + interval '7 days'
           FROM core.dead_letters AS d JOIN core.consumer_roles AS r ON r.consumer = d.consumer
          WHERE d.id = ANY($1::uuid[])
         ON CONFLICT (job_id, consumer_id) DO NOTHING`,
        [ids],
      );
    }
    await c.query(
      `UPDATE core.dead_letters
          SET status = $2, resolved_at = now(), resolved_by = $3,
              discard_reason = CASE WHEN $2 = 'discarded' THEN 'resolved by a fixture' END
        WHERE id = ANY($1::uuid[])`,
      [ids, status, actor],
    );
  });
}

/** Asserts an RFC 9457 problem response of `status`; a 401 also carries a Bearer challenge. */
export function expectProblem(response: ApiResponse, status: number): void {
  expect(response.status, JSON.stringify(response.body)).toBe(status);
  expect(response.contentType).toBe(PROBLEM_CONTENT_TYPE);
  expect(response.body).toMatchObject({ type: expect.any(String), title: expect.any(String), status });
  if (status === 401) expect(response.headers.get("www-authenticate")).toMatch(/^Bearer realm="jobfence"/);
}

/** Calls an API served at `baseUrl` the way {@link ApiTestBed.call} does. */
export function callAt(baseUrl: string): ApiCall {
  return async (method, path, options = {}) => {
    const headers: Record<string, string> = { ...options.headers };
    if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
    let body = options.rawBody;
    if (options.body !== undefined) {
      body = JSON.stringify(options.body);
      headers["content-type"] ??= "application/json";
    }
    const response = await fetch(`${baseUrl}${path}`, {
      method,
      headers,
      ...(body !== undefined ? { body } : {}),
    });
    const text = await response.text();
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      // not JSON: left as text for the assertion to show
    }
    return {
      status: response.status,
      contentType: response.headers.get("content-type") ?? "",
      headers: response.headers,
      body: parsed,
    };
  };
}

/** A signing key the test controls: it signs exactly the claims it is given. */
export interface CraftedSigner {
  readonly jwks: { keys: JWK[] };
  /**
   * Signs `claims` as they are (iat now and a one-hour exp are added unless given; give one as
   * `undefined` to leave it out of the token).
   */
  sign(claims: JWTPayload): Promise<string>;
}

export async function craftedSigner(): Promise<CraftedSigner> {
  const { publicKey, privateKey } = await generateKeyPair("ES256");
  const kid = "crafted-1";
  const jwk = { ...(await exportJWK(publicKey)), kid, alg: "ES256", use: "sig" };
  return {
    jwks: { keys: [jwk] },
    sign(claims) {
      const now = Math.floor(Date.now() / 1000);
      return new SignJWT({ iat: now, exp: now + 3600, ...claims })
        .setProtectedHeader({ alg: "ES256", kid })
        .sign(privateKey);
    },
  };
}

/**
 * A second server for the bed's API (same pool, queues and database) whose verifier trusts only
 * `jwks` and requires `issuer` and `audience`.
 */
export async function serveApiTrusting(
  bed: ApiTestBed,
  options: { jwks: { keys: JWK[] }; issuer: string; audience: string },
): Promise<{ call: ApiCall; close(): Promise<void> }> {
  const server = await serveHttpApi(
    createDeadLetterApi({
      pool: bed.opsPool,
      sqs: bed.sqs,
      verifier: createTokenVerifier(options),
      sealKey: TEST_SEAL_KEY,
    }),
  );
  return { call: callAt(server.url), close: () => server.close() };
}
