/**
 * The state of one SQS record on its way through the per-record middleware chain, and the
 * outcome that decides whether it is acked. One object per record per invocation: never shared.
 */
import type { SQSRecord } from "aws-lambda";
import type pg from "pg";
import type { ErrorKind } from "../dead-letters/error-kind.ts";
import type { Job, MessageIdentity } from "../envelope/envelope.ts";

/** The per-record "event" the middlewares read and fill in. */
export interface RecordContext<P = unknown> {
  readonly record: SQSRecord;
  /** SPEC §4: the attempt number is the record's ApproximateReceiveCount. */
  readonly attempt: number;
  /** Where the record came from: the queue to change visibility on and to replay to. */
  readonly queueUrl: string;
  /** Set by the envelope parser: who the message says it is (best effort for poison). */
  identity?: MessageIdentity;
  /** Set by the envelope parser when the message is a valid job. */
  job?: Job<P>;
  /** The fence transaction's connection while it is open. */
  tx?: pg.PoolClient;
  /** Set by the fence when another delivery of the job already committed. */
  duplicate?: boolean;
  /** When the fence transaction began (ms, monotonic), for the FenceLatency metric. */
  fenceStartedAt?: number;
  /** Milliseconds from BEGIN to COMMIT of a committed fence transaction. */
  fenceMs?: number;
  /** Batch-commit mode: what the batch's shared transaction did with this record. */
  settled?: BatchSettlement;
}

/** A record's part in a batch transaction (set only for records the batch decided). */
export type BatchSettlement =
  /** Its work committed with the batch. */
  | { readonly status: "applied" }
  /** Its fence existed, or an earlier record of the batch carried the same job. */
  | { readonly status: "duplicate" }
  /** Its work threw (the batch was redone without it), or the batch's commit failed. */
  | { readonly status: "failed"; readonly error: unknown };

/** What became of a record. Acked outcomes leave the queue; every other one stays for SQS to redeliver. */
export type RecordOutcome =
  /** Work and fence committed. Acked. */
  | { readonly status: "applied" }
  /** The fence already existed: nothing applied. Acked. */
  | { readonly status: "duplicate" }
  /** A transient failure with attempts left: hidden for `delaySeconds` (when the call succeeded). Not acked. */
  | {
      readonly status: "retry";
      readonly delaySeconds: number;
      readonly visibilityChanged: boolean;
      readonly error: unknown;
    }
  /** Recorded as a dead letter (and alerted, unless `alertError`). Acked. */
  | {
      readonly status: "dead-lettered";
      readonly kind: ErrorKind;
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
  /** An error no middleware could classify (a bug): left in the queue. Not acked. */
  | { readonly status: "failed"; readonly error: unknown };

/** Whether the record may be deleted from the queue (absent from batchItemFailures). */
export function isAcked(outcome: RecordOutcome): boolean {
  return outcome.status === "applied" || outcome.status === "duplicate" || outcome.status === "dead-lettered";
}
