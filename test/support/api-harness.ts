/**
 * Test wiring for the dead-letter API: the consumer test bed (database, SQS emulator, sink), a
 * local token issuer, the API served on a real HTTP server as API Gateway would invoke it, with
 * its pool logged in as the least-privileged ops role.
 */
import { randomBytes } from "node:crypto";
import type pg from "pg";
import {
  createDeadLetterApi,
  type DeadLetterApiDeps,
  type DeadLetterApiHandler,
} from "../../functions/dead-letters-api/api.ts";
import { serveHttpApi } from "../../local/http-adapter.ts";
import { createLocalIssuer, type LocalIssuer } from "../../local/tokens.ts";
import { createPool } from "../../shared/db/pool.ts";
import type { BulkSettings } from "../../shared/dead-letters/bulk-operations.ts";
import { sealKey } from "../../shared/dead-letters/seal.ts";
import { createTokenVerifier } from "../../shared/http/auth.ts";
import { type ConsumerTestBed, consumerTestBed } from "./consumer-harness.ts";

/** A response as the tests read it. */
export interface ApiResponse {
  readonly status: number;
  readonly contentType: string;
  readonly headers: Headers;
  // biome-ignore lint/suspicious/noExplicitAny: tests assert on response bodies of every route's shape
  readonly body: any;
}

export interface ApiTestBed extends ConsumerTestBed {
  readonly apiUrl: string;
  readonly issuer: LocalIssuer;
  readonly tokens: Record<"admin" | "read" | "replay" | "discard" | "none", string>;
  readonly opsPool: pg.Pool;
  /**
   * Another handler of the API wired as the bed's is (its ops pool, SQS, issuer and seal key),
   * with `overrides`: a function invoked directly, or an API restarted with a new key.
   */
  handler(overrides?: Partial<DeadLetterApiDeps>): DeadLetterApiHandler;
  /** Calls the API over HTTP. `token` undefined sends no Authorization header. */
  call(
    method: string,
    path: string,
    options?: { token?: string; body?: unknown; rawBody?: string; headers?: Record<string, string> },
  ): Promise<ApiResponse>;
}

/** The key the test beds sign cursors and plan tokens with. */
export const TEST_SEAL_KEY = sealKey(randomBytes(32));

export async function apiTestBed(
  options: { lockTimeoutMs?: number; bulk?: BulkSettings } = {},
): Promise<ApiTestBed> {
  const bed = await consumerTestBed();
  const issuer = await createLocalIssuer();
  const opsPool = createPool({
    connectionString: bed.db.url,
    role: "jobfence_ops",
    max: 8,
    lockTimeoutMs: options.lockTimeoutMs ?? 5000,
  });
  const handler = (overrides: Partial<DeadLetterApiDeps> = {}) =>
    createDeadLetterApi({
      pool: opsPool,
      sqs: bed.sqs,
      verifier: createTokenVerifier({ issuer: issuer.issuer, audience: issuer.audience, jwks: issuer.jwks }),
      sealKey: TEST_SEAL_KEY,
      ...(options.bulk ? { bulk: options.bulk } : {}),
      ...overrides,
    });
  const server = await serveHttpApi(handler());
  const tokens = await issuer.standardTokens();
  return {
    ...bed,
    apiUrl: server.url,
    issuer,
    tokens,
    opsPool,
    handler,
    async call(method, path, callOptions = {}) {
      const headers: Record<string, string> = { ...callOptions.headers };
      if (callOptions.token !== undefined) headers.authorization = `Bearer ${callOptions.token}`;
      let body: string | undefined = callOptions.rawBody;
      if (callOptions.body !== undefined) {
        body = JSON.stringify(callOptions.body);
        headers["content-type"] ??= "application/json";
      }
      const response = await fetch(`${server.url}${path}`, {
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
    },
    async close() {
      await server.close();
      await opsPool.end();
      await bed.close();
    },
  };
}
