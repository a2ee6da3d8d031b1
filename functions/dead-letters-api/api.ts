/**
 * The dead-letter API as one Lambda handler for API Gateway HTTP API (payload format 2.0):
 * Middy's http-router dispatches to one small Middy handler per route, each authorizing its own
 * permission first; every error leaves as problem+json.
 */

import { Logger } from "@aws-lambda-powertools/logger";
import type { SQSClient } from "@aws-sdk/client-sqs";
import middy from "@middy/core";
import httpRouterHandler from "@middy/http-router";
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Context } from "aws-lambda";
import type pg from "pg";
import type { BulkSettings } from "../../shared/dead-letters/bulk-operations.ts";
import { IDEMPOTENCY, idempotencyKeyOf } from "../../shared/dead-letters/idempotency.ts";
import type { SealKey } from "../../shared/dead-letters/seal.ts";
import { reportJsonRuntime } from "../../shared/envelope/json-runtime-report.ts";
import { HttpProblem } from "../../shared/errors/http.ts";
import { requireAnyPermission, type TokenVerifier } from "../../shared/http/auth.ts";
import { problemDetails } from "../../shared/http/problem-details.ts";
import { headerOf } from "../../shared/http/request.ts";
import { answerOnce, routeRequestDigest } from "./idempotent.ts";
import { ROUTES, type RouteSpec, routePermissions } from "./routes.ts";

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

/** A route template (`/v1/core/dead-letters/{id}`) as a pattern for one concrete path. */
function pathPattern(template: string): RegExp {
  const escaped = template.replace(/[.*+?^$()|[\]\\]/g, "\\$&").replace(/\{[^/]+\}/g, "[^/]+");
  return new RegExp(`^${escaped}/?$`);
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

  const routeHandler = (route: RouteSpec) =>
    middy<APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2>(
      async (event: APIGatewayProxyEventV2) => {
        const principal = await deps.verifier(headerOf(event, "authorization"));
        requireAnyPermission(principal, routePermissions(route));
        const routeDeps = { ...deps, sealKey: await sealKey() };
        const run = async () => {
          const body = await route.operate({ event, principal, actor: principal.actor, deps: routeDeps });
          return { status: route.success.status, body: JSON.stringify(body) };
        };
        // Every POST may carry an Idempotency-Key: then it runs at most once per key and caller.
        const key = route.method === "POST" ? idempotencyKeyOf(event) : undefined;
        const answer =
          key === undefined
            ? { ...(await run()), replayed: false }
            : await answerOnce(
                deps.pool,
                {
                  actor: principal.actor,
                  key,
                  operation: route.operationId,
                  digest: routeRequestDigest(route, event),
                },
                run,
                logger,
              );
        return {
          statusCode: answer.status,
          headers: {
            "content-type": "application/json",
            ...(answer.replayed ? { [IDEMPOTENCY.replayedHeader.toLowerCase()]: "true" } : {}),
          },
          body: answer.body,
        };
      },
    );

  const router = httpRouterHandler({
    routes: ROUTES.map((route) => ({ method: route.method, path: route.path, handler: routeHandler(route) })),
    notFoundResponse: ({ method, path }) => {
      const allowed = ROUTES.filter((route) => pathPattern(route.path).test(path)).map(
        (route) => route.method,
      );
      if (allowed.length === 0) throw new HttpProblem("notFound", `no route ${path}`);
      throw new HttpProblem("methodNotAllowed", `${path} does not take ${method}`, {
        headers: { allow: [...new Set(allowed)].join(", ") },
      });
    },
  });
  return middy<APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2>(router).use(
    problemDetails({ logger }),
  ) as DeadLetterApiHandler;
}
