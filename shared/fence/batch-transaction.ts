/**
 * Batch-commit mode: the records of one SQS batch share one fence transaction and one COMMIT.
 *
 *   BEGIN; INSERT every fence … RETURNING job_id      -- one round trip for the whole batch
 *   work(job, tx) for each record whose fence is new  -- in batch order
 *   COMMIT                                            -- one commit (one WAL flush) for all
 *
 * Isolation is paid for only when a record fails: its work threw, so the transaction rolls back
 * and the batch is redone without it (the failed record then takes the per-record failure path:
 * retry or dead letter). No savepoints, so the happy path costs nothing extra. After
 * {@link MAX_BATCH_REDOS} failures the batch stops being a good bet and its remaining records are
 * left to run one transaction each, as in per-record mode.
 *
 * Every guarantee of per-record mode holds: a record counts as applied only when the COMMIT that
 * carried its work and fence succeeded; a failed or unconfirmed COMMIT fails every record of the
 * batch (the fences make their redelivery safe); a duplicate is a duplicate whether its fence was
 * committed earlier or an earlier record of this batch carries the same job. On FIFO queues a
 * record the batch cannot run (it failed, or could not be parsed) takes every later record of its
 * message group out of the batch too, so no record is applied ahead of an earlier one of its
 * group that has not been.
 */
import { performance } from "node:perf_hooks";
import type pg from "pg";
import { beginWithFences } from "../db/queries/begin-with-fences.ts";
import { TransactionRolledBackError } from "../errors.ts";
import { faultHook } from "../fault-points.ts";
import { abandon, asError } from "../middleware/fence-transaction.ts";
import type { BatchSettlement, RecordContext } from "../middleware/record-context.ts";

/** Work failures one batch absorbs by redoing itself before leaving the rest to per-record transactions. */
export const MAX_BATCH_REDOS = 2;

/** Options of {@link settleBatch}. */
export interface BatchTransactionOptions<P> {
  readonly pool: pg.Pool;
  /** The consumer's name: the second half of every fence key. */
  readonly consumer: string;
  readonly ttlSeconds: number;
  /** Runs one record's work on the batch's transaction. */
  readonly work: (rc: RecordContext<P>, tx: pg.PoolClient) => Promise<void>;
  /** FIFO: keep each message group's order (see the module comment). */
  readonly keepGroupOrder: boolean;
  /** @default MAX_BATCH_REDOS */
  readonly maxRedos?: number;
}

/** What the batch did, for metrics and logs. */
export interface BatchReport {
  /** Records the batch transaction decided (applied, duplicate or failed). */
  readonly settled: number;
  /** Records left to a transaction of their own. */
  readonly deferred: number;
  /** Times the batch rolled back and ran again without a failed record. */
  readonly redos: number;
  /** Whether a COMMIT carried the batch (false when nothing was committed). */
  readonly committed: boolean;
}

/**
 * Runs the parsed records of a batch (`contexts`, in batch order; those without `job` are the ones
 * that could not be parsed) in one transaction and sets `settled` on every record it decides.
 * Records left without `settled` run in transactions of their own. Never throws for a database or
 * work error: those become `failed` settlements.
 */
export async function settleBatch<P>(
  options: BatchTransactionOptions<P>,
  contexts: readonly RecordContext<P>[],
): Promise<BatchReport> {
  const maxRedos = options.maxRedos ?? MAX_BATCH_REDOS;
  const blockedGroups = new Set<string>();
  const groupOf = (rc: RecordContext<P>) =>
    options.keepGroupOrder ? rc.record.attributes.MessageGroupId : undefined;

  // A record that cannot be parsed stays out, and on FIFO so does the rest of its group.
  let pending: RecordContext<P>[] = [];
  for (const rc of contexts) {
    const group = groupOf(rc);
    if (group !== undefined && blockedGroups.has(group)) continue;
    if (rc.job) pending.push(rc);
    else if (group !== undefined) blockedGroups.add(group);
  }

  let redos = 0;
  let settled = 0;
  while (pending.length > 0) {
    const attempt = await runOnce(options, pending);
    if (attempt.kind === "committed" || attempt.kind === "aborted") {
      for (const [rc, settlement] of attempt.settlements) {
        rc.settled = settlement;
        if (attempt.kind === "committed") rc.fenceMs = attempt.elapsedMs;
      }
      settled += attempt.settlements.size;
      return {
        settled,
        deferred: contexts.filter((rc) => !rc.settled).length,
        redos,
        committed: attempt.kind === "committed",
      };
    }
    // One record's work failed: it is settled as failed, and the batch goes again without it
    // (and, on FIFO, without the rest of its group).
    attempt.failed.settled = { status: "failed", error: attempt.error };
    settled += 1;
    const group = groupOf(attempt.failed);
    const index = pending.indexOf(attempt.failed);
    pending = pending.filter(
      (rc, i) => rc !== attempt.failed && !(group !== undefined && i > index && groupOf(rc) === group),
    );
    redos += 1;
    if (redos > maxRedos) break;
  }
  return { settled, deferred: contexts.filter((rc) => !rc.settled).length, redos, committed: false };
}

type Attempt<P> =
  | { kind: "committed"; settlements: Map<RecordContext<P>, BatchSettlement>; elapsedMs: number }
  /** The fence insert or the COMMIT failed: every record of the attempt failed with `error`. */
  | { kind: "aborted"; settlements: Map<RecordContext<P>, BatchSettlement> }
  | { kind: "work-failed"; failed: RecordContext<P>; error: unknown };

async function runOnce<P>(
  options: BatchTransactionOptions<P>,
  pending: RecordContext<P>[],
): Promise<Attempt<P>> {
  const jobIds = pending.map((rc) => jobOf(rc).jobId);
  const failAll = (error: unknown): Attempt<P> => ({
    kind: "aborted",
    settlements: new Map(pending.map((rc) => [rc, { status: "failed", error }])),
  });
  let tx: pg.PoolClient;
  try {
    if (faultHook) await faultHook("fence:before", { jobIds });
    tx = await options.pool.connect();
  } catch (error) {
    return failAll(error);
  }
  const started = performance.now();
  const settlements = new Map<RecordContext<P>, BatchSettlement>();
  try {
    const fresh = await beginWithFences(tx, {
      consumer: options.consumer,
      ttlSeconds: options.ttlSeconds,
      jobs: pending.map((rc) => ({ jobId: jobOf(rc).jobId, tenantId: jobOf(rc).tenantId })),
    });
    if (faultHook) await faultHook("fence:after-insert", { jobIds });
    const carried = new Set<string>();
    for (const rc of pending) {
      const { jobId } = jobOf(rc);
      if (!fresh.has(jobId) || carried.has(jobId)) {
        settlements.set(rc, { status: "duplicate" });
        continue;
      }
      carried.add(jobId);
      try {
        await options.work(rc, tx);
      } catch (error) {
        await abandon(tx);
        return { kind: "work-failed", failed: rc, error };
      }
      settlements.set(rc, { status: "applied" });
    }
  } catch (error) {
    await abandon(tx);
    return failAll(error);
  }
  try {
    if (faultHook) await faultHook("fence:after-work", { jobIds });
    const result = await tx.query("COMMIT");
    // As in per-record mode: a COMMIT answered with ROLLBACK applied nothing.
    if (result.command !== "COMMIT") throw new TransactionRolledBackError(result.command);
  } catch (error) {
    // Unknown or refused: every record of the batch is retried; their fences make that safe.
    tx.release(error instanceof TransactionRolledBackError ? undefined : asError(error));
    return failAll(error);
  }
  tx.release();
  const elapsedMs = performance.now() - started;
  if (faultHook) await faultHook("fence:after-commit", { jobIds });
  return { kind: "committed", settlements, elapsedMs };
}

function jobOf<P>(rc: RecordContext<P>): NonNullable<RecordContext<P>["job"]> {
  if (!rc.job) throw new Error("a record without a parsed job reached the batch transaction");
  return rc.job;
}
