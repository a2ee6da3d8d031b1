/**
 * Writing a dead letter (docs/design.md §5), for the harness and the backstop drain alike: the row in a
 * transaction of its own, then the `DeadLetterRecorded` alert.
 *
 * No content may make the write fail, since a failure that cannot be recorded is one that
 * vanishes. The body is always storable (stored-body.ts); what the row keeps beside it is tried in
 * up to three forms, each taken only when the server refused the one before for what it contains
 * (a data exception, a check or a program limit, never a lost connection):
 *
 *   1. as received: `payload` as jsonb, the identity the envelope gave, attributes and error as read;
 *   2. `payload` NULL and the message attributes made storable: what jsonb refused (a number
 *      outside `numeric`, nesting deeper than the server parses) is gone from the row, the body
 *      still has it;
 *   3. also the body in its utf16 form and the identity replaced by the SQS message id (tenant
 *      unknown): only a check the harness does not know of, or a database whose encoding cannot
 *      hold the text, gets here, and the row must exist even then.
 *
 * A write that fails otherwise (database down) is reported so the record stays in its queue.
 */
import type { EventBridgeClient } from "@aws-sdk/client-eventbridge";
import type { SQSRecord } from "aws-lambda";
import type pg from "pg";
import { deadLetterRecordedDetail, publishDeadLetterRecorded } from "../alerts/ops-bus.ts";
import { poolBefore } from "../db/connect-before.ts";
import { type DeadLetterDraft, insertDeadLetter } from "../db/queries/insert-dead-letter.ts";
import type { AttemptEntry } from "../db/queries/message-attempts.ts";
import { BODY_FORM, jsonbCandidate, storableJson, storedBody } from "../db/stored-body.ts";
import { type MessageIdentity, messageIdStandIn } from "../envelope/envelope.ts";
import { fingerprintHex } from "../envelope/fingerprint.ts";
import type { ErrorKind } from "../errors/error-kind.ts";
import { EXHAUSTED_REASON, RetriesExhaustedError } from "../errors/job.ts";
import { describeError, type LastError, withNote } from "../errors/last-error.ts";
import { faultHook } from "../fault-points.ts";
import { creationContext, formatTraceparent } from "../tracing/trace-context.ts";

/** Which of the three forms of the module comment a row was stored in (1 = as received). */
export type StoredForm = 1 | 2 | 3;

/** Where dead letters go and alerts are sent. */
export interface DeadLetterSink {
  readonly pool: pg.Pool;
  readonly consumer: string;
  readonly eventBridge: EventBridgeClient;
  readonly opsBusName: string;
}

/** One failed message to record. */
export interface FailedMessage {
  readonly record: SQSRecord;
  /** The queue a replay sends it to. */
  readonly queueUrl: string;
  readonly attempts: number;
  /** The failed runs and interruptions that led here, oldest first. @default none */
  readonly attemptHistory?: readonly AttemptEntry[];
  readonly kind: ErrorKind;
  /** The failure; `last_error` describes it (a wrapper's cause for `exhausted`). */
  readonly error: unknown;
  /** Who the message says it is; the message id stands in when nothing could be read. */
  readonly identity: MessageIdentity;
  readonly jobFingerprint: Buffer | null;
  readonly fenceFingerprint: Buffer | null;
  /** Let the job's fence decide: applied after all, or a conflict (insert-dead-letter.ts). */
  readonly checkFence: boolean;
  /**
   * The earliest the copy can have been first sent, when it is not its SentTimestamp (the drain of
   * a FIFO backstop): stored as `message_attributes.first_sent_at`, which the database compares with
   * the job's fence lifetime (migration 0021). @default its SentTimestamp
   */
  readonly firstSentAt?: Date;
  /**
   * The trace context of the span that dead-lettered it: a replay continues its trace.
   * @default the context the message arrived with
   */
  readonly traceparent?: string | null;
  /**
   * Aborted when the record's invocation has returned: no write or alert starts after that (the
   * record is back in the queue and its next delivery records it). @default never
   */
  readonly signal?: AbortSignal;
}

/** What became of the write. */
export type DeadLetterWrite =
  | {
      readonly status: "dead-lettered";
      readonly kind: ErrorKind;
      readonly attempts: number;
      readonly deadLetterId: string;
      readonly created: boolean;
      /** Which of the three forms of the module comment was stored (1 = as received). */
      readonly form: StoredForm;
      readonly alertError?: unknown;
    }
  /** The job's fence has this message's fingerprint: it was applied after all. Nothing written. */
  | { readonly status: "applied" }
  /** The write failed for a reason other than content: the record must stay in its queue. */
  | { readonly status: "dead-letter-failed"; readonly kind: ErrorKind; readonly writeError: unknown };

/** Records the failed message, then alerts. Never throws. */
export async function writeDeadLetter(sink: DeadLetterSink, failed: FailedMessage): Promise<DeadLetterWrite> {
  const lastError = lastErrorOf(failed);
  let recorded: Awaited<ReturnType<typeof insertDeadLetter>> | undefined;
  let form: StoredForm = 1;
  let draft: DeadLetterDraft;
  for (; ; form = (form + 1) as StoredForm) {
    if (failed.signal?.aborted) {
      return { status: "dead-letter-failed", kind: failed.kind, writeError: failed.signal.reason };
    }
    draft = draftOf(sink.consumer, failed, lastError, form);
    try {
      // Its wait for a connection ends at the deadline too: no dead letter lands after the return.
      const inserting = insertDeadLetter(poolBefore(sink.pool, failed.signal), draft);
      if (faultHook) await faultHook("dead-letter:in-flight", { jobIds: [draft.jobId] });
      recorded = await inserting;
      break;
    } catch (writeError) {
      if (form < 3 && refusedForContent(writeError)) continue;
      return { status: "dead-letter-failed", kind: failed.kind, writeError };
    }
  }
  if (recorded.applied) return { status: "applied" };
  if (faultHook) await faultHook("dead-letter:after", { jobIds: [draft.jobId] });

  let alertError: unknown;
  try {
    // Past the invocation's return the record is back in the queue: its next delivery finds this
    // row and alerts then.
    if (failed.signal?.aborted) throw failed.signal.reason;
    await publishDeadLetterRecorded(
      sink.eventBridge,
      sink.opsBusName,
      deadLetterRecordedDetail({
        id: recorded.id,
        consumer: sink.consumer,
        queue: failed.queueUrl,
        job_id: draft.jobId,
        error_kind: recorded.errorKind,
        attempts: failed.attempts,
        correlation_id: draft.correlationId,
        lastError,
        first_recorded: recorded.created,
        job_fingerprint: fingerprintHex(failed.jobFingerprint),
        fence_fingerprint: fingerprintHex(failed.fenceFingerprint),
      }),
      failed.signal,
    );
  } catch (error) {
    alertError = error;
  }
  return {
    status: "dead-lettered",
    kind: recorded.errorKind,
    attempts: failed.attempts,
    deadLetterId: recorded.id,
    created: recorded.created,
    form,
    ...(alertError === undefined ? {} : { alertError }),
  };
}

/**
 * `last_error`: the failure itself, or for exhausted retries the failure that ran out of them,
 * with why it was not retried when that was not the attempt count (retention, the receive limit).
 */
function lastErrorOf(failed: FailedMessage): LastError {
  const described = describeError(failed.error, { unwrapCause: failed.kind === "exhausted" });
  const { error } = failed;
  // Only an exhausted failure is the harness's own wrapper; anything else may be any thrown value.
  return failed.kind === "exhausted" &&
    error instanceof RetriesExhaustedError &&
    error.reason !== EXHAUSTED_REASON.attempts
    ? withNote(described, `not retried: ${error.message}`)
    : described;
}

function draftOf(
  consumer: string,
  failed: FailedMessage,
  lastError: ReturnType<typeof describeError>,
  form: StoredForm,
): DeadLetterDraft {
  const text = failed.record.body ?? "";
  const attributes = messageAttributesOf(failed.record, failed.traceparent);
  if (failed.firstSentAt !== undefined) attributes.first_sent_at = failed.firstSentAt.toISOString();
  const standIn = messageIdStandIn(failed.record.messageId);
  const identity = form < 3 ? failed.identity : { jobId: standIn, tenantId: null, correlationId: standIn };
  return {
    jobId: identity.jobId,
    consumer,
    queue: failed.queueUrl,
    tenantId: identity.tenantId,
    correlationId: identity.correlationId,
    body: storedBody(text, form === 3 ? BODY_FORM.utf16 : undefined),
    payloadJson: form === 1 ? jsonbCandidate(text) : null,
    messageAttributes: form === 1 ? attributes : (storableJson(attributes) as Record<string, unknown>),
    attempts: failed.attempts,
    attemptHistory: failed.attemptHistory ?? [],
    errorKind: failed.kind,
    lastError,
    jobFingerprint: failed.jobFingerprint,
    fenceFingerprint: failed.fenceFingerprint,
    // The message id is not the job's: the job's fence cannot speak for it.
    checkFence: failed.checkFence && form < 3,
  };
}

/**
 * Whether the server refused the row for what it holds (SQLSTATE class 22 data exception, 54
 * program limit such as jsonb's nesting, 23514 check violation): another form can succeed.
 */
function refusedForContent(error: unknown): boolean {
  const code = (error as { code?: unknown }).code;
  return typeof code === "string" && (code.startsWith("22") || code.startsWith("54") || code === "23514");
}

/**
 * What the row keeps of the SQS message besides its body: everything a replay needs to send it
 * again as it was (message attributes, FIFO group and deduplication ids) and what an operator needs
 * to trace it (its X-Ray header, and the trace context a replay continues: the span that
 * dead-lettered it, else the context it arrived with).
 */
export function messageAttributesOf(record: SQSRecord, traceparent?: string | null): Record<string, unknown> {
  const attributes: Record<string, unknown> = {
    message_id: record.messageId,
    sent_timestamp: record.attributes.SentTimestamp,
    approximate_receive_count: record.attributes.ApproximateReceiveCount,
    message_attributes: record.messageAttributes ?? {},
  };
  if (record.attributes.MessageGroupId !== undefined)
    attributes.message_group_id = record.attributes.MessageGroupId;
  if (record.attributes.MessageDeduplicationId !== undefined) {
    attributes.message_deduplication_id = record.attributes.MessageDeduplicationId;
  }
  const header = (record.attributes as { AWSTraceHeader?: unknown }).AWSTraceHeader;
  if (typeof header === "string") attributes.aws_trace_header = header;
  const created = creationContext(record);
  const context = traceparent ?? (created ? formatTraceparent(created) : null);
  if (context !== null) attributes.trace_context = context;
  return attributes;
}
