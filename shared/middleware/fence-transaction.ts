/**
 * Middleware: the fence transaction (SPEC §3). Opens a transaction on one pooled connection and
 * inserts the fence before the work runs on that same connection; commits after the work; rolls
 * back on any error. A duplicate rolls back at once and the work is skipped.
 *
 *   BEGIN
 *   INSERT fence … ON CONFLICT DO NOTHING RETURNING 1   -- no row: duplicate → ROLLBACK, ack
 *   work(job, tx)
 *   COMMIT                                             -- then ack
 *
 * Every path releases the connection exactly once; a connection whose ROLLBACK or COMMIT failed is
 * destroyed rather than returned to the pool in an unknown state.
 */
import { performance } from "node:perf_hooks";
import type { MiddlewareObj } from "@middy/core";
import type pg from "pg";
import { insertFence } from "../db/queries/insert-fence.ts";
import { TransactionRolledBackError } from "../errors.ts";
import type { RecordContext, RecordOutcome } from "./record-context.ts";

/** Options of {@link fenceTransaction}. */
export interface FenceTransactionOptions {
  readonly pool: pg.Pool;
  /** The consumer's name: the second half of the fence key. */
  readonly consumer: string;
  /** `expires_at = processed_at + ttl`. */
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
    const tx = await options.pool.connect();
    rc.fenceStartedAt = performance.now();
    try {
      await tx.query("BEGIN");
      const fresh = await insertFence(tx, {
        jobId: job.jobId,
        consumer: options.consumer,
        tenantId: job.tenantId,
        ttlSeconds: options.ttlSeconds,
      });
      if (fresh) {
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
async function abandon(tx: pg.PoolClient): Promise<void> {
  try {
    await tx.query("ROLLBACK");
    tx.release();
  } catch (rollbackError) {
    tx.release(asError(rollbackError));
  }
}

function asError(value: unknown): Error {
  return value instanceof Error ? value : new Error(String(value));
}
