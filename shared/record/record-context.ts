/**
 * The state of one SQS record on its path (protocol.ts) and the outcome that decides whether it is
 * acked. One context per record per invocation: never shared, never kept.
 */
import type { Span } from "@opentelemetry/api";
import type { SQSRecord } from "aws-lambda";
import type { AttemptLedger } from "../db/queries/message-attempts.ts";
import type { Job, MessageIdentity } from "../envelope/envelope.ts";
import type { ErrorKind } from "../errors/error-kind.ts";
import type { PoisonMessageError } from "../errors.ts";
import type { FenceTransaction } from "../fence/fence-transaction.ts";

/** The per-record "event" of the Middy chain: the record, and where it is on its path. */
export interface RecordContext<P = unknown> {
  readonly record: SQSRecord;
  /** The delivery's ApproximateReceiveCount: deliveries, not attempts. */
  readonly receiveCount: number;
  /**
   * What the attempt ledger knows of the message: empty on a first delivery (nothing is read or
   * written for it), read by the claim of a redelivery, and updated when a failure is recorded.
   */
  ledger: AttemptLedger;
  /** Whether this delivery's claim on the ledger was made (redeliveries only; see protocol.ts). */
  claimed: boolean;
  /** Whether the consumer's work is running right now: only then is a deadline its interruption. */
  working?: boolean;
  /** Aborted when the invocation's time is up: from then on nothing more is done for the record. */
  readonly signal?: AbortSignal;
  /** Where the record came from: the queue to change visibility on and to replay to. */
  readonly queueUrl: string;
  /** Batch-commit mode: what the batch's shared transaction did with this record, handed in as a value. */
  readonly settlement?: BatchSettlement;
  /** Batch-commit mode: the record as the batch already read it (step 1 is then not run twice). */
  readonly read?: ReadMessage<P>;
  /** The record's `process` span (shared/tracing/spans.ts). @default none: the backstop drain's records */
  readonly span?: Span;
  /** Each step of the protocol moves this on. */
  state: RecordState<P>;
}

/** A body that is a job: what the work gets, who it is, and what the fence records of it. */
export interface JobMessage<P> {
  readonly job: Job<P>;
  readonly identity: MessageIdentity;
  /** The job's fingerprint (docs/design.md §2.2). */
  readonly fingerprint: Buffer;
}

/** A body that is not a job: why, who the message says it is, and its job's fingerprint if any. */
export interface PoisonMessage {
  readonly poison: PoisonMessageError;
  readonly identity: MessageIdentity;
  readonly fingerprint: Buffer | null;
}

/** What step 1 makes of a record's body. */
export type ReadMessage<P> = JobMessage<P> | PoisonMessage;

/** What the batch hands a record: how it read it, and what its transaction did with it (if it decided). */
export interface PreparedRecord<P> {
  readonly read: ReadMessage<P>;
  readonly settlement?: BatchSettlement;
}

/** Where a record is. Each value says which step left it there. */
export type RecordState<P> =
  /** Not parsed yet. */
  | { readonly step: "received" }
  /** Parse found no job: who the message says it is, and its job's fingerprint when one could be taken. */
  | { readonly step: "poison"; readonly identity: MessageIdentity; readonly fingerprint: Buffer | null }
  /** Parsed; the fence not tried yet. */
  | { readonly step: "parsed"; readonly message: JobMessage<P> }
  /** The record's own fence transaction is open: the work runs next, then COMMIT. */
  | { readonly step: "open"; readonly message: JobMessage<P>; readonly fence: FenceTransaction }
  /** The job's fence existed with its fingerprint: nothing to do. */
  | { readonly step: "duplicate"; readonly message: JobMessage<P> }
  /** Work and fence committed (by this record's transaction or the batch's). */
  | { readonly step: "applied"; readonly message: JobMessage<P>; readonly fenceMs?: number };

/** What the batch transaction did with a record (batch-transaction.ts). */
export type BatchSettlement =
  /** Its work committed with the batch, `fenceMs` after the batch's BEGIN. */
  | { readonly status: "applied"; readonly fenceMs?: number }
  /** Its fence existed with its fingerprint, or an earlier record of the batch carried the same job. */
  | { readonly status: "duplicate" }
  /** Its job id's fence (or an earlier record of the batch) holds another job. */
  | { readonly status: "conflict"; readonly fenceFingerprint: Buffer }
  /** Its work threw (the batch was redone without it), or the batch's commit failed. */
  | { readonly status: "failed"; readonly error: unknown };

/** What became of a record. Acked outcomes leave the queue; every other one stays for SQS to redeliver. */
export type RecordOutcome =
  /** Work and fence committed. Acked. */
  | { readonly status: "applied" }
  /** The fence already existed with this job's fingerprint: nothing applied. Acked. */
  | { readonly status: "duplicate" }
  /**
   * A transient failure with attempts left: attempt `attempt` failed and is recorded, and the
   * message is hidden for `delaySeconds` (when the call succeeded). With `recorded` false the
   * failure could not be counted (the database was unreachable): the queue's own visibility
   * timeout applies and `delaySeconds` is null. Not acked.
   */
  | {
      readonly status: "retry";
      readonly attempt: number;
      readonly recorded: boolean;
      readonly delaySeconds: number | null;
      readonly visibilityChanged: boolean;
      readonly error: unknown;
    }
  /**
   * The fence insert waited lock_timeout behind another delivery of the job, which decides: back
   * to the queue for `delaySeconds`, no attempt spent, nothing recorded. Not acked.
   */
  | { readonly status: "held"; readonly delaySeconds: number; readonly visibilityChanged: boolean }
  /**
   * The invocation's time ran out: the record was running (`wasRunning`: its transaction was rolled
   * back and the interruption recorded) or never started. Returned to the queue. Not acked.
   */
  | { readonly status: "interrupted"; readonly wasRunning: boolean }
  /** Recorded as a dead letter (and alerted, unless `alertError`). Acked. */
  | {
      readonly status: "dead-lettered";
      readonly kind: ErrorKind;
      /** The dead letter's `attempts`. */
      readonly attempts: number;
      readonly deadLetterId: string;
      readonly created: boolean;
      readonly alertError?: unknown;
      readonly error: unknown;
    }
  /** The dead letter could not be written: left in the queue so nothing is lost. Not acked. */
  | {
      readonly status: "dead-letter-failed";
      readonly kind: ErrorKind;
      readonly error: unknown;
      readonly writeError: unknown;
    }
  /** An error no step could classify (a bug): left in the queue. Not acked. */
  | { readonly status: "failed"; readonly error: unknown };

/** Whether the record may be deleted from the queue (absent from batchItemFailures). */
export function isAcked(outcome: RecordOutcome): boolean {
  return outcome.status === "applied" || outcome.status === "duplicate" || outcome.status === "dead-lettered";
}
