/**
 * The dead-letter API as one Lambda handler for API Gateway HTTP API (payload format 2.0), one Middy
 * pipeline: the request is resolved to a route from its own path and method (resolve.ts: a literal
 * segment beats `{id}`, a 405 names the methods the path takes, HEAD is GET without its body), then
 * the bearer token is verified and the route's permission checked before the route runs, whatever
 * API Gateway route brought the request; every error leaves as problem+json.
 */

import { Logger } from "@aws-lambda-powertools/logger";
import type { SQSClient } from "@aws-sdk/client-sqs";
import middy, { type MiddlewareObj } from "@middy/core";
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Context } from "aws-lambda";
import type pg from "pg";
import type { BulkSettings } from "../../shared/dead-letters/bulk-operations.ts";
import { IDEMPOTENCY, idempotencyKeyOf } from "../../shared/dead-letters/idempotency.ts";
import type { SealKey } from "../../shared/dead-letters/seal.ts";
import { reportJsonRuntime } from "../../shared/envelope/json-runtime-report.ts";
import { HttpProblem } from "../../shared/errors/http.ts";
import { requireAnyPermission, type TokenVerifier } from "../../shared/http/auth.ts";
import { problemDetails } from "../../shared/http/problem-details.ts";
import { headerOf, refuseAnyQuery } from "../../shared/http/request.ts";
import { answerOnce, routeRequestDigest } from "./idempotent.ts";
import { renderOpenApiDocument } from "./openapi.ts";
import { createResolver } from "./resolve.ts";
import { JsonText, routePermissions } from "./routes.ts";

/** What the API runs on. */
export interface DeadLetterApiDeps {
  /** Connected as a login granted jobfence_ops. */
  readonly pool: pg.Pool;
  readonly sqs: SQSClient;
  readonly verifier: TokenVerifier;
  /**
   * Signs list cursors and bulk-operation plan tokens; or how to get it (from Secrets Manager),
   * asked at the first request and again after a failure, so init opens no connection.
   */
  readonly sealKey: SealKey | (() => Promise<SealKey>);
  /** @default DEFAULT_BULK_SETTINGS */
  readonly bulk?: BulkSettings;
  /** @default Powertools Logger, service "dead-letters-api" */
  readonly logger?: Logger;
}

/** The API Gateway v2 handler. */
export type DeadLetterApiHandler = (
  event: APIGatewayProxyEventV2,
  context: Context,
) => Promise<APIGatewayProxyStructuredResultV2>;

/** The method a request was sent with (case matters: `get` is not GET). */
const methodOf = (event: APIGatewayProxyEventV2) => event.requestContext.http.method;

/**
 * A HEAD is answered as its GET would be, same status and headers, without the body: errors too
 * (after the problem middleware has made the response, which is why it is used before it).
 */
function headWithoutBody(): MiddlewareObj<APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2> {
  const strip = (request: {
    event: APIGatewayProxyEventV2;
    response: APIGatewayProxyStructuredResultV2 | null | undefined;
  }): void => {
    if (methodOf(request.event) !== "HEAD" || !request.response) return;
    const { body: _, isBase64Encoded: _b, ...rest } = request.response;
    request.response = rest;
  };
  return { name: "jobfence-head-without-body", after: strip, onError: strip };
}

export function createDeadLetterApi(deps: DeadLetterApiDeps): DeadLetterApiHandler {
  const logger = deps.logger ?? new Logger({ serviceName: "dead-letters-api" });
  reportJsonRuntime({ logger });
  const source = deps.sealKey;
  let key: SealKey | undefined = typeof source === "function" ? undefined : source;
  const sealKey = async (): Promise<SealKey> => {
    key ??= await (source as () => Promise<SealKey>)();
    return key;
  };

  // Built at the first request for it, once per cold start: other requests never pay for it.
  let openApiDocument: string | undefined;
  const openApi = () => {
    openApiDocument ??= renderOpenApiDocument();
    return openApiDocument;
  };
  const resolve = createResolver();

  const handle = async (event: APIGatewayProxyEventV2): Promise<APIGatewayProxyStructuredResultV2> => {
    const path = event.requestContext.http.path ?? event.rawPath;
    const method = methodOf(event);
    const found = resolve(method, path);
    if (found.kind === "notFound") throw new HttpProblem("notFound", `no route ${path}`);
    if (found.kind === "methodNotAllowed") {
      throw new HttpProblem("methodNotAllowed", `${found.path} does not take ${method}`, {
        headers: { allow: found.allow.join(", ") },
      });
    }
    // Only an operation needs the token: 404 and 405 say nothing the route table does not, and in
    // AWS they come from routes that carry no authorizer (resolve.ts, gatewayRoutes).
    const principal = await deps.verifier(headerOf(event, "authorization"));
    const { route } = found;
    requireAnyPermission(principal, routePermissions(route));
    const routeDeps = { ...deps, sealKey: await sealKey(), openApiDocument: openApi };
    // The resolver's parameters, not API Gateway's: a fallback route carries none.
    const routed = { ...event, pathParameters: { ...found.pathParameters } };
    // A route without a query takes none: a filter sent in the query of a bulk start must not be
    // dropped silently (the route validates its own query when it has one).
    if (route.query === undefined) refuseAnyQuery(routed);
    const run = async () => {
      const body = await route.operate({ event: routed, principal, actor: principal.actor, deps: routeDeps });
      return {
        status: route.success.status,
        body: body instanceof JsonText ? body.text : JSON.stringify(body),
      };
    };
    // Every POST may carry an Idempotency-Key: then it runs at most once per key and caller.
    const idempotencyKey = route.method === "POST" ? idempotencyKeyOf(routed) : undefined;
    const answer =
      idempotencyKey === undefined
        ? { ...(await run()), replayed: false }
        : await answerOnce(
            deps.pool,
            {
              actor: principal.actor,
              key: idempotencyKey,
              operation: route.operationId,
              digest: routeRequestDigest(route, routed),
            },
            run,
            logger,
          );
    if (answer.replayed) route.authorizeAnswer?.(principal, JSON.parse(answer.body));
    return {
      statusCode: answer.status,
      headers: {
        "content-type": "application/json",
        ...(answer.replayed ? { [IDEMPOTENCY.replayedHeader.toLowerCase()]: "true" } : {}),
      },
      body: answer.body,
    };
  };

  return middy<APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2>(handle)
    .use(headWithoutBody())
    .use(problemDetails({ logger })) as DeadLetterApiHandler;
}
