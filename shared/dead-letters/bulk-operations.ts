/**
 * Bulk operations as the API offers them (docs/design.md §6.3): plan (count, sample, confirmation token),
 * start (a durable operation the worker runs, see ./bulk-worker.ts), read, cancel.
 *
 * The guard: starting an operation over more than `confirmAbove` rows, or over every pending dead
 * letter, needs the plan's token, and the token only starts the set it was issued for. It is a
 * property of the matched set, not of the filter's spelling, so no filter steps around it.
 */

import { createHash } from "node:crypto";
import type pg from "pg";
import type { z } from "zod";
import {
  cancelOperation as cancelOperationRow,
  getOperation,
  insertOperation,
  insertOperationItems,
  type MatchedSet,
  matchedSet,
  type OperationRow,
  operationSkips,
  pendingAfter,
  pendingSample,
  pendingTotal,
  runningOperationId,
} from "../db/queries/bulk-operations.ts";
import { inTransaction } from "../db/transaction.ts";
import {
  ConfirmationRequiredError,
  NothingMatchedError,
  OperationFinishedError,
  OperationNotFoundError,
  OperationRunningError,
  PlanStaleError,
  PlanUsedError,
} from "../errors/bulk-operation.ts";
import { HttpProblem } from "../errors/http.ts";
import {
  API_LIMITS,
  type BulkDiscardRequest,
  type BulkFilter,
  type BulkReplayRequest,
  type operationDetailSchema,
  type operationSchema,
  type operationStartSchema,
  type planResponseSchema,
} from "./api-schemas.ts";
import { confirmationRequired, issuePlanToken, readPlanToken } from "./plan-token.ts";
import { replayPlanNote } from "./replay-note.ts";
import { derivedSecret, type SealKey } from "./seal.ts";

/** How the API guards bulk operations. */
export interface BulkSettings {
  /** An operation over more rows than this needs its plan's token. @default 100 */
  readonly confirmAbove: number;
}

export const DEFAULT_BULK_SETTINGS: BulkSettings = Object.freeze({ confirmAbove: 100 });

/** What planning and starting need. */
export interface BulkDeps {
  readonly pool: pg.Pool;
  readonly sealKey: SealKey;
  readonly bulk?: BulkSettings;
  /** @default Date.now */
  readonly now?: () => number;
}

export type Plan = z.output<typeof planResponseSchema>;
export type Operation = z.output<typeof operationSchema>;
export type StartedOperation = z.output<typeof operationStartSchema>;
export type OperationDetail = z.output<typeof operationDetailSchema>;

/** Kinds of bulk operation. */
export type BulkKind = "replay" | "discard";

/** The key of the matched set's checksum: the deployment's, so no writer of dead letters can forge one. */
const checksumKey = (deps: BulkDeps) => derivedSecret(deps.sealKey, "jobfence:bulk-set-checksum:v1");

/** A replay with a delay cannot reach a FIFO queue: SQS takes no per-message delay there. */
function refuseFifoDelay(set: MatchedSet, delaySeconds: number): void {
  if (delaySeconds > 0 && set.anyFifo) {
    throw new HttpProblem(
      "invalidRequest",
      "some matched dead letters belong to FIFO queues, which take no per-message delay; narrow the filter to standard queues or replay without delay_seconds",
    );
  }
}

/** The plan of a bulk operation: what it would act on now, and the token that confirms it. */
export async function planOperation(
  deps: BulkDeps,
  kind: BulkKind,
  filter: BulkFilter,
  delaySeconds = 0,
  forceOutlived = false,
): Promise<Plan> {
  const settings = deps.bulk ?? DEFAULT_BULK_SETTINGS;
  const now = (deps.now ?? Date.now)();
  // One snapshot: the count, the checksum, the sample and the total describe the same moment.
  const { set, total, sample } = await inTransaction(deps.pool, async (tx) => {
    await tx.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY");
    return {
      set: await matchedSet(tx, filter, checksumKey(deps)),
      total: await pendingTotal(tx),
      sample: await pendingSample(tx, filter, API_LIMITS.planSample),
    };
  });
  if (kind === "replay") refuseFifoDelay(set, delaySeconds);
  // Outlived rows are skipped unless the replay forces them.
  const wouldSend = set.matched - set.superseded - set.conflicts - (forceOutlived ? 0 : set.outlived);
  const issued = set.bound
    ? issuePlanToken(
        deps.sealKey,
        { kind, matched: set.matched, checksum: set.checksum, bound: set.bound },
        filter,
        now,
      )
    : undefined;
  return {
    kind,
    matched: set.matched,
    pending_total: total,
    ...(kind === "replay"
      ? {
          would_send: wouldSend,
          superseded: set.superseded,
          conflicts: set.conflicts,
          outlived: set.outlived,
          unreadable: set.unreadable,
          ...(set.unreadable > 0 ? { note: replayPlanNote(set.unreadable, wouldSend) } : {}),
        }
      : {}),
    sample: sample as Plan["sample"],
    confirmation_required: set.matched > 0 && confirmationRequired(set.matched, total, settings.confirmAbove),
    token: issued?.token ?? null,
    token_expires_at: issued?.expiresAt ?? null,
  };
}

/**
 * Starts a bulk replay or discard by `actor`; the worker runs it. With a plan's token it acts on the
 * planned rows only: dead letters recorded since that match the filter are counted
 * (`newer_not_included`) and left pending, never added to a set the operator did not see. While an
 * operation of the same kind and filter runs, the start is refused ({@link OperationRunningError},
 * naming it): the database's unique index decides, so starts sent at once make one operation.
 */
export async function startOperation(
  deps: BulkDeps,
  request: StartRequest,
  actor: string,
): Promise<StartedOperation> {
  // A start refused because an operation of its kind and filter runs names that operation; one
  // that finished between the refusal and the look-up leaves room for this start: try it again.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(deps, request, actor);
    } catch (error) {
      if (!(error instanceof RunningDuplicate)) throw error;
      const running = await runningOperationId(deps.pool, request.kind, request.filter);
      if (running !== undefined || attempt >= START_ATTEMPTS) throw new OperationRunningError(running);
    }
  }
}

/** What a start asks. */
export type StartRequest =
  | ({ kind: "replay" } & Omit<BulkReplayRequest, "force_outlived"> & { force_outlived?: boolean })
  | ({ kind: "discard" } & BulkDiscardRequest);

/** Starts tried while the operation the index named keeps finishing before it can be looked up. */
const START_ATTEMPTS = 3;

/** The unique index refused the insert: an operation of this kind and filter is running. */
class RunningDuplicate extends Error {}

async function startOnce(deps: BulkDeps, request: StartRequest, actor: string): Promise<StartedOperation> {
  const settings = deps.bulk ?? DEFAULT_BULK_SETTINGS;
  const now = (deps.now ?? Date.now)();
  const { kind, filter, token } = request;
  const planned = token ? readPlanToken(deps.sealKey, token, kind, filter, now) : undefined;
  const delaySeconds = request.kind === "replay" ? request.delay_seconds : 0;
  const row = await inTransaction(deps.pool, async (tx) => {
    // One snapshot for the count, the total and the set written out: what was checked is what runs.
    await tx.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
    // Re-counted up to the plan's last row: rows recorded since are not part of what was confirmed.
    const set = await matchedSet(tx, filter, checksumKey(deps), planned?.bound);
    if (planned) {
      if (set.matched !== planned.matched || set.checksum !== planned.checksum) {
        throw new PlanStaleError(planned.matched, set.matched);
      }
    } else {
      if (set.matched === 0) throw new NothingMatchedError("the filter matches no pending dead letter");
      const total = await pendingTotal(tx);
      if (confirmationRequired(set.matched, total, settings.confirmAbove)) {
        throw new ConfirmationRequiredError(set.matched, total, settings.confirmAbove);
      }
    }
    if (kind === "replay") refuseFifoDelay(set, delaySeconds);
    const bound = set.bound as NonNullable<MatchedSet["bound"]>;
    const operation = await insertOperation(tx, {
      kind,
      filter,
      // A discard's reason, or a forced replay's: the operator's word for sending outlived rows.
      reason: request.kind === "discard" || request.force_outlived ? (request.reason ?? null) : null,
      forceOutlived: request.kind === "replay" && request.force_outlived === true,
      delaySeconds,
      ratePerSecond: request.rate_per_second,
      planned: set.matched,
      planTokenDigest: token ? createHash("sha256").update(token).digest() : null,
      submittedBy: actor,
    }).catch((error: unknown) => {
      // The unique digest: this plan already started an operation.
      const constraint = (error as { constraint?: string }).constraint;
      if (constraint === "bulk_operations_one_per_plan") {
        throw new PlanUsedError("this plan's token has already started an operation; plan again for another");
      }
      // Migration 0028: one running operation per kind and filter digest.
      if (constraint === "bulk_operations_one_running_per_filter") throw new RunningDuplicate();
      throw error;
    });
    const written = await insertOperationItems(tx, operation.id, filter, bound);
    if (written !== set.matched) throw new PlanStaleError(set.matched, written);
    // In the same snapshot: what the plan's bound leaves out now.
    return { operation, newer: planned ? await pendingAfter(tx, filter, bound) : 0 };
  });
  return { ...toOperation(row.operation), newer_not_included: row.newer };
}

/** One operation with the rows it left pending (the first 100). */
export async function readOperation(pool: pg.Pool, id: string): Promise<OperationDetail> {
  const row = await getOperation(pool, id);
  if (!row) throw new OperationNotFoundError(`no bulk operation has id ${id}`);
  return { ...toOperation(row), skipped: await operationSkips(pool, id, 100) };
}

/** Cancels a running operation by `actor`; `mayCancel` checks the caller's permission for its kind. */
export async function cancelOperation(
  pool: pg.Pool,
  id: string,
  actor: string,
  mayCancel: (kind: BulkKind) => void,
): Promise<Operation> {
  const current = await getOperation(pool, id);
  if (!current) throw new OperationNotFoundError(`no bulk operation has id ${id}`);
  mayCancel(current.kind);
  const cancelled = await cancelOperationRow(pool, id, actor);
  if (cancelled) return toOperation(cancelled);
  const now = await getOperation(pool, id);
  throw new OperationFinishedError(id, now?.status ?? current.status);
}

/** An operation as the API returns it: its definition, progress and audit, not the worker's bookkeeping. */
export function toOperation(row: OperationRow): Operation {
  return {
    id: row.id,
    kind: row.kind,
    status: row.status,
    filter: row.filter,
    reason: row.reason,
    force_outlived: row.force_outlived,
    delay_seconds: row.delay_seconds,
    rate_per_second: row.rate_per_second,
    planned: row.planned,
    processed: row.processed,
    replayed: row.replayed,
    superseded: row.superseded,
    discarded: row.discarded,
    conflicts: row.conflicts,
    failed: row.failed,
    last_error: row.last_error,
    submitted_by: row.submitted_by,
    submitted_at: row.submitted_at,
    cancelled_by: row.cancelled_by,
    finished_at: row.finished_at,
    updated_at: row.updated_at,
    next_run_at: row.next_run_at,
  };
}
