/**
 * The dead-letter API's routes (docs/api.md): method, path, the permission each requires, what it
 * validates and returns. The router and the OpenAPI document are both built from this table.
 */
import type { APIGatewayProxyEventV2 } from "aws-lambda";
import { z } from "zod";
import { listOperations } from "../../shared/db/queries/bulk-operations.ts";
import { listDeadLetterGroups } from "../../shared/db/queries/dead-letter-groups.ts";
import { deadLetterStats } from "../../shared/db/queries/dead-letter-stats.ts";
import { getDeadLetter } from "../../shared/db/queries/get-dead-letter.ts";
import { listDeadLetters } from "../../shared/db/queries/list-dead-letters.ts";
import {
  API_LIMITS,
  bulkDiscardBodySchema,
  bulkReplayBodySchema,
  deadLetterIdSchema,
  deadLetterSchema,
  discardBodySchema,
  discardPlanBodySchema,
  discardResponseSchema,
  groupsQuerySchema,
  groupsResponseSchema,
  listQuerySchema,
  listResponseSchema,
  operationDetailSchema,
  operationSchema,
  operationStartSchema,
  operationsQuerySchema,
  operationsResponseSchema,
  planResponseSchema,
  replayBodySchema,
  replayPlanBodySchema,
  replayResponseSchema,
  statsResponseSchema,
} from "../../shared/dead-letters/api-schemas.ts";
import {
  type BulkDeps,
  cancelOperation,
  planOperation,
  readOperation,
  startOperation,
  toOperation,
} from "../../shared/dead-letters/bulk-operations.ts";
import { decodeCursor, encodeCursor } from "../../shared/dead-letters/cursor.ts";
import { discardDeadLetter, type ReplayDeps, replayDeadLetter } from "../../shared/dead-letters/replay.ts";
import { HttpProblem } from "../../shared/errors/http.ts";
import { PERMISSION, type Permission, type Principal, requirePermission } from "../../shared/http/auth.ts";
import { parseJsonBody, parsePathParameter, parseQuery } from "../../shared/http/request.ts";

/** What a route's operation receives. */
export interface OperationInput {
  readonly event: APIGatewayProxyEventV2;
  /** The verified caller. */
  readonly principal: Principal;
  /** The verified caller's `sub`. */
  readonly actor: string;
  readonly deps: RouteDeps;
}

/** What the routes run on. */
export type RouteDeps = ReplayDeps &
  BulkDeps & {
    /** The OpenAPI document as `npm run openapi` writes it (built by the caller: openapi.ts imports this table). */
    readonly openApiDocument: () => string;
  };

/** A success body already rendered as JSON, answered byte for byte. */
export class JsonText {
  readonly text: string;
  constructor(text: string) {
    this.text = text;
  }
}

/** A route: how it is reached, who may call it, what it takes and gives, and what it does. */
export interface RouteSpec {
  readonly method: "GET" | "POST";
  readonly path: string;
  readonly operationId: string;
  readonly summary: string;
  /** The permission it requires; with several, any one of them (the operation may then check more). */
  readonly permission: Permission | readonly Permission[];
  readonly query?: z.ZodType;
  readonly body?: z.ZodType;
  /** Whether the path has `{id}`. */
  readonly hasId?: boolean;
  /** Status and schema of the success response. */
  readonly success: { readonly status: 200 | 202; readonly schema: z.ZodType };
  /** The error statuses it can answer, besides 400, 401, 403 and 5xx. */
  readonly errors: readonly number[];
  readonly operate: (input: OperationInput) => Promise<unknown>;
}

const BASE = "/v1/core/dead-letters";

/** Where the API serves its own OpenAPI document. */
export const OPENAPI_PATH = "/v1/core/openapi.json";

/** The served document: an OpenAPI 3.1 object, described here only by what every one has. */
const openApiDocumentSchema = z
  .object({ openapi: z.string(), info: z.object({ title: z.string(), version: z.string() }).loose() })
  .loose()
  .describe("This document: the API's OpenAPI 3.1 description, as docs/openapi.json holds it.");

/** A body with no fields (cancel); an empty object is tolerated. */
export const emptyBody = z.object({}).strict().describe("No fields.");
const idOf = (event: APIGatewayProxyEventV2) => parsePathParameter(event, "id", deadLetterIdSchema);

/** The permissions a route accepts, as a list. */
export function routePermissions(route: RouteSpec): readonly Permission[] {
  return typeof route.permission === "string" ? [route.permission] : route.permission;
}

/** The permission acting on a bulk operation of `kind` takes. */
const KIND_PERMISSION = { replay: PERMISSION.replay, discard: PERMISSION.discard } as const;

export const ROUTES: readonly RouteSpec[] = [
  {
    method: "GET",
    path: BASE,
    operationId: "listDeadLetters",
    summary: "List dead letters, newest first, with filters and a keyset cursor",
    permission: PERMISSION.read,
    query: listQuerySchema,
    success: { status: 200, schema: listResponseSchema },
    errors: [],
    operate: async ({ event, deps }) => {
      const { limit, cursor, ...filter } = parseQuery(event, listQuerySchema);
      const page = await listDeadLetters(
        deps.pool,
        filter,
        limit,
        cursor ? decodeCursor(deps.sealKey, cursor, filter) : undefined,
      );
      return {
        items: page.items,
        next_cursor: page.next ? encodeCursor(deps.sealKey, page.next, filter) : null,
      };
    },
  },
  {
    method: "GET",
    path: `${BASE}/stats`,
    operationId: "deadLetterStats",
    summary:
      "Counts by consumer, status and error kind; the oldest pending dead letter and the biggest pending failure groups per consumer",
    permission: PERMISSION.read,
    success: { status: 200, schema: statsResponseSchema },
    errors: [],
    operate: async ({ event, deps }) => {
      if (Object.keys(event.queryStringParameters ?? {}).length > 0) {
        throw new HttpProblem("invalidRequest", "stats takes no query parameters");
      }
      return deadLetterStats(deps.pool, API_LIMITS.statsGroupsPerConsumer);
    },
  },
  {
    method: "GET",
    path: `${BASE}/groups`,
    operationId: "listFailureGroups",
    summary: "Failure groups (dead letters that failed the same way), biggest pending first",
    permission: PERMISSION.read,
    query: groupsQuerySchema,
    success: { status: 200, schema: groupsResponseSchema },
    errors: [],
    operate: async ({ event, deps }) => ({
      items: await listDeadLetterGroups(deps.pool, parseQuery(event, groupsQuerySchema)),
    }),
  },
  {
    method: "GET",
    path: `${BASE}/operations`,
    operationId: "listBulkOperations",
    summary: "Bulk operations, newest first",
    permission: PERMISSION.read,
    query: operationsQuerySchema,
    success: { status: 200, schema: operationsResponseSchema },
    errors: [],
    operate: async ({ event, deps }) => ({
      items: (await listOperations(deps.pool, parseQuery(event, operationsQuerySchema))).map(toOperation),
    }),
  },
  {
    method: "GET",
    path: `${BASE}/operations/{id}`,
    operationId: "getBulkOperation",
    summary: "One bulk operation: its progress, audit, and the dead letters it left pending",
    permission: PERMISSION.read,
    hasId: true,
    success: { status: 200, schema: operationDetailSchema },
    errors: [404],
    operate: async ({ event, deps }) => readOperation(deps.pool, idOf(event)),
  },
  {
    method: "POST",
    path: `${BASE}/operations/{id}/cancel`,
    operationId: "cancelBulkOperation",
    summary: "Stop a running bulk operation; what it already did stays done",
    permission: [PERMISSION.replay, PERMISSION.discard],
    hasId: true,
    body: emptyBody,
    success: { status: 200, schema: operationSchema },
    errors: [404, 409],
    operate: async ({ event, principal, actor, deps }) => {
      const id = idOf(event);
      parseJsonBody(event, emptyBody);
      return cancelOperation(deps.pool, id, actor, (kind) =>
        requirePermission(principal, KIND_PERMISSION[kind]),
      );
    },
  },
  {
    method: "GET",
    path: `${BASE}/{id}`,
    operationId: "getDeadLetter",
    summary: "One dead letter, whole, with its payload and message attributes",
    permission: PERMISSION.read,
    hasId: true,
    success: { status: 200, schema: deadLetterSchema },
    errors: [404],
    operate: async ({ event, deps }) => {
      const id = idOf(event);
      const row = await getDeadLetter(deps.pool, id);
      if (!row) throw new HttpProblem("notFound", `no dead letter has id ${id}`);
      return row;
    },
  },
  {
    method: "POST",
    path: `${BASE}/{id}/replay`,
    operationId: "replayDeadLetter",
    summary: "Send the stored envelope again to its queue (same job_id), or resolve as superseded",
    permission: PERMISSION.replay,
    hasId: true,
    body: replayBodySchema,
    success: { status: 200, schema: replayResponseSchema },
    errors: [404, 409, 502],
    operate: async ({ event, actor, deps }) => {
      const id = idOf(event);
      const { delay_seconds, force_outlived, reason } = parseJsonBody(event, replayBodySchema);
      return replayDeadLetter(deps, id, actor, {
        delaySeconds: delay_seconds,
        ...(force_outlived && reason !== undefined ? { forceOutlived: { reason } } : {}),
      });
    },
  },
  {
    method: "POST",
    path: `${BASE}/replay/plan`,
    operationId: "planBulkReplay",
    summary: "What a bulk replay of this filter would do, and the token that confirms it",
    permission: PERMISSION.replay,
    body: replayPlanBodySchema,
    success: { status: 200, schema: planResponseSchema },
    errors: [],
    operate: async ({ event, deps }) => {
      const { filter, delay_seconds, force_outlived } = parseJsonBody(event, replayPlanBodySchema);
      return planOperation(deps, "replay", filter, delay_seconds, force_outlived);
    },
  },
  {
    method: "POST",
    path: `${BASE}/replay`,
    operationId: "startBulkReplay",
    summary: "Start a paced bulk replay of the pending dead letters a filter matches",
    permission: PERMISSION.replay,
    body: bulkReplayBodySchema,
    success: { status: 202, schema: operationStartSchema },
    errors: [409, 428],
    operate: async ({ event, actor, deps }) =>
      startOperation(deps, { kind: "replay", ...parseJsonBody(event, bulkReplayBodySchema) }, actor),
  },
  {
    method: "POST",
    path: `${BASE}/discard/plan`,
    operationId: "planBulkDiscard",
    summary: "What a bulk discard of this filter would do, and the token that confirms it",
    permission: PERMISSION.discard,
    body: discardPlanBodySchema,
    success: { status: 200, schema: planResponseSchema },
    errors: [],
    operate: async ({ event, deps }) =>
      planOperation(deps, "discard", parseJsonBody(event, discardPlanBodySchema).filter),
  },
  {
    method: "POST",
    path: `${BASE}/discard`,
    operationId: "startBulkDiscard",
    summary: "Start a paced bulk discard, with a reason, of the pending dead letters a filter matches",
    permission: PERMISSION.discard,
    body: bulkDiscardBodySchema,
    success: { status: 202, schema: operationStartSchema },
    errors: [409, 428],
    operate: async ({ event, actor, deps }) =>
      startOperation(deps, { kind: "discard", ...parseJsonBody(event, bulkDiscardBodySchema) }, actor),
  },
  {
    method: "POST",
    path: `${BASE}/{id}/discard`,
    operationId: "discardDeadLetter",
    summary: "Resolve a dead letter as discarded, with a reason",
    permission: PERMISSION.discard,
    hasId: true,
    body: discardBodySchema,
    success: { status: 200, schema: discardResponseSchema },
    errors: [404, 409],
    operate: async ({ event, actor, deps }) => {
      const id = idOf(event);
      const { reason } = parseJsonBody(event, discardBodySchema);
      return discardDeadLetter(deps.pool, id, reason, actor);
    },
  },
  {
    method: "GET",
    path: OPENAPI_PATH,
    operationId: "getOpenApiDocument",
    summary: "This API's OpenAPI document, the version the server runs",
    permission: PERMISSION.read,
    success: { status: 200, schema: openApiDocumentSchema },
    errors: [],
    operate: async ({ event, deps }) => {
      if (Object.keys(event.queryStringParameters ?? {}).length > 0) {
        throw new HttpProblem("invalidRequest", "the document takes no query parameters");
      }
      return new JsonText(deps.openApiDocument());
    },
  },
];
