/**
 * Bulk operations driven as the API and the worker drive them, in process: plan, start with the
 * plan's token, run the worker until the operation finishes. For tests that need a bulk replay or
 * discard as a step, not as the subject.
 */
import type { SQSClient } from "@aws-sdk/client-sqs";
import type pg from "pg";
import type { BulkFilter } from "../../shared/dead-letters/api-schemas.ts";
import {
  type OperationDetail,
  planOperation,
  readOperation,
  startOperation,
} from "../../shared/dead-letters/bulk-operations.ts";
import { runBulkOperations } from "../../shared/dead-letters/bulk-worker.ts";
import { TEST_SEAL_KEY } from "./api-harness.ts";

/** Plans, starts and runs to the end a bulk operation as `actor`; returns it finished. */
export async function runBulkToEnd(
  deps: { pool: pg.Pool; sqs: SQSClient },
  request:
    | { kind: "replay"; filter: BulkFilter; delaySeconds?: number; forceOutlived?: { reason: string } }
    | { kind: "discard"; filter: BulkFilter; reason: string },
  actor = "test",
): Promise<OperationDetail> {
  const bulkDeps = { pool: deps.pool, sealKey: TEST_SEAL_KEY };
  const force = request.kind === "replay" ? request.forceOutlived : undefined;
  const plan = await planOperation(bulkDeps, request.kind, request.filter, 0, force !== undefined);
  if (plan.token === null) throw new Error("the filter matches nothing to run");
  const started = await startOperation(
    bulkDeps,
    request.kind === "replay"
      ? {
          kind: "replay",
          filter: request.filter,
          token: plan.token,
          rate_per_second: 1000,
          delay_seconds: request.delaySeconds ?? 0,
          ...(force ? { force_outlived: true, reason: force.reason } : {}),
        }
      : {
          kind: "discard",
          filter: request.filter,
          token: plan.token,
          rate_per_second: 1000,
          reason: request.reason,
        },
    actor,
  );
  return runUntilFinished(deps, started.id);
}

/** Runs the worker until operation `id` has left `running`; returns it then. */
export async function runUntilFinished(
  deps: { pool: pg.Pool; sqs: SQSClient },
  id: string,
): Promise<OperationDetail> {
  for (let round = 0; round < 200; round++) {
    await runBulkOperations({ pool: deps.pool, sqs: deps.sqs }, { budgetMs: 1_000 });
    const now = await readOperation(deps.pool, id);
    if (now.status !== "running") return now;
  }
  throw new Error(`bulk operation ${id} did not finish`);
}
