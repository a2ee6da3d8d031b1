/**
 * What a failure means, decided by its class (never its message): a dead-letter kind, or
 * transient (retry). The retry and dead-letter middlewares both ask here, so they cannot disagree.
 */

import { RecordChainError } from "../errors/configuration.ts";
import { ERROR_KIND, type ErrorKind } from "../errors/error-kind.ts";
import {
  InterruptedJobError,
  JobConflictError,
  PermanentJobError,
  PoisonMessageError,
  RetriesExhaustedError,
  UnrecordedMessageError,
} from "../errors/job.ts";
import { FenceLockTimeoutError, LedgerUnavailableError } from "../errors/transaction.ts";

/**
 * The dead-letter kind of an error, or undefined for a transient one. A thrown value that cannot
 * even be asked its class (a Proxy whose prototype trap throws) counts as transient.
 */
export function errorKindOf(error: unknown): ErrorKind | undefined {
  try {
    return kindOf(error);
  } catch {
    return undefined;
  }
}

function kindOf(error: unknown): ErrorKind | undefined {
  if (error instanceof PoisonMessageError) return ERROR_KIND.poison;
  if (error instanceof PermanentJobError) return ERROR_KIND.hard;
  if (error instanceof RetriesExhaustedError) return ERROR_KIND.exhausted;
  if (error instanceof UnrecordedMessageError) return ERROR_KIND.unrecorded;
  if (error instanceof JobConflictError) return ERROR_KIND.conflict;
  if (error instanceof InterruptedJobError) return ERROR_KIND.interrupted;
  return undefined;
}

/**
 * Whether the error is the deployment's, not the message's (a record chain wired in the wrong
 * order): no message pays for it, the record stays in the queue.
 */
export function isRecordChainError(error: unknown): boolean {
  try {
    return error instanceof RecordChainError;
  } catch {
    return false;
  }
}

/** Whether retrying can cure the error. */
export function isTransient(error: unknown): boolean {
  return errorKindOf(error) === undefined;
}

/**
 * Whether the failure is a lock wait behind another delivery of the job's fence (`held`): not the
 * job's failure at all. Safe on any thrown value.
 */
export function isFenceHeld(error: unknown): boolean {
  try {
    return error instanceof FenceLockTimeoutError;
  } catch {
    return false;
  }
}

/** Whether the failure is the attempt ledger's, before any work ran (nothing to count). Safe on any thrown value. */
export function isLedgerUnavailable(error: unknown): boolean {
  try {
    return error instanceof LedgerUnavailableError;
  } catch {
    return false;
  }
}
