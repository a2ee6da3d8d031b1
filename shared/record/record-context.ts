/**
 * The state of one SQS record on its path (shared/record/spine.ts): one context per record per
 * invocation, never shared, never kept. Only the spine's steps move it on.
 */
import type { Span } from "@opentelemetry/api";
import type { SQSRecord } from "aws-lambda";
import type { AttemptLedger } from "../db/queries/message-attempts.ts";
import { type Job, type MessageIdentity, messageIdStandIn } from "../envelope/envelope.ts";
import type { JobMessage, ReadMessage } from "../envelope/read-message.ts";
import type { FenceTransaction } from "../fence/fence-transaction.ts";
import type { FenceSettlement } from "../fence/settlement.ts";
import type { StepsJob } from "../steps/run-steps.ts";
import type { RecordOutcome } from "./outcome.ts";

/** The record, and where it is on its path: the event of a per-record Middy chain (shared/middy/). */
export interface RecordContext<P = unknown> {
  readonly record: SQSRecord;
  /** The delivery's ApproximateReceiveCount: deliveries, not attempts. */
  readonly receiveCount: number;
  /**
   * What the attempt ledger knows of the message: empty on a first delivery (nothing is read or
   * written for it), read by the claim of a redelivery, and updated when a failure is recorded.
   */
  ledger: AttemptLedger;
  /** Whether this delivery's claim on the ledger was made (redeliveries only: a first delivery has nothing to learn). */
  claimed: boolean;
  /** Whether the consumer's work is running right now: only then is a deadline its interruption. */
  working?: boolean;
  /** Aborted when the invocation's time is up: from then on nothing more is done for the record. */
  readonly signal?: AbortSignal;
  /** Where the record came from: the queue to change visibility on and to replay to. */
  readonly queueUrl: string;
  /** Batch-commit mode: what the batch's shared transaction did with this record, handed in as a value. */
  readonly settlement?: FenceSettlement;
  /** Batch-commit mode: the record as the batch already read it (step 1 is then not run twice). */
  readonly read?: ReadMessage<P>;
  /** The record's `process` span (shared/tracing/spans.ts). @default none: the backstop drain's records */
  readonly span?: Span;
  /** Each step of the spine moves this on. */
  state: RecordState<P>;
  /** What the failure was settled as, once it was (a failure is settled once, however the chain ran). */
  settled?: RecordOutcome;
}

/** Where a record is. Each value says which step left it there. */
export type RecordState<P> =
  /** Not parsed yet. */
  | { readonly step: "received" }
  /** Parse found no job: who the message says it is, and its job's fingerprint when one could be taken. */
  | { readonly step: "poison"; readonly identity: MessageIdentity; readonly fingerprint: Buffer | null }
  /** Parsed; the fence not tried yet. */
  | { readonly step: "parsed"; readonly message: JobMessage<P> }
  /**
   * The job's steps ran (a consumer with steps only): every step recorded, and `results` what they
   * returned for the work; or, `fenced`, the job's fence was found and no step ran.
   */
  | {
      readonly step: "stepped";
      readonly message: JobMessage<P>;
      readonly results: unknown;
      readonly fenced: boolean;
    }
  /** The record's own fence transaction is open: the work runs next, then COMMIT. */
  | {
      readonly step: "open";
      readonly message: JobMessage<P>;
      readonly fence: FenceTransaction;
      readonly results?: unknown;
    }
  /** The work is running on the record's own fence transaction. */
  | {
      readonly step: "working";
      readonly message: JobMessage<P>;
      readonly fence: FenceTransaction;
      readonly results?: unknown;
    }
  /** The work returned: the transaction may commit. */
  | { readonly step: "worked"; readonly message: JobMessage<P>; readonly fence: FenceTransaction }
  /** The record's own fence transaction was rolled back (its work failed, or never ran). */
  | { readonly step: "abandoned"; readonly message: JobMessage<P> }
  /** The job's fence existed with its fingerprint: nothing to do. */
  | { readonly step: "duplicate"; readonly message: JobMessage<P> }
  /** Work and fence committed (by this record's transaction or the batch's). */
  | { readonly step: "applied"; readonly message: JobMessage<P>; readonly fenceMs?: number };

/** The run the record is on: one more than the failures recorded for its message. */
export function currentAttempt(rc: RecordContext): number {
  return rc.ledger.failures + 1;
}

/** Who a record is, as far as its steps got. */
export function whoFailed(rc: RecordContext): { identity: MessageIdentity; fingerprint: Buffer | null } {
  const { state } = rc;
  if (state.step === "poison") return { identity: state.identity, fingerprint: state.fingerprint };
  if (state.step === "received") {
    const standIn = messageIdStandIn(rc.record.messageId);
    return { identity: { jobId: standIn, tenantId: null, correlationId: standIn }, fingerprint: null };
  }
  return { identity: state.message.identity, fingerprint: state.message.fingerprint };
}

/** The record's ApproximateReceiveCount (1 if SQS did not send it): deliveries, not attempts. */
export function receiveCountOf(record: SQSRecord): number {
  const count = Number(record.attributes.ApproximateReceiveCount);
  if (!Number.isInteger(count) || count < 1) return 1;
  // The ledger keeps it as an integer column; no redrive allows anywhere near this many.
  return Math.min(count, MAX_RECEIVE_COUNT_KEPT);
}

/** The largest receive count the ledger keeps (int4): beyond it every count is this one. */
const MAX_RECEIVE_COUNT_KEPT = 2_147_483_647;

/** The job as `work` receives it; `R` is what the definition's `steps` returned, if it has any. */
export interface WorkJob<P, R = undefined> extends StepsJob<P> {
  /** What the definition's `steps` returned (their recorded results). @default absent: a consumer without steps */
  readonly steps: R;
}

/**
 * The job as the work sees it, on its `attempt`th run, with its steps' `results` (a job of a
 * consumer without steps has no `steps` key).
 */
export function workJob<P, R = undefined>(
  record: SQSRecord,
  job: Job<P>,
  attempt: number,
  results?: R,
): WorkJob<P, R> {
  return {
    ...job,
    attempt,
    messageId: record.messageId,
    ...(results === undefined ? {} : { steps: results }),
  } as WorkJob<P, R>;
}
