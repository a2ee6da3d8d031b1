/**
 * The path of one SQS record, from event to ack (SPEC §2–§5, §8). Every step of the guarantee is
 * here, in the order it runs; the Middy middlewares of shared/middleware/ only call these steps,
 * and the batch processor (sqs-batch.ts) only decides which records run and reports the outcomes.
 *
 *   1 parse    the body becomes a job (its fingerprint taken), or poison
 *   2 fence    BEGIN + fence insert → a fresh fence (go on) | the job's own fence (duplicate)
 *              | another job's fence under this id (conflict)
 *   3 work     the consumer's effect, on the fence's connection, guarded (queries only)
 *   4 commit   COMMIT, checked to be the fence's transaction → applied
 *   5 decide   a failure: transient with attempts left → retry (hidden for the backoff delay);
 *              poison | hard | conflict | exhausted → dead letter (own transaction), alert, ack;
 *              a dead letter that cannot be written → left in the queue
 *   6 observe  one metric per outcome, a log line for anything but success or a duplicate
 *
 * A record is acked only when it was applied, was a duplicate, or its dead letter committed.
 *
 * In batch-commit mode the batch's records share one fence transaction (batch-transaction.ts),
 * which runs steps 2–4 for all of them first; each record then arrives here carrying, as values,
 * how the batch read it (step 1 takes that) and its settlement (step 2 takes that instead of
 * opening a transaction of its own).
 */

import type { Logger } from "@aws-lambda-powertools/logger";
import { type Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import { ChangeMessageVisibilityCommand, type SQSClient } from "@aws-sdk/client-sqs";
import type { SQSRecord } from "aws-lambda";
import type pg from "pg";
import type { z } from "zod";
import { errorKindOf, isTransient } from "../dead-letters/classify.ts";
import { ERROR_KIND } from "../dead-letters/error-kind.ts";
import { describeError } from "../dead-letters/last-error.ts";
import { type DeadLetterSink, writeDeadLetter } from "../dead-letters/write-dead-letter.ts";
import { type Job, type MessageIdentity, messageIdStandIn, parseMessage } from "../envelope/envelope.ts";
import { fingerprintHex, jobFingerprint } from "../envelope/fingerprint.ts";
import {
  ForeignTransactionError,
  JobConflictError,
  POISON_REASON,
  PoisonMessageError,
  RetriesExhaustedError,
} from "../errors.ts";
import { FenceTransaction, settlementOfExisting } from "../fence/fence-transaction.ts";
import type { Transaction } from "../fence/work-transaction.ts";
import { deadLetteredMetric, METRIC } from "../metrics/names.ts";
import { isLastAttempt, type RetryPolicy, retryDelaySeconds } from "../retry/policy.ts";
import type {
  BatchSettlement,
  JobMessage,
  ReadMessage,
  RecordContext,
  RecordOutcome,
} from "./record-context.ts";
import { attemptOf } from "./sqs-batch.ts";

/** The job as `work` receives it. */
export interface WorkJob<P> extends Job<P> {
  /** 1 on the first delivery; the record's ApproximateReceiveCount. */
  readonly attempt: number;
  /** The SQS message id of this delivery. */
  readonly messageId: string;
}

/** Receives each record's outcome after its metric and log line (the local stack's progress). */
export type OutcomeObserver = (outcome: RecordOutcome, rc: RecordContext) => void;

/** What the protocol needs: the consumer's definition and the environment's clients. */
export interface RecordProtocolOptions<S extends z.ZodType> {
  readonly consumer: string;
  readonly payload: S;
  readonly work: (job: WorkJob<z.output<S>>, tx: Transaction) => Promise<void>;
  /** Narrows the fingerprint to the payload fields that define the effect. @default the whole payload */
  readonly fingerprint?: (payload: z.output<S>) => unknown;
  readonly pool: pg.Pool;
  readonly ttlSeconds: number;
  readonly sqs: SQSClient;
  readonly retryPolicy: RetryPolicy;
  /** Uniform [0, 1) source for the backoff jitter. */
  readonly random: () => number;
  readonly deadLetters: DeadLetterSink;
  readonly metrics: Metrics;
  readonly logger: Logger;
  readonly onOutcome?: OutcomeObserver;
}

/** The steps of one record; one instance per consumer, no state of its own between records. */
export class RecordProtocol<S extends z.ZodType> {
  readonly #o: RecordProtocolOptions<S>;

  constructor(options: RecordProtocolOptions<S>) {
    this.#o = options;
  }

  /** Step 1, pure: the record's body as a job with its fingerprint, or PoisonMessageError. */
  readMessage(record: SQSRecord): ReadMessage<z.output<S>> {
    return readMessage(record, this.#o.payload, this.#o.fingerprint);
  }

  /** Step 1 on the record's context: throws PoisonMessageError for a body that is not a job. */
  parse(rc: RecordContext<z.output<S>>): void {
    const read = rc.read ?? this.readMessage(rc.record);
    if ("poison" in read) {
      rc.state = { step: "poison", identity: read.identity, fingerprint: read.fingerprint };
      throw read.poison;
    }
    rc.state = { step: "parsed", message: read };
  }

  /**
   * Step 2: the fence. Opens the record's own fence transaction, or takes the batch's settlement.
   * Throws JobConflictError when the job id's fence belongs to another job.
   */
  async fence(rc: RecordContext<z.output<S>>): Promise<void> {
    if (rc.state.step !== "parsed") return;
    const { message } = rc.state;
    const settlement = rc.settlement ?? (await this.#openFence(message));
    switch (settlement.status) {
      case "open":
        rc.state = { step: "open", message, fence: settlement.fence };
        return;
      case "applied":
        rc.state = { step: "applied", message, fenceMs: settlement.fenceMs };
        return;
      case "duplicate":
        rc.state = { step: "duplicate", message };
        return;
      case "conflict":
        throw new JobConflictError(message.job.jobId, message.fingerprint, settlement.fenceFingerprint);
      case "failed":
        throw settlement.error;
    }
  }

  async #openFence(
    message: JobMessage<z.output<S>>,
  ): Promise<BatchSettlement | { status: "open"; fence: FenceTransaction }> {
    const { job, fingerprint } = message;
    const { transaction, fresh, existing } = await FenceTransaction.open(this.#o.pool, {
      consumer: this.#o.consumer,
      ttlSeconds: this.#o.ttlSeconds,
      jobs: [{ jobId: job.jobId, tenantId: job.tenantId, fingerprint }],
    });
    if (fresh.has(job.jobId)) return { status: "open", fence: transaction };
    await transaction.abandon();
    return settlementOfExisting(fingerprint, existing.get(job.jobId) ?? null);
  }

  /** Step 3: the work, when the record holds a fresh fence of its own. */
  async work(rc: RecordContext<z.output<S>>): Promise<RecordOutcome> {
    const { state } = rc;
    if (state.step === "duplicate") return { status: "duplicate" };
    if (state.step === "applied") return { status: "applied" };
    if (state.step !== "open") throw new RangeError(`a record reached its work at step ${state.step}`);
    await this.#o.work(workJob(rc.record, state.message.job), state.fence.tx);
    return { status: "applied" };
  }

  /** Step 4: COMMIT (the record's own fence transaction only). */
  async commit(rc: RecordContext<z.output<S>>): Promise<void> {
    const { state } = rc;
    if (state.step !== "open") return;
    const fenceMs = await state.fence.commit();
    rc.state = { step: "applied", message: state.message, fenceMs };
  }

  /**
   * Steps 3–4 failed: roll the record's own fence transaction back. Returns the error the failure
   * becomes when the transaction turned out not to be the fence's any more (ForeignTransactionError).
   */
  async abandon(rc: RecordContext<z.output<S>>): Promise<ForeignTransactionError | undefined> {
    return rc.state.step === "open" ? rc.state.fence.abandon() : undefined;
  }

  /** Step 5: what a failure becomes. Never throws. */
  async decide(rc: RecordContext<z.output<S>>, error: unknown): Promise<RecordOutcome> {
    if (isTransient(error)) {
      if (!isLastAttempt(rc.attempt, this.#o.retryPolicy)) return this.#retry(rc, error);
      return this.#deadLetter(rc, new RetriesExhaustedError(rc.attempt, error));
    }
    return this.#deadLetter(rc, error);
  }

  async #retry(rc: RecordContext<z.output<S>>, error: unknown): Promise<RecordOutcome> {
    const delaySeconds = retryDelaySeconds(rc.attempt, this.#o.retryPolicy, this.#o.random);
    let visibilityChanged = true;
    try {
      await this.#o.sqs.send(
        new ChangeMessageVisibilityCommand({
          QueueUrl: rc.queueUrl,
          ReceiptHandle: rc.record.receiptHandle,
          VisibilityTimeout: delaySeconds,
        }),
      );
    } catch {
      // SPEC §4: report the failure anyway; the queue's own visibility timeout then applies.
      visibilityChanged = false;
    }
    return { status: "retry", delaySeconds, visibilityChanged, error };
  }

  async #deadLetter(rc: RecordContext<z.output<S>>, error: unknown): Promise<RecordOutcome> {
    const kind = errorKindOf(error) ?? ERROR_KIND.hard;
    const { identity, fingerprint } = whoFailed(rc);
    const written = await writeDeadLetter(this.#o.deadLetters, {
      record: rc.record,
      queueUrl: rc.queueUrl,
      attempts: rc.attempt,
      kind,
      error,
      identity,
      jobFingerprint: fingerprint,
      fenceFingerprint: error instanceof JobConflictError ? error.fenceFingerprint : null,
      // The job's fence speaks for a job that failed; not for poison (its id may not be a job's),
      // a conflict (the fence is the other job's) or work that ended the fence's transaction itself.
      checkFence:
        fingerprint !== null &&
        kind !== ERROR_KIND.poison &&
        kind !== ERROR_KIND.conflict &&
        !(error instanceof ForeignTransactionError),
    });
    switch (written.status) {
      case "applied":
        // An earlier attempt committed and only its answer was lost: a duplicate, not a failure.
        return { status: "duplicate" };
      case "dead-letter-failed":
        return { status: "dead-letter-failed", kind, error, writeError: written.writeError };
      case "dead-lettered":
        return {
          status: "dead-lettered",
          kind: written.kind,
          deadLetterId: written.deadLetterId,
          created: written.created,
          error,
          ...(written.alertError === undefined ? {} : { alertError: written.alertError }),
        };
    }
  }

  /** Step 6: one metric and, for anything but success or a duplicate, one log line. Never throws. */
  observe(rc: RecordContext<z.output<S>>, outcome: RecordOutcome): void {
    observeRecord(this.#o, rc, outcome);
  }
}

/** The fingerprint, or null for a payload with no canonical form (a number beyond a double's range). */
function tryFingerprint(tenantId: string, payload: unknown): Buffer | null {
  try {
    return jobFingerprint(tenantId, payload);
  } catch {
    return null;
  }
}

/**
 * Step 1, pure: a record's body as a job with its fingerprint, or poison. Never throws: a schema or
 * fingerprint function that throws makes the message poison (it would throw again on every retry).
 * The consumer's protocol and the backstop drain read messages with it alike.
 */
export function readMessage<S extends z.ZodType>(
  record: SQSRecord,
  payload: S,
  narrow?: (payload: z.output<S>) => unknown,
): ReadMessage<z.output<S>> {
  const parsed = parseMessage(record.body ?? "", payload, record.messageId);
  const { identity } = parsed;
  if (!parsed.ok) {
    // The job the message would have been, when its envelope could be read: what replay and the
    // daily escalation compare with a fence.
    const fingerprint =
      parsed.envelopePayload === undefined || identity.tenantId === null
        ? null
        : tryFingerprint(identity.tenantId, parsed.envelopePayload);
    return { poison: parsed.error, identity, fingerprint };
  }
  try {
    const narrowed = narrow ? narrow(parsed.job.payload) : parsed.envelopePayload;
    return { job: parsed.job, identity, fingerprint: jobFingerprint(parsed.job.tenantId, narrowed) };
  } catch (error) {
    // A payload the consumer's fingerprint cannot read is one its fence cannot guard.
    return {
      poison: new PoisonMessageError(
        POISON_REASON.invalidPayload,
        `no fingerprint: ${describeError(error).message}`,
      ),
      identity,
      fingerprint: null,
    };
  }
}

/** The job as the work sees it. */
export function workJob<P>(record: SQSRecord, job: Job<P>): WorkJob<P> {
  return { ...job, attempt: attemptOf(record), messageId: record.messageId };
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

/** The keys every log line about a record carries. */
export function recordLogKeys(rc: RecordContext): {
  job_id: string;
  correlation_id: string;
  message_id: string;
  attempt: number;
} {
  const { identity } = whoFailed(rc);
  return {
    job_id: identity.jobId,
    correlation_id: identity.correlationId,
    message_id: rc.record.messageId,
    attempt: rc.attempt,
  };
}

/** Step 6 for any record path (the backstop drain's too). Never throws. */
export function observeRecord(
  o: Pick<RecordProtocolOptions<z.ZodType>, "metrics" | "logger" | "onOutcome">,
  rc: RecordContext,
  outcome: RecordOutcome,
): void {
  const { metrics, logger } = o;
  const keys = recordLogKeys(rc);
  try {
    o.onOutcome?.(outcome, rc);
  } catch {
    // An observer is for watching; it must never change what happens to the record.
  }
  switch (outcome.status) {
    case "applied":
      metrics.addMetric(METRIC.succeeded, MetricUnit.Count, 1);
      if (rc.state.step === "applied" && rc.state.fenceMs !== undefined)
        metrics.addMetric(METRIC.fenceLatency, MetricUnit.Milliseconds, rc.state.fenceMs);
      logger.debug("job applied", keys);
      break;
    case "duplicate":
      metrics.addMetric(METRIC.duplicate, MetricUnit.Count, 1);
      logger.debug("duplicate delivery skipped", keys);
      break;
    case "retry":
      metrics.addMetric(METRIC.retried, MetricUnit.Count, 1);
      if (!outcome.visibilityChanged) metrics.addMetric(METRIC.retryScheduleFailed, MetricUnit.Count, 1);
      logger.warn("job failed, retry scheduled", {
        ...keys,
        delay_seconds: outcome.delaySeconds,
        visibility_changed: outcome.visibilityChanged,
        error: describeError(outcome.error),
      });
      break;
    case "dead-lettered":
      if (outcome.kind === ERROR_KIND.conflict) metrics.addMetric(METRIC.conflict, MetricUnit.Count, 1);
      metrics.addMetric(deadLetteredMetric(outcome.kind), MetricUnit.Count, 1);
      logger.error("dead letter recorded", {
        ...keys,
        dead_letter_id: outcome.deadLetterId,
        error_kind: outcome.kind,
        first_recorded: outcome.created,
        ...(outcome.error instanceof JobConflictError
          ? {
              job_fingerprint: fingerprintHex(outcome.error.jobFingerprint),
              fence_fingerprint: fingerprintHex(outcome.error.fenceFingerprint),
            }
          : {}),
        error: describeError(outcome.error, { unwrapCause: outcome.kind === ERROR_KIND.exhausted }),
      });
      if (outcome.alertError !== undefined) {
        metrics.addMetric(METRIC.alertFailed, MetricUnit.Count, 1);
        logger.error("DeadLetterRecorded alert failed; the dead letter is recorded", {
          ...keys,
          dead_letter_id: outcome.deadLetterId,
          error: describeError(outcome.alertError),
        });
      }
      break;
    case "dead-letter-failed":
      metrics.addMetric(METRIC.deadLetterWriteFailed, MetricUnit.Count, 1);
      logger.error("dead letter could not be written; the message stays in the queue", {
        ...keys,
        error_kind: outcome.kind,
        error: describeError(outcome.error),
        write_error: describeError(outcome.writeError),
      });
      break;
    case "failed":
      metrics.addMetric(METRIC.recordFailed, MetricUnit.Count, 1);
      logger.error("record failed with an unclassified error; the message stays in the queue", {
        ...keys,
        error: describeError(outcome.error),
      });
      break;
  }
}
