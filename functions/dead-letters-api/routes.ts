/**
 * The dead-letter API's routes (SPEC §6): method, path, the permission each requires, what it
 * validates and returns. The router and the OpenAPI document are both built from this table.
 */
import type { APIGatewayProxyEventV2 } from "aws-lambda";
import { z } from "zod";
import { deadLetterStats } from "../../shared/db/queries/dead-letter-stats.ts";
import { getDeadLetter } from "../../shared/db/queries/get-dead-letter.ts";
import { listDeadLetters } from "../../shared/db/queries/list-dead-letters.ts";
import {
  bulkReplayBodySchema,
  bulkReplayResponseSchema,
  deadLetterIdSchema,
  deadLetterSchema,
  discardBodySchema,
  discardResponseSchema,
  listQuerySchema,
  listResponseSchema,
  replayResponseSchema,
  statsResponseSchema,
} from "../../shared/dead-letters/api-schemas.ts";
import { decodeCursor, encodeCursor } from "../../shared/dead-letters/cursor.ts";
import {
  bulkReplay,
  discardDeadLetter,
  type ReplayDeps,
  replayDeadLetter,
} from "../../shared/dead-letters/replay.ts";
import { HttpProblem } from "../../shared/errors.ts";
import { PERMISSION, type Permission } from "../../shared/http/auth.ts";
import { parseJsonBody, parsePathParameter, parseQuery } from "../../shared/http/request.ts";

/** What a route's operation receives. */
export interface OperationInput {
  readonly event: APIGatewayProxyEventV2;
  /** The verified caller's `sub`. */
  readonly actor: string;
  readonly deps: ReplayDeps;
}

/** A route: how it is reached, who may call it, what it takes and gives, and what it does. */
export interface RouteSpec {
  readonly method: "GET" | "POST";
  readonly path: string;
  readonly operationId: string;
  readonly summary: string;
  readonly permission: Permission;
  readonly query?: z.ZodType;
  readonly body?: z.ZodType;
  /** Whether the path has `{id}`. */
  readonly hasId?: boolean;
  /** Status and schema of the success response. */
  readonly success: { readonly status: 200; readonly schema: z.ZodType };
  /** The error statuses it can answer, besides 400, 401, 403 and 5xx. */
  readonly errors: readonly number[];
  readonly operate: (input: OperationInput) => Promise<unknown>;
}

const BASE = "/v1/core/dead-letters";

/** A single replay takes no body; an empty object is tolerated. */
export const emptyBody = z.object({}).strict().describe("No fields: the dead letter is replayed as stored.");
const idOf = (event: APIGatewayProxyEventV2) => parsePathParameter(event, "id", deadLetterIdSchema);

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
        cursor ? decodeCursor(cursor, filter, "list") : undefined,
      );
      return { items: page.items, next_cursor: page.next ? encodeCursor(page.next, filter, "list") : null };
    },
  },
  {
    method: "GET",
    path: `${BASE}/stats`,
    operationId: "deadLetterStats",
    summary: "Counts by consumer, status and error kind; the oldest pending dead letter per consumer",
    permission: PERMISSION.read,
    success: { status: 200, schema: statsResponseSchema },
    errors: [],
    operate: async ({ event, deps }) => {
      if (Object.keys(event.queryStringParameters ?? {}).length > 0) {
        throw new HttpProblem("invalidRequest", "stats takes no query parameters");
      }
      return deadLetterStats(deps.pool);
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
    body: emptyBody,
    success: { status: 200, schema: replayResponseSchema },
    errors: [404, 409, 502],
    operate: async ({ event, actor, deps }) => {
      const id = idOf(event);
      parseJsonBody(event, emptyBody);
      return replayDeadLetter(deps, id, actor);
    },
  },
  {
    method: "POST",
    path: `${BASE}/replay`,
    operationId: "bulkReplayDeadLetters",
    summary: "Replay the pending dead letters a filter matches, a bounded number per call",
    permission: PERMISSION.replay,
    body: bulkReplayBodySchema,
    success: { status: 200, schema: bulkReplayResponseSchema },
    errors: [],
    operate: async ({ event, actor, deps }) => {
      const request = parseJsonBody(event, bulkReplayBodySchema);
      if (!request.all && Object.values(request.filter).every((v) => v === undefined)) {
        throw new HttpProblem(
          "invalidRequest",
          'this filter matches every pending dead letter; narrow it, or send "all": true to mean it',
        );
      }
      return bulkReplay(deps, request, actor);
    },
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
];
