/**
 * Middleware: the fence transaction (SPEC §3). Opens a transaction on one pooled connection and
 * inserts the fence before the work runs on that same connection; commits after the work; rolls
 * back on any error. A duplicate rolls back at once and the work is skipped.
 *
 *   BEGIN; INSERT fence … ON CONFLICT DO NOTHING   -- one round trip; no row: duplicate → ROLLBACK, ack
 *   work(job, tx)
 *   COMMIT                                          -- then ack
 *
 * In batch-commit mode the batch's transaction has already settled the record (rc.settled) and
 * this middleware stands aside; records it left for a transaction of their own come through here.
 *
 * Every path releases the connection exactly once; a connection whose ROLLBACK or COMMIT failed is
 * destroyed rather than returned to the pool in an unknown state.
 */
import { performance } from "node:perf_hooks";
import type { MiddlewareObj } from "@middy/core";
import type pg from "pg";
import { beginWithFences } from "../db/queries/begin-with-fences.ts";
import { TransactionRolledBackError } from "../errors.ts";
import { faultHook } from "../fault-points.ts";
import type { RecordContext, RecordOutcome } from "./record-context.ts";

/** Options of {@link fenceTransaction}. */
export interface FenceTransactionOptions {
  readonly pool: pg.Pool;
  /** The consumer's name: the second half of the fence key. */
  readonly consumer: string;
  /** `expires_at` = processed_at + ttl, rounded up to a whole minute (begin-with-fences.ts). */
  readonly ttlSeconds: number;
}

type Req = { event: RecordContext };

export function fenceTransaction(
  options: FenceTransactionOptions,
): MiddlewareObj<RecordContext, RecordOutcome> {
  const fenceTransactionBefore = async (request: Req): Promise<void> => {
    const rc = request.event;
    const job = rc.job;
    if (!job) return; // nothing parsed: the parser threw before us
    if (rc.settled) return; // the batch's transaction decided this record
    if (faultHook) await faultHook("fence:before", { jobIds: [job.jobId] });
    const tx = await options.pool.connect();
    rc.fenceStartedAt = performance.now();
    try {
      const fresh = await beginWithFences(tx, {
        consumer: options.consumer,
        ttlSeconds: options.ttlSeconds,
        jobs: [{ jobId: job.jobId, tenantId: job.tenantId }],
      });
      if (fresh.has(job.jobId)) {
        if (faultHook) await faultHook("fence:after-insert", { jobIds: [job.jobId] });
        rc.tx = tx;
        return;
      }
      rc.duplicate = true;
      await tx.query("ROLLBACK");
      tx.release();
    } catch (error) {
      await abandon(tx);
      throw error;
    }
  };

  const fenceTransactionAfter = async (request: Req): Promise<void> => {
    const rc = request.event;
    const tx = rc.tx;
    if (!tx) return;
    rc.tx = undefined;
    try {
      if (faultHook) await faultHook("fence:after-work", { jobIds: rc.job ? [rc.job.jobId] : [] });
      const result = await tx.query("COMMIT");
      // In a transaction that had an error, PostgreSQL answers COMMIT with ROLLBACK and no error:
      // work that caught a failed statement and returned normally must not count as applied.
      if (result.command !== "COMMIT") throw new TransactionRolledBackError(result.command);
    } catch (error) {
      // The outcome of a failed COMMIT is unknown; the fence makes the retry safe either way.
      tx.release(error instanceof TransactionRolledBackError ? undefined : asError(error));
      throw error;
    }
    tx.release();
    if (rc.fenceStartedAt !== undefined) rc.fenceMs = performance.now() - rc.fenceStartedAt;
    if (faultHook) await faultHook("fence:after-commit", { jobIds: rc.job ? [rc.job.jobId] : [] });
  };

  const fenceTransactionOnError = async (request: Req): Promise<void> => {
    const rc = request.event;
    const tx = rc.tx;
    if (!tx) return;
    rc.tx = undefined;
    await abandon(tx);
  };

  return {
    name: "jobfence-fence-transaction",
    before: fenceTransactionBefore,
    after: fenceTransactionAfter,
    onError: fenceTransactionOnError,
  };
}

/** Rolls back and releases; destroys the connection if even the rollback fails. */
export async function abandon(tx: pg.PoolClient): Promise<void> {
  try {
    await tx.query("ROLLBACK");
    tx.release();
  } catch (rollbackError) {
    tx.release(asError(rollbackError));
  }
}

export function asError(value: unknown): Error {
  return value instanceof Error ? value : new Error(String(value));
}
