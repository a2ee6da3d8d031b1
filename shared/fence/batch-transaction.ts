/**
 * Batch-commit mode: the records of one SQS batch share one fence transaction and one COMMIT.
 *
 *   BEGIN; INSERT every fence … RETURNING job_id      -- one round trip for the whole batch
 *   work(job, tx) for each record whose fence is new  -- in batch order
 *   (INSERT every follow-up the works sent)           -- only when they sent some: one statement
 *   COMMIT                                            -- one commit (one WAL flush) for all
 *
 * Isolation is paid for only when a record fails: its work threw, so the transaction rolls back
 * and the batch is redone without it (the failed record then takes the per-record failure path:
 * retry or dead letter). No savepoints, so the happy path costs nothing extra. After
 * {@link MAX_BATCH_REDOS} failures the batch stops being a good bet and its remaining records are
 * left to run one transaction each, as in per-record mode.
 *
 * Every guarantee of per-record mode holds: a record counts as applied only when the COMMIT that
 * carried its work and fence succeeded. When the batch fails without a known culprit (the fence
 * insert failed, COMMIT failed or answered ROLLBACK, the transaction aborted under work that
 * returned normally but no record can be blamed), nothing is settled: every record is redone in a
 * transaction of its own, which finds the culprit, so an innocent record never fails (the fences
 * make the redo safe when a COMMIT's outcome was unknown). A record whose job's fence exists, or whose job an
 * earlier record of the batch carries, is a duplicate when the fingerprints match and a conflict
 * when they do not. On FIFO queues a record the batch cannot run (it failed, or could not be
 * parsed) takes every later record of its message group out of the batch too, so no record is
 * applied ahead of an earlier one of its group that has not been.
 *
 * The result is a value per record (its settlement); the record's own protocol takes it from there.
 */
import type pg from "pg";
import type { StagedFollowUp } from "../db/queries/insert-follow-ups.ts";
import type { JobMessage } from "../envelope/read-message.ts";
import { TransactionRolledBackError, WorkLeftStatementsError } from "../errors/transaction.ts";
import { DEADLINE, type InvocationClock, untilDeadline } from "../invocation/deadline.ts";
import { FenceTransaction } from "./fence-transaction.ts";
import { type FenceSettlement, settlementOfExisting } from "./settlement.ts";

/** Work failures one batch absorbs by redoing itself before leaving the rest to per-record transactions. */
export const MAX_BATCH_REDOS = 2;

/** One record of the batch, in batch order. */
export interface BatchRecord<P> {
  /** The parsed job, or undefined for a record that is not one (poison). */
  readonly message: JobMessage<P> | undefined;
  /** FIFO: the record's message group (undefined on a standard queue). */
  readonly group: string | undefined;
  /** Runs the record's work on the batch's transaction (its queries, and `send` staging into it). */
  readonly work: (transaction: FenceTransaction) => Promise<void>;
}

/** Options of {@link settleBatch}. */
export interface BatchTransactionOptions {
  readonly pool: pg.Pool;
  /** The consumer's name: the second half of every fence key. */
  readonly consumer: string;
  readonly ttlSeconds: number;
  /** @default MAX_BATCH_REDOS */
  readonly maxRedos?: number;
  /**
   * The invocation's time: no record's work starts when too little is left (the rest are left
   * unsettled), and a work still running at the deadline ends the batch (rolled back, nothing
   * settled). @default no limit
   */
  readonly clock?: InvocationClock;
}

/** What the batch did: a settlement per record it decided, and figures for metrics and logs. */
export interface BatchReport<P> {
  /** The records the batch decided; any other runs in a transaction of its own. */
  readonly settlements: Map<BatchRecord<P>, FenceSettlement>;
  /** Records left to a transaction of their own. */
  readonly deferred: number;
  /** Times the batch rolled back and ran again without a failed record. */
  readonly redos: number;
  /** Whether a COMMIT carried the batch (false when nothing was committed). */
  readonly committed: boolean;
  /** The record whose work was running when the invocation's time ran out. */
  readonly interrupted?: BatchRecord<P>;
  /** The follow-ups the committed transaction wrote to the outbox: the relay's to send. */
  readonly followUps: readonly StagedFollowUp[];
}

/**
 * Runs the batch's jobs in one transaction. Never throws for a database or work error: those
 * become `failed` settlements.
 */
export async function settleBatch<P>(
  options: BatchTransactionOptions,
  records: readonly BatchRecord<P>[],
): Promise<BatchReport<P>> {
  const maxRedos = options.maxRedos ?? MAX_BATCH_REDOS;
  const settlements = new Map<BatchRecord<P>, FenceSettlement>();
  const blockedGroups = new Set<string>();

  // A record that cannot be parsed stays out, and on FIFO so does the rest of its group.
  let pending: BatchRecord<P>[] = [];
  for (const r of records) {
    if (r.group !== undefined && blockedGroups.has(r.group)) continue;
    if (r.message) pending.push(r);
    else if (r.group !== undefined) blockedGroups.add(r.group);
  }

  const report = (
    redos: number,
    committed: boolean,
    interrupted?: BatchRecord<P>,
    followUps: readonly StagedFollowUp[] = [],
  ): BatchReport<P> => ({
    settlements,
    deferred: records.filter((r) => r.message && !settlements.has(r)).length,
    redos,
    committed,
    ...(interrupted ? { interrupted } : {}),
    followUps,
  });

  let redos = 0;
  while (pending.length > 0) {
    const attempt = await runOnce(options, pending);
    if (attempt.kind === "interrupted") return report(redos, false, attempt.record);
    // No culprit: every record goes to a transaction of its own.
    if (attempt.kind === "unsettled") return report(redos, false);
    if (attempt.kind !== "taken-out") {
      for (const [r, settlement] of attempt.settlements) settlements.set(r, settlement);
      return attempt.kind === "committed"
        ? report(redos, true, undefined, attempt.followUps)
        : report(redos, false);
    }
    // One record cannot go with the batch (its work failed, or on FIFO it is a conflict that its
    // group's later records must wait behind): it is settled when that is known, and the batch
    // goes again without it and, on FIFO, without the rest of its group.
    if (attempt.settlement) settlements.set(attempt.record, attempt.settlement);
    const { group } = attempt.record;
    const index = pending.indexOf(attempt.record);
    pending = pending.filter(
      (r, i) => r !== attempt.record && !(group !== undefined && i > index && r.group === group),
    );
    redos += 1;
    if (redos > maxRedos) break;
  }
  return report(redos, false);
}

type Attempt<P> =
  | {
      kind: "committed";
      settlements: Map<BatchRecord<P>, FenceSettlement>;
      followUps: readonly StagedFollowUp[];
    }
  /** The work ended the fence's transaction: every record of the attempt failed with its error. */
  | { kind: "aborted"; settlements: Map<BatchRecord<P>, FenceSettlement> }
  /** The batch failed and no record can be blamed: nothing settled, each record redone alone. */
  | { kind: "unsettled" }
  /** The invocation's time ran out during `record`'s work: rolled back, nothing settled. */
  | { kind: "interrupted"; record: BatchRecord<P> }
  /** The record (and, on FIFO, its group's later records) goes out of the batch; settled when known. */
  | { kind: "taken-out"; record: BatchRecord<P>; settlement?: FenceSettlement };

async function runOnce<P>(options: BatchTransactionOptions, pending: BatchRecord<P>[]): Promise<Attempt<P>> {
  const failAll = (error: unknown): Attempt<P> => ({
    kind: "aborted",
    settlements: new Map(pending.map((r) => [r, { status: "failed", error }])),
  });
  const messageOf = (r: BatchRecord<P>) => r.message as JobMessage<P>;

  let opened: Awaited<ReturnType<typeof FenceTransaction.open>>;
  try {
    const opening = FenceTransaction.open(
      options.pool,
      {
        consumer: options.consumer,
        ttlSeconds: options.ttlSeconds,
        jobs: pending.map((r) => {
          const { job, fingerprint } = messageOf(r);
          return { jobId: job.jobId, tenantId: job.tenantId, fingerprint };
        }),
      },
      options.clock?.signal,
    );
    const raced = options.clock ? await untilDeadline(opening, options.clock.signal) : await opening;
    if (raced === DEADLINE) {
      // Opened after the deadline (a lock wait, a slow connection): rolled back the moment it is.
      opening.then(
        (late) => late.transaction.interrupt(),
        () => {},
      );
      return { kind: "unsettled" };
    }
    opened = raced;
  } catch {
    // A lock wait behind another delivery of one of the jobs, or the database refused: alone, each
    // record meets only its own trouble.
    return { kind: "unsettled" };
  }
  const { transaction, fresh, existing } = opened;
  const settlements = new Map<BatchRecord<P>, FenceSettlement>();
  // The fingerprint each job id stands for in this batch: the fence's, or the first record's.
  const carried = new Map<string, Buffer | null>(existing);
  const applied: BatchRecord<P>[] = [];
  for (const r of pending) {
    const { job, fingerprint } = messageOf(r);
    const fenced = !fresh.has(job.jobId);
    if (fenced || carried.has(job.jobId)) {
      const settlement = settlementOfExisting(fingerprint, carried.get(job.jobId) ?? null);
      // Against an earlier record of this batch (not a committed fence), a conflict is known only
      // once that record commits: the record is left to a transaction of its own after the batch.
      const unsure = settlement.status === "conflict" && !fenced;
      const blocksGroup = r.group !== undefined && hasLaterOfGroup(pending, r);
      if (settlement.status === "conflict" && (blocksGroup || unsure)) {
        if (!blocksGroup) continue;
        const foreign = await transaction.abandon();
        if (foreign) return failAll(foreign);
        return { kind: "taken-out", record: r, ...(unsure ? {} : { settlement }) };
      }
      settlements.set(r, settlement);
      continue;
    }
    if (options.clock && !options.clock.canStart()) {
      // Too little time to start this record: the batch commits what ran. The fences of the jobs
      // it did not reach are withdrawn first (only this transaction's own inserts can be), so
      // the records left over come back unrun and are taken by a later delivery.
      const reached = new Set(applied.map((a) => messageOf(a).job.jobId));
      if (options.clock.signal.aborted) {
        transaction.interrupt();
        return { kind: "unsettled" };
      }
      try {
        await transaction.withdraw([...fresh].filter((id) => !reached.has(id)));
      } catch {
        await transaction.abandon();
        return { kind: "unsettled" };
      }
      break;
    }
    carried.set(job.jobId, fingerprint);
    let failure: unknown;
    try {
      if (options.clock) {
        const raced = await untilDeadline(r.work(transaction), options.clock.signal);
        if (raced === DEADLINE) {
          transaction.interrupt();
          return { kind: "interrupted", record: r };
        }
      } else {
        await r.work(transaction);
      }
      // Work that caught its own failed statement and returned left the transaction failed, and
      // work that returned without awaiting its statements left them running: either is the one
      // to take out, not the next record, whose statements would be refused or held up for it.
      const left = transaction.leftStatements;
      if (left > 0) failure = new WorkLeftStatementsError(left);
      // It ended the transaction (and caught the error): rolled back, and the next record's
      // statements would be refused for it.
      else if (transaction.endedByWork) failure = transaction.endedByWork;
      else if (transaction.failed) failure = new TransactionRolledBackError("ROLLBACK");
      // A follow-up it tried to send was refused (and the work caught it): this record fails.
      else if (transaction.refusal) failure = transaction.refusal;
    } catch (error) {
      failure = error;
    }
    if (failure !== undefined) {
      if (options.clock?.signal.aborted) {
        transaction.interrupt();
        return { kind: "unsettled" };
      }
      const foreign = await transaction.abandon();
      // The work ended the batch's transaction: what committed stands, for every record in it.
      if (foreign) return failAll(foreign);
      // Refused because the transaction had already failed: an earlier record's work swallowed
      // its failed statement, and which one cannot be told. Each is redone alone, which finds it.
      if (inFailedTransaction(failure)) return { kind: "unsettled" };
      return { kind: "taken-out", record: r, settlement: { status: "failed", error: failure } };
    }
    applied.push(r);
  }
  let fenceMs: number;
  if (options.clock?.signal.aborted) {
    // Past the deadline nothing commits: the batch is rolled back and every record comes back.
    transaction.interrupt();
    return { kind: "unsettled" };
  }
  try {
    const committing = transaction.commit();
    const raced = options.clock ? await untilDeadline(committing, options.clock.signal) : await committing;
    if (raced === DEADLINE) {
      // The COMMIT is on its way and its outcome unknown: nothing is settled, every record comes
      // back, and the fences make a record that did commit a duplicate then.
      committing.catch(() => {});
      return { kind: "unsettled" };
    }
    fenceMs = raced;
  } catch {
    // Refused (a deferred check, a serialization failure, ROLLBACK for a failure no work owned up
    // to) or unknown: each record is redone alone, so the culprit is found and the fences keep an
    // already committed record a duplicate.
    return { kind: "unsettled" };
  }
  for (const r of applied) settlements.set(r, { status: "applied", fenceMs });
  return { kind: "committed", settlements, followUps: transaction.followUps };
}

/** Whether the error is PostgreSQL refusing a statement in a transaction that had already failed. */
function inFailedTransaction(error: unknown): boolean {
  try {
    return (error as { code?: unknown })?.code === "25P02";
  } catch {
    return false;
  }
}

function hasLaterOfGroup<P>(pending: readonly BatchRecord<P>[], record: BatchRecord<P>): boolean {
  return pending.slice(pending.indexOf(record) + 1).some((r) => r.group === record.group);
}
