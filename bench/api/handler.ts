/**
 * The dead-letter API as bench/api.ts calls it: the real handler (createDeadLetterApi: Middy router,
 * JWT verification, zod validation, queries, problem+json middleware) in process, its pool logged
 * in as jobfence_ops, SQS SendMessage stubbed; and a second instance whose connections record
 * every statement they run, for EXPLAIN. Events are API Gateway v2's, as local/http-adapter.ts's
 * toHttpApiEvent builds them.
 */
import { randomBytes } from "node:crypto";
import { performance } from "node:perf_hooks";
import { SQSClient } from "@aws-sdk/client-sqs";
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2 } from "aws-lambda";
import type pg from "pg";
import { createDeadLetterApi, type DeadLetterApiHandler } from "../../functions/dead-letters-api/api.ts";
import { LOCAL_ACCOUNT, LOCAL_REGION } from "../../local/aws-clients.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import { createLocalIssuer } from "../../local/tokens.ts";
import { createPool } from "../../shared/db/pool.ts";
import { sealKey } from "../../shared/dead-letters/seal.ts";
import { createTokenVerifier } from "../../shared/http/auth.ts";
import { at, type Cleanups } from "../lib/support.ts";

export const BASE = "/v1/core/dead-letters";

/** A statement an instrumented connection ran. */
export interface CapturedStatement {
  readonly text: string;
  readonly values: unknown[];
}

/**
 * Records every statement its connections run: each new client's `query` is wrapped so that text
 * and parameters are logged, then delegated unchanged (callbacks, promises and all).
 */
function recordStatements(pool: pg.Pool, log: CapturedStatement[]): void {
  pool.on("connect", (client: pg.PoolClient) => {
    const original = client.query;
    const recording = function (this: pg.PoolClient, ...args: unknown[]): unknown {
      const [first, second] = args;
      if (typeof first === "string") {
        log.push({ text: first, values: Array.isArray(second) ? second : [] });
      } else if (typeof first === "object" && first !== null && "text" in first) {
        const config = first as { text: string; values?: unknown[] };
        log.push({ text: config.text, values: Array.isArray(second) ? second : (config.values ?? []) });
      }
      return Reflect.apply(original, this, args);
    };
    client.query = recording as unknown as typeof client.query;
  });
}

/** An API Gateway v2 event for `method path`, with a bearer token. */
export function apiEvent(
  method: "GET" | "POST",
  path: string,
  token: string,
  options: { query?: Record<string, string>; body?: unknown } = {},
): APIGatewayProxyEventV2 {
  const headers: Record<string, string> = {
    authorization: `Bearer ${token}`,
    host: "bench.local",
    "user-agent": "jobfence-bench",
  };
  const query = options.query ?? {};
  let body: string | undefined;
  if (options.body !== undefined) {
    body = JSON.stringify(options.body);
    headers["content-type"] = "application/json";
  }
  const now = new Date();
  return {
    version: "2.0",
    routeKey: "$default",
    rawPath: path,
    rawQueryString: new URLSearchParams(query).toString(),
    headers,
    ...(Object.keys(query).length > 0 ? { queryStringParameters: query } : {}),
    requestContext: {
      accountId: LOCAL_ACCOUNT,
      apiId: "bench",
      domainName: "bench.local",
      domainPrefix: "bench",
      http: { method, path, protocol: "HTTP/1.1", sourceIp: "127.0.0.1", userAgent: "jobfence-bench" },
      requestId: randomBytes(8).toString("hex"),
      routeKey: "$default",
      stage: "$default",
      time: now.toUTCString(),
      timeEpoch: now.getTime(),
    },
    ...(body !== undefined ? { body } : {}),
    isBase64Encoded: false,
  };
}

/** One call of a handler, timed: the handler alone, from event to response. */
export async function invoke(
  handler: DeadLetterApiHandler,
  event: APIGatewayProxyEventV2,
): Promise<{ response: APIGatewayProxyStructuredResultV2; ms: number }> {
  const context = lambdaContext("dead-letters-api");
  const start = performance.now();
  const response = await handler(event, context);
  return { response, ms: performance.now() - start };
}

export interface ApiUnderTest {
  /** The handler timed. */
  readonly api: DeadLetterApiHandler;
  /** The same handler on connections that record what they run (for EXPLAIN; never timed). */
  readonly captureApi: DeadLetterApiHandler;
  /** What captureApi's connections ran, in order. */
  readonly captured: CapturedStatement[];
  readonly tokens: { read: string; replay: string; discard: string };
  /** SendMessage calls so far (stubbed: each resolves at once, sending nothing). */
  sqsSends(): number;
}

/** Starts both handlers on `url`; their pools are ended by `cleanups`. */
export async function startApi(url: string, cleanups: Cleanups): Promise<ApiUnderTest> {
  const issuer = await createLocalIssuer();
  const verifier = createTokenVerifier({
    issuer: issuer.issuer,
    audience: issuer.audience,
    jwks: issuer.jwks,
  });
  const tokens = await issuer.standardTokens();
  let sends = 0;
  const sqs = new SQSClient({
    region: LOCAL_REGION,
    credentials: { accessKeyId: "bench", secretAccessKey: "bench" },
  });
  // The SQS call is excluded from the figures: SendMessage resolves at once, sending nothing.
  sqs.send = (async () => {
    sends++;
    return { MessageId: "bench", $metadata: {} };
  }) as unknown as SQSClient["send"];

  // Signs list cursors and plan tokens; both APIs share it, so a token one issues the other reads.
  const key = sealKey(randomBytes(32));
  const pool = createPool({
    connectionString: url,
    role: "jobfence_ops",
    max: 4,
    applicationName: "jobfence-bench-api",
  });
  cleanups.push(() => pool.end());
  const role = at((await pool.query<{ role: string }>("SELECT current_user AS role")).rows, 0).role;
  const api = createDeadLetterApi({ pool, sqs, verifier, sealKey: key });

  const captured: CapturedStatement[] = [];
  const capturePool = createPool({
    connectionString: url,
    role: "jobfence_ops",
    max: 2,
    applicationName: "jobfence-bench-explain",
  });
  cleanups.push(() => capturePool.end());
  recordStatements(capturePool, captured);
  const captureApi = createDeadLetterApi({ pool: capturePool, sqs, verifier, sealKey: key });

  console.log(`API: createDeadLetterApi in process, pool role ${role}, SQS send stubbed`);
  return { api, captureApi, captured, tokens, sqsSends: () => sends };
}
