/**
 * The spine: the path of one SQS record, from event to ack (docs/design.md §2–§5), written once.
 * {@link RecordSpine.handleRecord} reads in the order it runs:
 *
 *   1 read     the body becomes a job (its fingerprint taken), or poison
 *   2 fence    a redelivery first claims its delivery in the attempt ledger (a statement of its
 *              own: it learns the failures so far; too many interruptions, or a last attempt that
 *              already failed → spent); then BEGIN + fence insert → a fresh fence (go on) | the
 *              job's own fence (duplicate) | another job's (conflict) | a lock wait behind another
 *              delivery of the job (held)
 *   3 work     the consumer's effect, on the fence's transaction
 *   4 commit   COMMIT (the server refuses any other), then the relay of the work's follow-ups
 *   5 settle   a failure: the transaction rolled back, then the decision (decide.ts): retry
 *              through SQS visibility, held, or a dead letter in a transaction of its own
 *   6 observe  one metric per outcome, a log line for anything but success or a duplicate
 *
 * A record is acked only when it was applied, was a duplicate, or its dead letter committed. A
 * first delivery that succeeds reads and writes nothing but its fence and its work. Once the
 * invocation's time is up (the record's `signal`), no step does anything more for the record.
 *
 * Each step is also a method the Middy middlewares of shared/middy/ call from a user's own chain
 * (validateJob → {@link read}, fenceTransaction → {@link fence}/{@link commit}/{@link abandon},
 * recordDeadLetter → {@link settle}); {@link finish} ends every record, whichever way it ran.
 */
import type { SQSClient } from "@aws-sdk/client-sqs";
import type { SQSRecord } from "aws-lambda";
import type pg from "pg";
import type { z } from "zod";
import { EMPTY_LEDGER } from "../db/queries/message-attempts.ts";
import { isConfigurationError } from "../dead-letters/classify.ts";
import type { DeadLetterSink } from "../dead-letters/write-dead-letter.ts";
import type { Job } from "../envelope/envelope.ts";
import { type JobMessage, type ReadMessage, readMessage } from "../envelope/read-message.ts";
import { describeError } from "../errors/last-error.ts";
import {
  ConfigurationError,
  InterruptedJobError,
  InvocationDeadlineError,
  JobConflictError,
  RetriesExhaustedError,
  WorkLeftStatementsError,
} from "../errors.ts";
import { FenceTransaction } from "../fence/fence-transaction.ts";
import { type FenceSettlement, settlementOfExisting } from "../fence/settlement.ts";
import type { Transaction } from "../fence/work-transaction.ts";
import {
  type FollowUpSchemas,
  followUpSender,
  refuseFollowUps,
  type SenderSpec,
  type StagedFollowUp,
} from "../outbox/follow-up.ts";
import { relayAfterCommit, type TargetQueues } from "../outbox/relay.ts";
import { isLastAttempt } from "../retry/policy.ts";
import { queueUrlFromArn } from "../sqs/queue-url.ts";
import { inSpan, type RecordSpans, traceparentOf } from "../tracing/spans.ts";
import { claimRedelivery, recordInterruption } from "./attempts.ts";
import { type DecisionOptions, decideFailure } from "./decide.ts";
import { type Observers, observeRecord, recordLogKeys } from "./observe.ts";
import type { RecordOutcome } from "./outcome.ts";
import {
  currentAttempt,
  type RecordContext,
  receiveCountOf,
  type WorkJob,
  whoFailed,
  workJob,
} from "./record-context.ts";

export type { WorkJob };

/** What the spine needs: the consumer's definition, its limits and the environment's clients. */
export interface SpineOptions<S extends z.ZodType> extends DecisionOptions, Observers {
  readonly consumer: string;
  readonly payload: S;
  // biome-ignore lint/suspicious/noExplicitAny: the definition's own follow-up targets
  readonly work: (job: WorkJob<z.output<S>>, tx: Transaction<any>) => Promise<void>;
  /** Narrows the fingerprint to the payload fields that define the effect. @default the whole payload */
  readonly fingerprint?: (payload: z.output<S>) => unknown;
  /** The follow-ups the consumer may send and each target's queue. @default none: `tx.send` refuses */
  readonly followUps?: SenderSpec & { readonly queues: TargetQueues };
  readonly pool: pg.Pool;
  readonly ttlSeconds: number;
  readonly sqs: SQSClient;
  /** Confirmed interruptions after which a message is dead-lettered as `interrupted`. */
  readonly maxInterruptions: number;
  readonly deadLetters: DeadLetterSink;
  /** The queue every record comes from, when the deployment names it. @default from each record's ARN */
  readonly queueUrl?: string;
  /** The records' spans, ended with their outcomes. @default none */
  readonly spans?: RecordSpans;
}

/** The steps of one record; one instance per consumer, no state of its own between records. */
export class RecordSpine<S extends z.ZodType> {
  readonly #o: SpineOptions<S>;
  /** The `send` of a consumer that declares no follow-ups: the same for every job, made once. */
  readonly #refuseFollowUps: Transaction<FollowUpSchemas>["send"];
  /** The records of an event come from one queue: its URL is derived once, not once per record. */
  #lastQueue: { arn: string; url: string } | undefined;

  constructor(options: SpineOptions<S>) {
    this.#o = options;
    this.#refuseFollowUps = refuseFollowUps(options.consumer);
  }

  /** The consumer's name. */
  get consumer(): string {
    return this.#o.consumer;
  }

  /** The path of one record, top to bottom. Never throws. */
  async handleRecord(rc: RecordContext<z.output<S>>): Promise<RecordOutcome> {
    let outcome: RecordOutcome;
    try {
      this.read(rc);
      await this.fence(rc);
      outcome = await this.work(rc);
      await this.commit(rc);
    } catch (error) {
      outcome = await this.settle(rc, error);
    }
    return this.finish(rc, outcome);
  }

  /** A record's context at the start of its path; `prepared` is what a batch transaction did with it. */
  receive(
    record: SQSRecord,
    signal: AbortSignal,
    prepared?: { read: ReadMessage<z.output<S>>; settlement?: FenceSettlement },
  ): RecordContext<z.output<S>> {
    return {
      record,
      receiveCount: receiveCountOf(record),
      ledger: EMPTY_LEDGER,
      claimed: false,
      signal,
      queueUrl: this.#o.queueUrl ?? this.#queueUrlOf(record.eventSourceARN),
      span: this.#o.spans?.of(record),
      ...(prepared?.settlement ? { settlement: prepared.settlement } : {}),
      ...(prepared ? { read: prepared.read } : {}),
      state: { step: "received" },
    };
  }

  /** Step 1, pure: the record's body as a job with its fingerprint, or poison. */
  readMessage(record: SQSRecord): ReadMessage<z.output<S>> {
    return readMessage(record, this.#o.payload, this.#o.fingerprint);
  }

  /** Step 1 on the record: throws PoisonMessageError for a body that is not a job. */
  read(rc: RecordContext<z.output<S>>): void {
    const read = rc.read ?? this.readMessage(rc.record);
    if ("poison" in read) {
      rc.state = { step: "poison", identity: read.identity, fingerprint: read.fingerprint };
      throw read.poison;
    }
    rc.state = { step: "parsed", message: read };
  }

  /**
   * Step 2: opens the record's own fence transaction, or takes the batch's settlement (first
   * deliveries only). Throws JobConflictError, InterruptedJobError, RetriesExhaustedError (a
   * message already spent), FenceLockTimeoutError (held) or the database's error.
   */
  async fence(rc: RecordContext<z.output<S>>): Promise<void> {
    if (rc.state.step !== "parsed") throw chainOrder("fenceTransaction", "validateJob", rc.state.step);
    const { message } = rc.state;
    if (!rc.settlement) {
      if (rc.receiveCount > 1 && !rc.claimed) {
        rc.ledger = await claimRedelivery(this.#o, rc);
        rc.claimed = true;
      }
      throwIfAborted(rc);
    }
    const settlement = rc.settlement ?? (await this.#openFence(message));
    switch (settlement.status) {
      case "open":
        rc.state = { step: "open", message, fence: settlement.fence };
        // A fence granted after the invocation's deadline (a lock wait that outlasted it) is rolled
        // back before any work: nothing runs for the record after its invocation returned.
        throwIfAborted(rc);
        // Decided holding the job's fence lock, so no live delivery of the job is running.
        this.#refuseSpent(rc);
        return;
      case "applied":
        rc.state = {
          step: "applied",
          message,
          ...(settlement.fenceMs === undefined ? {} : { fenceMs: settlement.fenceMs }),
        };
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

  /** Step 3: the work, when the record holds a fresh fence of its own; else what the fence decided. */
  async work(rc: RecordContext<z.output<S>>): Promise<RecordOutcome> {
    const { state } = rc;
    if (state.step === "duplicate") return { status: "duplicate" };
    if (state.step === "applied") return { status: "applied" };
    if (state.step !== "open") throw chainOrder("the work", "fenceTransaction", state.step);
    throwIfAborted(rc);
    rc.working = true;
    try {
      await this.runWork(rc.record, state.message.job, currentAttempt(rc), state.fence);
    } finally {
      rc.working = false;
    }
    const left = state.fence.leftStatements;
    if (left > 0) throw new WorkLeftStatementsError(left);
    // A follow-up refused and caught by the work: the job is not done as written.
    if (state.fence.refusal) throw state.fence.refusal;
    return { status: "applied" };
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
   * Rolls the record's own fence transaction back (a no-op when none is open). Returns the error
   * the failure becomes when the transaction turned out not to be the fence's any more.
   */
  async abandon(rc: RecordContext<z.output<S>>): Promise<Error | undefined> {
    if (rc.state.step !== "open") return undefined;
    const { message, fence } = rc.state;
    rc.state = { step: "abandoned", message };
    return fence.abandon();
  }

  /** Step 5: a failure of any step, settled: the fence rolled back, then the decision. Never throws. */
  async settle(rc: RecordContext<z.output<S>>, error: unknown): Promise<RecordOutcome> {
    rc.settled ??= await this.#settle(rc, error);
    return rc.settled;
  }

  async #settle(rc: RecordContext<z.output<S>>, error: unknown): Promise<RecordOutcome> {
    const cause = (await this.abandon(rc)) ?? error;
    // A user's middleware that failed after the effect was decided does not undo it.
    if (rc.state.step === "applied" || rc.state.step === "duplicate") {
      this.#o.logger.warn("a middleware failed after the record's outcome was decided; the outcome stands", {
        ...recordLogKeys(rc),
        error: describeError(cause),
      });
      return { status: rc.state.step };
    }
    // A chain wired in the wrong order is the deployment's bug: no message pays for it.
    if (isConfigurationError(cause)) return { status: "failed", error: cause };
    return decideFailure(this.#o, rc, cause);
  }

  /**
   * Step 6, and the end of every record however its chain ran: a fence transaction still open (a
   * chain that returned early, past its commit) is rolled back and the record left in the queue;
   * then the outcome is observed and the record's span ended. Never throws.
   */
  async finish(rc: RecordContext<z.output<S>>, outcome: RecordOutcome): Promise<RecordOutcome> {
    let final = outcome;
    if (rc.state.step === "open") {
      await this.abandon(rc);
      final = {
        status: "failed",
        error: new ConfigurationError("the record's chain", [
          "it returned with the fence transaction open (a middleware returned early): rolled back",
        ]),
      };
    }
    observeRecord(this.#o, rc, final);
    try {
      this.#o.spans?.end(rc.record, final, whoFailed(rc).identity);
    } catch {
      // Tracing is for watching: an SDK's failure must never change what happens to the record.
    }
    return final;
  }

  /**
   * The invocation's time ran out while the record was running: its transaction is rolled back
   * (the connection destroyed, so nothing the work still sends reaches the server) and, within
   * `timeoutMs`, its interruption is recorded. Never throws.
   */
  async interrupt(rc: RecordContext<z.output<S>>, timeoutMs: number): Promise<void> {
    if (rc.state.step === "open") rc.state.fence.interrupt();
    await recordInterruption(this.#o, rc, timeoutMs);
  }

  /**
   * Runs the consumer's work for `job` on `fence` (the record's own, or the batch's shared one),
   * under the record's span: its queries, and `send` staging each follow-up in the transaction.
   */
  runWork(record: SQSRecord, job: Job<z.output<S>>, attempt: number, fence: FenceTransaction): Promise<void> {
    const span = this.#o.spans?.of(record);
    const tx = this.workTransaction(fence, job, traceparentOf(span));
    return inSpan(span, () => this.#o.work(workJob(record, job, attempt), tx));
  }

  /**
   * Batch mode: the invocation's time ran out in this record's work, in the batch's transaction
   * (rolled back with the batch): its interruption is recorded, within `timeoutMs`. Never throws.
   */
  async interruptedInBatch(
    record: SQSRecord,
    read: ReadMessage<z.output<S>>,
    signal: AbortSignal,
    timeoutMs: number,
  ): Promise<void> {
    const rc = this.receive(record, signal, { read });
    if (!("poison" in read)) rc.state = { step: "parsed", message: read };
    rc.working = true;
    await recordInterruption(this.#o, rc, timeoutMs);
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
    const { pool, sqs, consumer, metrics, logger } = this.#o;
    try {
      await relayAfterCommit(
        { pool, sqs, consumer, queues: target.queues, metrics, logger },
        followUps,
        logKeys,
      );
    } catch (error) {
      // The effect committed and its rows are in the outbox: the scheduled relay sends them.
      logger.error("relay after COMMIT failed; the scheduled relay sends the follow-ups", {
        ...logKeys,
        error: describeError(error),
      });
    }
  }

  async #openFence(
    message: JobMessage<z.output<S>>,
  ): Promise<FenceSettlement | { status: "open"; fence: FenceTransaction }> {
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

  /** A message interrupted too often, or whose last attempt already failed, does not run again. */
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

  #queueUrlOf(arn: string): string {
    if (this.#lastQueue === undefined || this.#lastQueue.arn !== arn)
      this.#lastQueue = { arn, url: queueUrlFromArn(arn) };
    return this.#lastQueue.url;
  }
}

/** Stops a step once the invocation's time is up. */
function throwIfAborted(rc: RecordContext): void {
  if (rc.signal?.aborted) throw new InvocationDeadlineError("the invocation's time ran out");
}

/** A step reached out of order: a user's chain that misses a middleware or puts it in the wrong place. */
function chainOrder(step: string, before: string, at: string): ConfigurationError {
  return new ConfigurationError("the record's chain", [
    `${step} ran with the record at step "${at}": ${before} must come before it (shared/middy/)`,
  ]);
}
