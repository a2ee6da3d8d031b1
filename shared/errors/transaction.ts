/**
 * The fence transaction's errors: the fence held by another delivery, the ledger out of reach,
 * a COMMIT that found the transaction failed, and the work that tried to end or escape it.
 */
import { PermanentJobError } from "./job.ts";
import { JobfenceError } from "./jobfence-error.ts";

/**
 * The fence insert waited `lock_timeout` on the fence of a concurrent, still-open delivery of the
 * same job. Not a failure of the job: the other delivery decides; this one goes back to the queue
 * without costing an attempt.
 */
export class FenceLockTimeoutError extends JobfenceError {
  override name = "FenceLockTimeoutError";
  readonly jobIds: readonly string[];
  constructor(jobIds: readonly string[], cause: unknown) {
    super(
      `another delivery holds the fence of ${jobIds.length === 1 ? `job ${jobIds[0]}` : `${jobIds.length} jobs`}`,
      {
        cause,
      },
    );
    this.jobIds = jobIds;
  }
}

/**
 * The attempt ledger could not be read or written before the work (the database is unreachable):
 * nothing ran, so nothing is counted; the record goes back to its queue.
 */
export class LedgerUnavailableError extends JobfenceError {
  override name = "LedgerUnavailableError";
  constructor(cause: unknown) {
    super("the attempt ledger could not be reached", { cause });
  }
}

/**
 * COMMIT found the fence transaction already failed and rolled it back: the work caught an error
 * from one of its statements and returned as if it had succeeded. Nothing was applied; transient.
 */
export class TransactionRolledBackError extends JobfenceError {
  override name = "TransactionRolledBackError";
  constructor(command: string | undefined) {
    super(
      `COMMIT answered ${command ?? "nothing"}: a statement of the work failed and the work did not rethrow; nothing was applied`,
    );
  }
}

/**
 * The work tried to end the fence's transaction (`COMMIT`, `ROLLBACK`, `BEGIN`, …), or changed its
 * role or search_path and did not restore them. A plain transaction control text is refused before
 * it is sent; any other spelling is refused by the server, or ends the transaction, which the
 * server rolls back with the fence (shared/fence/work-transaction.ts). Nothing of the work commits;
 * retrying cannot help, so the job is dead-lettered as `hard`.
 */
export class TransactionControlError extends PermanentJobError {
  override name = "TransactionControlError";
  /** The refused statement, as the work sent it (trimmed to a bound). */
  readonly statement: string;
  constructor(statement: string, why: string, options?: ErrorOptions) {
    const shown = statement.length > 200 ? `${statement.slice(0, 199)}…` : statement;
    super(`the work's transaction refuses ${JSON.stringify(shown)}: ${why}`, options);
    this.statement = shown;
  }
}

/**
 * The work returned while statements it sent were still running (it did not await them): what they
 * do would happen after the work said it was done, outside anything the harness can vouch for. A
 * bug in the work, so never retried.
 */
export class WorkLeftStatementsError extends PermanentJobError {
  override name = "WorkLeftStatementsError";
  constructor(count: number) {
    super(
      `the work returned with ${count} statement(s) still running: await every tx.query before returning`,
    );
  }
}

/**
 * At COMMIT (or the ROLLBACK after a failed work) the harness found that the open transaction is
 * not the one that inserted the fence: something ended it and began another behind the work's
 * `tx`. The harness does not commit it; the job is dead-lettered as `hard` for a person to look at.
 */
export class ForeignTransactionError extends PermanentJobError {
  override name = "ForeignTransactionError";
}

/** SQLSTATE of `core.assert_fence_transaction` (migration 0008). */
export const FOREIGN_TRANSACTION_SQLSTATE = "JF001";
