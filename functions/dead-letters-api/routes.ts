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

/**
 * The groups the OpenAPI document lists operations under, each with what it covers. A route names
 * one; the document declares those its routes use, in this order.
 */
export const ROUTE_TAGS = {
  "Dead letters":
    "The messages consumers gave up on: list, count and group them, read one whole, and resolve one " +
    "at a time by replaying it to its queue or discarding it with a reason. A dead letter leaves " +
    "`pending_review` exactly once, and nothing is ever deleted.",
  "Bulk operations":
    "Replaying or discarding every pending dead letter a filter matches, as a paced, audited job the " +
    "server runs rather than a loop on a client: plan it, start it (with the plan's token when the " +
    "set is large), watch its progress, cancel it.",
  Document: "This API's OpenAPI document, served by the deployment it describes.",
} as const;

/** One of {@link ROUTE_TAGS}. */
export type RouteTag = keyof typeof ROUTE_TAGS;

/** A route: how it is reached, who may call it, what it takes and gives, and what it does. */
export interface RouteSpec {
  readonly method: "GET" | "POST";
  readonly path: string;
  readonly operationId: string;
  readonly summary: string;
  /** The operation in a paragraph: what it does, what it refuses, what it changes (docs/api.md has more). */
  readonly description: string;
  /** The group the document lists it under. */
  readonly tag: RouteTag;
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
  /**
   * A check `operate` makes on what it found (cancel: the permission of the operation's kind), made
   * again before a stored answer is given to a repeat under the same Idempotency-Key: the caller
   * is the same `sub`, but its token now may hold less.
   */
  readonly authorizeAnswer?: (principal: Principal, answer: unknown) => void;
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
    tag: "Dead letters",
    description:
      "Dead letters newest first (by `created_at`, then `id`), a page of at most `limit`, each with " +
      "every field but `body`, `payload` and `message_attributes` (read one by id for those). Every " +
      "filter is an exact match except `message` (a case-insensitive substring of the last error's " +
      "message) and the `created_after` / `created_before` range. " +
      "Paging is by keyset: send `next_cursor` back unchanged, with the same filters, for the next " +
      "page; a cursor this API did not issue, or sent with other filters, is refused with 400 " +
      "rather than paging something else. Changes nothing.",
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
    tag: "Dead letters",
    description:
      "Counts of dead letters by consumer, status and error kind; each consumer's oldest pending " +
      "dead letter; and each consumer's biggest failure groups with dead letters pending (at most " +
      "20 a consumer). All three come from summary tables the database keeps current as dead " +
      "letters are written and resolved, so the answer costs the same however many there are. Takes " +
      "no query parameters: any is refused with 400. Changes nothing.",
    permission: PERMISSION.read,
    success: { status: 200, schema: statsResponseSchema },
    errors: [],
    operate: async ({ deps }) => {
      return deadLetterStats(deps.pool, API_LIMITS.statsGroupsPerConsumer);
    },
  },
  {
    method: "GET",
    path: `${BASE}/groups`,
    operationId: "listFailureGroups",
    summary: "Failure groups (dead letters that failed the same way), biggest pending first",
    tag: "Dead letters",
    description:
      "Failure groups: a consumer's dead letters whose error fingerprint is the same (the error " +
      "class, the message with what varies per job, such as ids and numbers, normalised away, and " +
      "the first stack frame of the consumer's own code). Biggest pending first, then biggest " +
      "overall; a group with nothing pending is listed only with `include_resolved=true`. A group's " +
      "`group` is a filter of the list, of a plan and of a bulk operation. Changes nothing.",
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
    tag: "Bulk operations",
    description:
      "Bulk operations newest first, optionally only those of one `status` or `kind`: each with its " +
      "filter, rate, progress counters, who submitted it and who cancelled it. Operations are kept " +
      "for good, so this is also their audit trail. Changes nothing.",
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
    tag: "Bulk operations",
    description:
      "One bulk operation: its status (`running`, `completed`, `cancelled` or `failed`), its " +
      "progress (`processed`, the sum of replayed, superseded, discarded, conflicts and failed, " +
      "against `planned`), who submitted and who cancelled it, the last error of a chunk that " +
      "failed, and up to 100 dead letters it left pending with why (`skipped`). An id that is not a " +
      "UUID is refused with 400; a UUID no operation has is 404. Changes nothing.",
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
    tag: "Bulk operations",
    description:
      "Stops a running bulk operation and records the caller's `sub` as `cancelled_by`. It waits " +
      "for a chunk in flight, so once it answers no further chunk runs; what already ran stays " +
      "done. It needs the permission of the operation's kind (replay or discard): a token holding " +
      "only the other is refused with 403. The body is empty or `{}`. An operation that has " +
      "finished is 409 `operation-finished`; a chunk that outlasts the API's lock wait makes the " +
      "answer 503, and asking again is safe.",
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
    authorizeAnswer: (principal, answer) =>
      requirePermission(principal, KIND_PERMISSION[(answer as { kind: keyof typeof KIND_PERMISSION }).kind]),
  },
  {
    method: "GET",
    path: `${BASE}/{id}`,
    operationId: "getDeadLetter",
    summary: "One dead letter, whole, with its payload and message attributes",
    tag: "Dead letters",
    description:
      "One dead letter, whole: besides the list's fields, the message body exactly as received " +
      "(what a replay sends), the envelope as a JSON object when PostgreSQL's `jsonb` accepts the " +
      "body, the SQS message attributes, the failed runs that led to it (`attempt_history`) and the " +
      "steps its job recorded (`steps`). An id that is not a UUID is refused with 400; a UUID no " +
      "dead letter has is 404. Changes nothing.",
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
    tag: "Dead letters",
    description:
      "In one database transaction: locks the pending dead letter and looks up its job's fence. " +
      "With no fence, sends the stored body unchanged to its queue (after " +
      "`delay_seconds`, on standard queues only) and resolves it as `replayed`; with a fence of the " +
      "same job, sends nothing and resolves it as `superseded`. It sends nothing, leaves the dead " +
      "letter pending and answers 409 with a `reason` when the fence is another job's " +
      "(`job-conflict`), the row names a queue not registered for its consumer (`foreign-queue`), a " +
      "follow-up's provenance fails (`unproven-follow-up`), or an `outlived` copy is replayed " +
      "without `force_outlived` and a `reason`. A dead letter no longer pending is 409 " +
      "`not-pending`; SQS refusing the send is 502, with nothing changed. The caller's `sub` is " +
      "recorded as `resolved_by`.",
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
    tag: "Bulk operations",
    description:
      "What a bulk replay of this filter would do, changing nothing: the pending dead letters it " +
      "matches now and all those pending, how many would be sent, superseded, left pending as " +
      "conflicts or as `outlived`, how many of those sent carry no readable job, the ten oldest as " +
      "a sample, and a token (valid 15 minutes; `null` when nothing matches) binding the kind, the " +
      "filter and the matched set itself. The filter takes the list's fields but `status`. " +
      "`delay_seconds` is checked against the queues the set names (a FIFO queue takes no delay: " +
      "400).",
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
    tag: "Bulk operations",
    description:
      "Starts a bulk replay of the pending dead letters the filter matches and answers 202 with the " +
      "operation to watch; the caller's `sub` is its `submitted_by`. The bulk-operations worker " +
      "runs it in chunks of about one second's worth of `rate_per_second`, each chunk one " +
      "transaction deciding each row as a single replay does. A set larger than the confirmation " +
      "threshold, or every pending dead letter, needs its plan's `token`: without it 428; an " +
      "expired token is 409 `plan-expired`, a set changed since the plan 409 `plan-stale`, a token " +
      "already used 409 `plan-used`, and a token for another filter or kind 400. A filter matching " +
      "nothing is 409 `nothing-matched`.",
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
    tag: "Bulk operations",
    description:
      "What a bulk discard of this filter would do, changing nothing: the pending dead letters it " +
      "matches now and all those pending, the ten oldest as a sample, and a token (valid 15 " +
      "minutes; `null` when nothing matches) binding the kind, the filter and the matched set " +
      "itself. The filter takes the list's fields but `status`.",
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
    tag: "Bulk operations",
    description:
      "Starts a bulk discard of the pending dead letters the filter matches and answers 202 with " +
      "the operation to watch: each is resolved as `discarded` with the `reason` (required) as its " +
      "`discard_reason`, and the caller's `sub` is the operation's `submitted_by`. It runs at " +
      "`rate_per_second` and confirms as a bulk replay does: a large set needs its plan's `token` " +
      "(428 without it; 409 `plan-expired`, `plan-stale` or `plan-used`; 400 for another filter's), " +
      "and a filter matching nothing is 409 `nothing-matched`.",
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
    tag: "Dead letters",
    description:
      "Resolves a pending dead letter as `discarded` without sending anything, storing the `reason` " +
      "(required; 1 to 2000 characters once leading and trailing whitespace is trimmed) as its " +
      "`discard_reason` and the caller's `sub` as `resolved_by`. A dead letter no longer pending " +
      "(replayed, discarded or superseded, perhaps by a concurrent call) is 409 `not-pending`; a " +
      "UUID no dead letter has is 404.",
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
    description:
      "The OpenAPI 3.1 document of this API as the deployment answering runs it, byte for byte the " +
      "`docs/openapi.json` of its release, so a client can fetch the contract of the server it talks " +
      "to. Takes no query parameters (400).",
    tag: "Document",
    permission: PERMISSION.read,
    success: { status: 200, schema: openApiDocumentSchema },
    errors: [],
    operate: async ({ deps }) => {
      return new JsonText(deps.openApiDocument());
    },
  },
];
