/**
 * What the server's refusal of a fence transaction's COMMIT (or checked ROLLBACK) means to the
 * record: each SQLSTATE of migration 0023's check, and a COMMIT sent into a failed transaction, as
 * the typed error the record's failure becomes. Anything else is the error itself.
 */
import {
  FOREIGN_TRANSACTION_SQLSTATE,
  ForeignTransactionError,
  TransactionControlError,
  TransactionRolledBackError,
} from "../errors/transaction.ts";

/** SQLSTATE of core.fence_commit_check when the role or search_path changed (migration 0023). */
const SCOPE_CHANGED_SQLSTATE = "JF003";

/** SQLSTATE of core.fence_commit_check when a fence of the transaction was withdrawn by its work. */
const FENCE_WITHDRAWN_SQLSTATE = "JF004";

/** SQLSTATE of a statement sent into a transaction that has already failed. */
const IN_FAILED_TRANSACTION = "25P02";

/** What a failed commit (or checked rollback) means to the record. */
export function commitFailure(error: unknown): unknown {
  const code = (error as { code?: unknown }).code;
  if (code === FOREIGN_TRANSACTION_SQLSTATE) {
    return new ForeignTransactionError(
      "the transaction open at the harness's COMMIT or ROLLBACK is not the fence's: something ended it and began another; the harness rolled it back",
      { cause: error },
    );
  }
  if (code === SCOPE_CHANGED_SQLSTATE) {
    return new TransactionControlError(
      "SET ROLE / SET search_path",
      "the work changed the transaction's role or search_path (in batch-commit mode also a setting, or left a temporary relation) and did not restore them: batch-mates share the transaction. Nothing was committed",
      { cause: error },
    );
  }
  if (code === FENCE_WITHDRAWN_SQLSTATE) {
    return new TransactionControlError(
      "core.withdraw_own_fences",
      "the work withdrew a fence of its own transaction (only the batch harness may): nothing was committed",
      { cause: error },
    );
  }
  if (code === IN_FAILED_TRANSACTION) return new TransactionRolledBackError("ROLLBACK");
  return error;
}
