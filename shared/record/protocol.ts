/**
 * The path of one SQS record, from event to ack (docs/design.md §2–§5). Every step of the guarantee is
 * here, in the order it runs; the Middy middlewares of shared/middleware/ only call these steps,
 * and the batch processor (sqs-batch.ts) only decides which records run and reports the outcomes.
 *
 *   1 parse    the body becomes a job (its fingerprint taken), or poison
 *   2 fence    a redelivery first claims the delivery in the attempt ledger (one statement of
 *              its own: it learns the failures so far, and an interruption if the delivery
 *              before it never reported back; too many → interrupted); then
 *              BEGIN + fence insert → a fresh fence (go on) | the job's own fence (duplicate)
 *              | another job's fence under this id (conflict) | a lock wait behind another
 *              delivery of the job (held: back to the queue, no attempt spent)
 *   3 work     the consumer's effect, on the fence's connection, guarded (queries only)
 *   4 commit   COMMIT, checked to be the fence's transaction → applied
 *   5 decide   a failure: transient → recorded in the ledger (its own statement), then with
 *              attempts left and a retry its queue can keep → retry (hidden for the backoff);
 *              poison | hard | conflict | exhausted | interrupted → dead letter (own
 *              transaction), alert, ack; a dead letter that cannot be written → left in the queue
 *   6 observe  one metric per outcome, a log line for anything but success or a duplicate
 *
 * A record is acked only when it was applied, was a duplicate, or its dead letter committed.
 * An attempt is a run of the work that failed: deliveries that run nothing cost none. A
 * first delivery that succeeds reads and writes nothing but its fence and its work. Once the
 * invocation's time is up (the record's `signal`), no step does anything more for the record.
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
import {
  type AttemptEntry,
  claimDelivery,
  type DeliveryKey,
  HISTORY_LIMIT,
  recordAttempt,
  releaseDelivery,
} from "../db/queries/message-attempts.ts";
import { errorKindOf, isFenceHeld, isLedgerUnavailable, isTransient } from "../dead-letters/classify.ts";
import { type DeadLetterSink, writeDeadLetter } from "../dead-letters/write-dead-letter.ts";
import { type Job, type MessageIdentity, messageIdStandIn, parseMessage } from "../envelope/envelope.ts";
import { fingerprintHex, jobFingerprint } from "../envelope/fingerprint.ts";
import { ERROR_KIND } from "../errors/error-kind.ts";
import { describeError } from "../errors/last-error.ts";
import {
  EXHAUSTED_REASON,
  ForeignTransactionError,
  InterruptedJobError,
  InvocationDeadlineError,
  JobConflictError,
  LedgerUnavailableError,
  POISON_REASON,
  PoisonMessageError,
  RetriesExhaustedError,
  WorkLeftStatementsError,
} from "../errors.ts";
import { FenceTransaction, settlementOfExisting } from "../fence/fence-transaction.ts";
import type { Transaction } from "../fence/work-transaction.ts";
import { deadLetteredMetric, METRIC } from "../metrics/names.ts";
import {
  type FollowUpSchemas,
  followUpSender,
  refuseFollowUps,
  type SenderSpec,
  type StagedFollowUp,
} from "../outbox/follow-up.ts";
import { relayAfterCommit, type TargetQueues } from "../outbox/relay.ts";
import { isLastAttempt, type RetryPolicy, retryDelaySeconds } from "../retry/policy.ts";
import { inSpan, type RecordSpans, traceparentOf } from "../tracing/spans.ts";
import type {
  BatchSettlement,
  JobMessage,
  ReadMessage,
  RecordContext,
  RecordOutcome,
} from "./record-context.ts";
import { untilDeadline } from "./sqs-batch.ts";

/** The job as `work` receives it. */
export interface WorkJob<P> extends Job<P> {
  /** Which run of the work this is: 1, then one more after each recorded failure. */
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
  // biome-ignore lint/suspicious/noExplicitAny: the definition's own follow-up targets
  readonly work: (job: WorkJob<z.output<S>>, tx: Transaction<any>) => Promise<void>;
  /**
   * The follow-ups the consumer may send (its definition's `sends`) and each target's queue.
   * @default none: `tx.send` refuses every follow-up
   */
  readonly followUps?: SenderSpec & { readonly queues: TargetQueues };
  /** Narrows the fingerprint to the payload fields that define the effect. @default the whole payload */
  readonly fingerprint?: (payload: z.output<S>) => unknown;
  readonly pool: pg.Pool;
  readonly ttlSeconds: number;
  readonly sqs: SQSClient;
  readonly retryPolicy: RetryPolicy;
  /** Confirmed interruptions after which a message is dead-lettered as `interrupted`. */
  readonly maxInterruptions: number;
  /** The source queue's retention: a retry that would outlive it is dead-lettered now. */
  readonly queueRetentionSeconds: number;
  /** The function timeout: the time the delivery after a retry needs to run and record its end. */
  readonly functionTimeoutSeconds: number;
  /** The source queue's redrive count, when known: the receive after it goes to the backstop. */
  readonly maxReceiveCount?: number;
  /** Uniform [0, 1) source for the backoff jitter. */
  readonly random: () => number;
  /** Wall clock in ms, for retention. @default Date.now */
  readonly now?: () => number;
  readonly deadLetters: DeadLetterSink;
  readonly metrics: Metrics;
  readonly logger: Logger;
  readonly onOutcome?: OutcomeObserver;
  /** The records' spans, ended with their outcomes. @default none */
  readonly spans?: RecordSpans;
}

/** The steps of one record; one instance per consumer, no state of its own between records. */
export class RecordProtocol<S extends z.ZodType> {
  readonly #o: RecordProtocolOptions<S>;
  /** The `send` of a consumer that declares no follow-ups: the same for every job, made once. */
  readonly #refuseFollowUps: Transaction<FollowUpSchemas>["send"];

  constructor(options: RecordProtocolOptions<S>) {
    this.#o = options;
    this.#refuseFollowUps = refuseFollowUps(options.consumer);
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
   * Step 2: the fence. Opens the record's own fence transaction, or takes the batch's settlement
   * (first deliveries only: a redelivery always takes this path). A redelivery first claims its
   * delivery in the attempt ledger. Throws JobConflictError when the job id's fence belongs to
   * another job, InterruptedJobError when the message has been interrupted too often,
   * FenceLockTimeoutError when another delivery of the job holds its fence.
   */
  async fence(rc: RecordContext<z.output<S>>): Promise<void> {
    if (rc.state.step !== "parsed") return;
    const { message } = rc.state;
    if (!rc.settlement) {
      await this.#claim(rc);
      throwIfAborted(rc);
    }
    const settlement = rc.settlement ?? (await this.#openFence(message));
    switch (settlement.status) {
      case "open":
        rc.state = { step: "open", message, fence: settlement.fence };
        // A fence granted after the invocation's deadline (a lock wait that outlasted it) is rolled
        // back here, before any work: nothing runs for the record after its invocation returned.
        throwIfAborted(rc);
        // Decided holding the job's fence lock, so no live delivery of the job is running: a message
        // interrupted too often, or one whose last attempt already failed (its dead letter written,
        // or being written, when its invocation ended) does not run again.
        this.#refuseSpent(rc);
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

  /**
   * A redelivery marks its work as started, right before its fence, in a statement of its own (a
   * first delivery has nothing to learn and writes nothing): it learns its failures so far, and an
   * interruption is counted when the delivery before it started its work and never reported back.
   */
  async #claim(rc: RecordContext<z.output<S>>): Promise<void> {
    if (rc.claimed || rc.receiveCount <= 1) return;
    try {
      // Committed only if the invocation's deadline has not passed meanwhile: a claim that landed
      // after the return would leave a marker for a delivery whose work never ran.
      rc.ledger = await beforeDeadline(this.#o.pool, rc.signal, (db) =>
        claimDelivery(db, this.#o.consumer, deliveryKey(rc)),
      );
    } catch (error) {
      if (rc.signal?.aborted)
        throw new InvocationDeadlineError("the invocation's time ran out during the claim");
      throw new LedgerUnavailableError(error);
    }
    rc.claimed = true;
  }

  #refuseSpent(rc: RecordContext<z.output<S>>): void {
    const { interruptions, failures, history } = rc.ledger;
    if (interruptions >= this.#o.maxInterruptions) throw new InterruptedJobError(interruptions);
    if (failures > 0 && isLastAttempt(failures, this.#o.retryPolicy)) {
      const last = [...history].reverse().find((e) => e.kind === "failure");
      const cause = Object.assign(new Error(last?.error.message ?? "the last attempt failed"), {
        name: last?.error.name ?? "Error",
      });
      throw new RetriesExhaustedError(failures, cause);
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
    throwIfAborted(rc);
    rc.working = true;
    try {
      const { job } = state.message;
      const tx = this.workTransaction(state.fence, job, traceparentOf(rc.span));
      await inSpan(rc.span, () => this.#o.work(workJob(rc.record, job, currentAttempt(rc)), tx));
    } finally {
      rc.working = false;
    }
    const left = state.fence.leftStatements;
    if (left > 0) throw new WorkLeftStatementsError(left);
    // A follow-up refused and caught by the work: the job is not done as written.
    if (state.fence.refusal) throw state.fence.refusal;
    return { status: "applied" };
  }

  /**
   * What the work of `job` is given on `fence`: its queries, and `send`, which stages each
   * follow-up in the fence transaction (written with the COMMIT), carrying `traceparent`.
   */
  workTransaction(
    fence: FenceTransaction,
    job: Job<unknown>,
    traceparent: string | null,
  ): Transaction<FollowUpSchemas> {
    const { followUps } = this.#o;
    const send = followUps
      ? followUpSender(
          followUps,
          job,
          traceparent,
          (f) => fence.stage(f),
          (refused) => fence.refuse(refused),
        )
      : this.#refuseFollowUps;
    return Object.freeze({ query: fence.tx.query, send }) as Transaction<FollowUpSchemas>;
  }

  /** Step 4: COMMIT (the record's own fence transaction only), then the relay of its follow-ups. */
  async commit(rc: RecordContext<z.output<S>>): Promise<void> {
    const { state } = rc;
    if (state.step !== "open") return;
    // Past the invocation's deadline nothing may commit: the record is reported back unfinished.
    throwIfAborted(rc);
    const fenceMs = await state.fence.commit();
    rc.state = { step: "applied", message: state.message, fenceMs };
    await this.relay(state.fence.followUps, recordLogKeys(rc));
  }

  /**
   * Sends what a committed transaction wrote to the outbox (per-record: its record's; batch mode:
   * the batch's). Never throws: what it cannot send waits for the scheduled relay.
   */
  async relay(
    followUps: readonly StagedFollowUp[],
    logKeys: Readonly<Record<string, unknown>> = {},
  ): Promise<void> {
    const target = this.#o.followUps;
    if (followUps.length === 0 || !target) return;
    try {
      await relayAfterCommit(
        {
          pool: this.#o.pool,
          sqs: this.#o.sqs,
          consumer: this.#o.consumer,
          queues: target.queues,
          metrics: this.#o.metrics,
          logger: this.#o.logger,
        },
        followUps,
        logKeys,
      );
    } catch (error) {
      // The effect committed and its rows are in the outbox: the scheduled relay sends them.
      this.#o.logger.error("relay after COMMIT failed; the scheduled relay sends the follow-ups", {
        ...logKeys,
        error: describeError(error),
      });
    }
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
    // The invocation has returned (or is about to): the record is back in the queue already.
    if (rc.signal?.aborted) return { status: "interrupted", wasRunning: true };
    if (isFenceHeld(error)) return this.#held(rc);
    const attempt = currentAttempt(rc);
    // The claim failed before anything ran: no run to count, and the ledger cannot count it anyway.
    if (isLedgerUnavailable(error)) return unrecordedRetry(attempt, error);
    if (!isTransient(error)) return this.#deadLetter(rc, error);
    try {
      rc.ledger = await recordAttempt(
        this.#o.pool,
        this.#o.consumer,
        deliveryKey(rc),
        attemptEntry(rc, error),
      );
    } catch {
      // The failure cannot be counted (the database is unreachable): the queue's own visibility
      // timeout paces the redeliveries, and its redrive takes the message to the backstop if this
      // goes on (the timings are validated for it: delivery-timings.ts).
      return unrecordedRetry(attempt, error);
    }
    const failures = rc.ledger.failures;
    if (isLastAttempt(failures, this.#o.retryPolicy)) {
      return this.#deadLetter(rc, new RetriesExhaustedError(failures, error));
    }
    const { maxReceiveCount } = this.#o;
    if (maxReceiveCount !== undefined && rc.receiveCount >= maxReceiveCount) {
      return this.#deadLetter(
        rc,
        new RetriesExhaustedError(
          failures,
          error,
          EXHAUSTED_REASON.receiveLimit,
          ` (receive ${rc.receiveCount} of ${maxReceiveCount}; the next goes to the backstop)`,
        ),
      );
    }
    const delaySeconds = retryDelaySeconds(failures, this.#o.retryPolicy, this.#o.random);
    const late = this.#outlivesRetention(rc, delaySeconds);
    if (late)
      return this.#deadLetter(
        rc,
        new RetriesExhaustedError(failures, error, EXHAUSTED_REASON.retention, late),
      );
    const visibilityChanged = await this.#hide(rc, delaySeconds);
    return { status: "retry", attempt: failures, recorded: true, delaySeconds, visibilityChanged, error };
  }

  /**
   * Why a retry after `delaySeconds` would come too late, or undefined: the message must still be
   * in its queue when it comes back, with a function timeout left to run and record its outcome.
   */
  #outlivesRetention(rc: RecordContext<z.output<S>>, delaySeconds: number): string | undefined {
    const sentAt = Number(rc.record.attributes.SentTimestamp);
    if (!Number.isFinite(sentAt) || sentAt <= 0) return undefined;
    const deletedAt = sentAt + this.#o.queueRetentionSeconds * 1000;
    const now = (this.#o.now ?? Date.now)();
    const needed = now + (delaySeconds + this.#o.functionTimeoutSeconds) * 1000;
    if (needed < deletedAt) return undefined;
    return (
      ` (sent ${new Date(sentAt).toISOString()}, retention ${this.#o.queueRetentionSeconds} s: SQS deletes it at ` +
      `${new Date(deletedAt).toISOString()}, before a retry in ${delaySeconds} s could run)`
    );
  }

  /** Another delivery of the job holds its fence: back to the queue, nothing counted. */
  async #held(rc: RecordContext<z.output<S>>): Promise<RecordOutcome> {
    if (rc.claimed) {
      try {
        await releaseDelivery(this.#o.pool, this.#o.consumer, deliveryKey(rc));
      } catch {
        // A marker left set can only count an interruption against a job the holder decides.
      }
    }
    const delaySeconds = retryDelaySeconds(1, this.#o.retryPolicy, this.#o.random);
    return { status: "held", delaySeconds, visibilityChanged: await this.#hide(rc, delaySeconds) };
  }

  /** Hides the message for `delaySeconds`; false when SQS could not be told (the record is reported anyway). */
  async #hide(rc: RecordContext<z.output<S>>, delaySeconds: number): Promise<boolean> {
    try {
      await this.#o.sqs.send(
        new ChangeMessageVisibilityCommand({
          QueueUrl: rc.queueUrl,
          ReceiptHandle: rc.record.receiptHandle,
          VisibilityTimeout: delaySeconds,
        }),
        rc.signal ? { abortSignal: rc.signal } : {},
      );
      return true;
    } catch {
      return false;
    }
  }

  /**
   * The invocation's time ran out while the record was running: its transaction is rolled back
   * (the connection destroyed, so nothing the work still sends reaches the server) and, with what
   * time is left, the interruption is recorded against it. Never throws.
   */
  async interrupt(rc: RecordContext<z.output<S>>, timeoutMs: number): Promise<void> {
    if (rc.state.step === "open") rc.state.fence.interrupt();
    if (rc.working) {
      const entry = attemptEntry(
        rc,
        new InvocationDeadlineError("the invocation's time ran out while the record's work ran"),
      );
      await withinDeadline(this.#o.pool, timeoutMs, (db) =>
        recordAttempt(db, this.#o.consumer, deliveryKey(rc), { ...entry, kind: "interruption" }),
      );
    } else if (rc.claimed) {
      // Stopped before or after its work (a slow claim, connection, lock or dead-letter write):
      // not the work's interruption. Its marker goes, so the next delivery does not count one.
      await withinDeadline(this.#o.pool, timeoutMs, (db) =>
        releaseDelivery(db, this.#o.consumer, deliveryKey(rc)),
      );
    }
  }

  async #deadLetter(rc: RecordContext<z.output<S>>, error: unknown): Promise<RecordOutcome> {
    const kind = errorKindOf(error) ?? ERROR_KIND.hard;
    const { identity, fingerprint } = whoFailed(rc);
    // A transient failure is in the ledger already; a hard one is this run's, counted here.
    const ranAndFailed = kind === ERROR_KIND.hard;
    const history = ranAndFailed ? [...rc.ledger.history, attemptEntry(rc, error)] : rc.ledger.history;
    const attempts = Math.max(1, rc.ledger.failures + (ranAndFailed ? 1 : 0));
    const written = await writeDeadLetter(this.#o.deadLetters, {
      ...(rc.signal ? { signal: rc.signal } : {}),
      record: rc.record,
      queueUrl: rc.queueUrl,
      attempts,
      attemptHistory: history.slice(-HISTORY_LIMIT),
      kind,
      error,
      identity,
      jobFingerprint: fingerprint,
      fenceFingerprint: error instanceof JobConflictError ? error.fenceFingerprint : null,
      traceparent: traceparentOf(rc.span),
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
          attempts: written.attempts,
          deadLetterId: written.deadLetterId,
          created: written.created,
          error,
          ...(written.alertError === undefined ? {} : { alertError: written.alertError }),
        };
    }
  }

  /** Step 6: one metric and, for anything but success or a duplicate, one log line; the span ends. Never throws. */
  observe(rc: RecordContext<z.output<S>>, outcome: RecordOutcome): void {
    observeRecord(this.#o, rc, outcome);
    try {
      const { identity } = whoFailed(rc);
      this.#o.spans?.end(rc.record, outcome, identity);
    } catch {
      // Tracing is for watching: an SDK's failure must never change what happens to the record.
    }
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

/** The job as the work sees it, on its `attempt`th run. */
export function workJob<P>(record: SQSRecord, job: Job<P>, attempt: number): WorkJob<P> {
  return { ...job, attempt, messageId: record.messageId };
}

/** A failure not counted: back to the queue on its own visibility timeout. */
function unrecordedRetry(attempt: number, error: unknown): RecordOutcome {
  return { status: "retry", attempt, recorded: false, delaySeconds: null, visibilityChanged: false, error };
}

/** The run the record is on: one more than the failures recorded for its message. */
export function currentAttempt(rc: RecordContext): number {
  return rc.ledger.failures + 1;
}

/** The ledger's key for the record's delivery. */
function deliveryKey(rc: RecordContext): DeliveryKey {
  return {
    messageId: rc.record.messageId,
    jobId: whoFailed(rc).identity.jobId,
    receiveCount: rc.receiveCount,
  };
}

/** Bound on an error message kept in the history (last_error keeps the full one). */
const HISTORY_MESSAGE_LIMIT = 500;

/** The history entry of a failed run of the record's work. */
function attemptEntry(rc: RecordContext, error: unknown): AttemptEntry {
  const described = describeError(error);
  const message =
    described.message.length <= HISTORY_MESSAGE_LIMIT
      ? described.message
      : `${described.message.slice(0, HISTORY_MESSAGE_LIMIT - 1)}…`.toWellFormed();
  return {
    attempt: currentAttempt(rc),
    at: new Date().toISOString(),
    receive_count: rc.receiveCount,
    kind: "failure",
    error: { name: described.class, message },
  };
}

/** Stops a step once the invocation's time is up. */
function throwIfAborted(rc: RecordContext): void {
  if (rc.signal?.aborted) throw new InvocationDeadlineError("the invocation's time ran out");
}

/**
 * Runs `write` in a transaction of its own that commits only if `signal` has not aborted by then
 * (else it rolls back and throws InvocationDeadlineError). With `statementTimeoutMs` the server
 * also cancels its statements after that long.
 */
async function beforeDeadline<T>(
  pool: pg.Pool,
  signal: AbortSignal | undefined,
  write: (db: pg.PoolClient) => Promise<T>,
  statementTimeoutMs?: number,
): Promise<T> {
  const client = await pool.connect();
  try {
    if (signal?.aborted) throw new InvocationDeadlineError("the invocation's time ran out");
    await client.query(
      statementTimeoutMs === undefined
        ? "BEGIN"
        : `BEGIN; SET LOCAL statement_timeout = ${statementTimeoutMs}`,
    );
    const result = await write(client);
    if (signal?.aborted) throw new InvocationDeadlineError("the invocation's time ran out");
    await client.query("COMMIT");
    client.release();
    return result;
  } catch (error) {
    client.release(error instanceof Error ? error : new Error(String(error)));
    throw error;
  }
}

/**
 * {@link beforeDeadline} bounded by `timeoutMs` from now, waited for no longer than that: a write
 * made as the invocation's time runs out must not land after it returned, and once the bound has
 * passed whatever is still pending ends in ROLLBACK (a write that landed later would count again
 * what the next delivery's claim counts from the marker). Never throws: best effort, the next
 * delivery's claim counts the interruption from its marker instead.
 */
async function withinDeadline(
  pool: pg.Pool,
  timeoutMs: number,
  write: (db: pg.PoolClient) => Promise<unknown>,
): Promise<void> {
  const ms = Math.max(1, Math.floor(timeoutMs));
  const bound = AbortSignal.timeout(ms);
  const writing = beforeDeadline(pool, bound, write, ms);
  writing.catch(() => {});
  await untilDeadline(writing, bound).catch(() => {});
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
  receive_count: number;
} {
  const { identity } = whoFailed(rc);
  return {
    job_id: identity.jobId,
    correlation_id: identity.correlationId,
    message_id: rc.record.messageId,
    attempt: currentAttempt(rc),
    receive_count: rc.receiveCount,
  };
}

/** Step 6 for any record path (the backstop drain's too). Never throws. */
export function observeRecord(
  o: Pick<RecordProtocolOptions<z.ZodType>, "metrics" | "logger" | "onOutcome">,
  rc: RecordContext,
  outcome: RecordOutcome,
): void {
  const { metrics, logger } = o;
  // After the invocation's return nothing is done for the record, not even a log line: it would
  // land in another invocation's logs and metrics.
  if (rc.signal?.aborted) return;
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
      if (!outcome.recorded) {
        metrics.addMetric(METRIC.failureUnrecorded, MetricUnit.Count, 1);
        logger.error(
          "job failed and the failure could not be recorded; the queue's visibility timeout applies",
          {
            ...keys,
            error: describeError(outcome.error),
          },
        );
        break;
      }
      if (!outcome.visibilityChanged) metrics.addMetric(METRIC.retryScheduleFailed, MetricUnit.Count, 1);
      logger.warn("job failed, retry scheduled", {
        ...keys,
        attempt: outcome.attempt,
        delay_seconds: outcome.delaySeconds,
        visibility_changed: outcome.visibilityChanged,
        error: describeError(outcome.error),
      });
      break;
    case "held":
      metrics.addMetric(METRIC.fenceHeld, MetricUnit.Count, 1);
      if (!outcome.visibilityChanged) metrics.addMetric(METRIC.retryScheduleFailed, MetricUnit.Count, 1);
      logger.info(
        "another delivery holds the job's fence; returned to the queue without spending an attempt",
        {
          ...keys,
          delay_seconds: outcome.delaySeconds,
        },
      );
      break;
    case "interrupted":
      // Observed by the batch processor, which knows when the invocation's time ran out.
      break;
    case "dead-lettered":
      if (outcome.kind === ERROR_KIND.conflict) metrics.addMetric(METRIC.conflict, MetricUnit.Count, 1);
      metrics.addMetric(deadLetteredMetric(outcome.kind), MetricUnit.Count, 1);
      logger.error("dead letter recorded", {
        ...keys,
        dead_letter_id: outcome.deadLetterId,
        error_kind: outcome.kind,
        attempts: outcome.attempts,
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
