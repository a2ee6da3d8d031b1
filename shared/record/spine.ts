/**
 * The spine: the path of one SQS record, from event to ack (docs/design.md §2–§5), written once.
 * {@link RecordSpine.handleRecord} reads in the order it runs:
 *
 *   1 read     the body becomes a job (its fingerprint taken), or poison
 *   · steps    a consumer with steps only (shared/steps/): a redelivery claims its delivery first;
 *              then the job's calls outside the database, each checkpointed as it returns (a job
 *              whose fence exists runs none); a consumer without steps reads and writes nothing here
 *   2 fence    a redelivery first claims its delivery in the attempt ledger (learning its failures;
 *              a message interrupted too often or already exhausted is spent); then BEGIN + fence
 *              insert → fresh (go on) | duplicate | conflict | held (a lock wait behind another delivery)
 *   3 work     the consumer's effect, on the fence's transaction, given the steps' results
 *   4 commit   COMMIT (the server refuses any other), then the relay of the work's follow-ups
 *   5 settle   a failure: rolled back, then decided (decide.ts): retry, held, or a dead letter
 *   6 finish   the outcome the spine decided, observed: a metric, a log line, the span's end
 *
 * A record is acked only when applied, a duplicate, or its dead letter committed. A first delivery
 * that succeeds writes nothing but its fence and its work. Once the invocation's time is up (the
 * record's `signal`), no step does anything more for the record. The Middy middlewares of
 * shared/middy/ call the same steps from a user's own chain; every step acts on the context
 * {@link RecordSpine.receive} made, and {@link RecordSpine.finish} ends every record.
 */
import type { SQSRecord } from "aws-lambda";
import type { z } from "zod";
import { EMPTY_LEDGER } from "../db/queries/message-attempts.ts";
import { isRecordChainError } from "../dead-letters/classify.ts";
import type { DeadLetterSink } from "../dead-letters/write-dead-letter.ts";
import type { Job } from "../envelope/envelope.ts";
import { type JobMessage, type ReadMessage, readMessage } from "../envelope/read-message.ts";
import { RecordChainError } from "../errors/configuration.ts";
import {
  InterruptedJobError,
  InvocationDeadlineError,
  JobConflictError,
  RetriesExhaustedError,
} from "../errors/job.ts";
import { describeError } from "../errors/last-error.ts";
import { StepsFenceGoneError } from "../errors/step.ts";
import { WorkLeftStatementsError } from "../errors/transaction.ts";
import { FenceTransaction } from "../fence/fence-transaction.ts";
import { type FenceSettlement, settlementOfExisting } from "../fence/settlement.ts";
import type { Transaction, WorkFollowUps } from "../outbox/work-follow-ups.ts";
import { isLastAttempt } from "../retry/policy.ts";
import { queueUrlFromArn } from "../sqs/queue-url.ts";
import { runSteps, type StepsFunction } from "../steps/run-steps.ts";
import { inSpan, type RecordSpans, traceparentOf } from "../tracing/spans.ts";
import { claimRedelivery, recordInterruption, releaseClaim } from "./attempts.ts";
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

/** What the spine needs: the consumer's definition, its limits and the environment's clients. */
export interface SpineOptions<S extends z.ZodType> extends DecisionOptions, Observers {
  readonly consumer: string;
  /** The work's `tx` and the relay of what it sent. */
  readonly outbox: WorkFollowUps;
  readonly payload: S;
  // biome-ignore lint/suspicious/noExplicitAny: the definition's own follow-up targets and steps' results
  readonly work: (job: WorkJob<z.output<S>, any>, tx: Transaction<any>) => Promise<void>;
  /** The job's calls outside the database, run before the fence transaction. @default none */
  readonly steps?: StepsFunction<z.output<S>, unknown>;
  /** Narrows the fingerprint to the payload fields that define the effect. @default the whole payload */
  readonly fingerprint?: (payload: z.output<S>) => unknown;
  readonly ttlSeconds: number;
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
  /** The records of an event come from one queue: its URL is derived once, not once per record. */
  #lastQueue: { arn: string; url: string } | undefined;
  /**
   * Each record's context, as `receive` made it: every step acts on this one, so a middleware that
   * hands a step a copy (or another consumer's context) changes nothing the spine decides.
   */
  readonly #contexts = new WeakMap<SQSRecord, RecordContext<z.output<S>>>();

  constructor(options: SpineOptions<S>) {
    this.#o = options;
  }

  /** The path of one record, top to bottom. Never throws. */
  async handleRecord(rc: RecordContext<z.output<S>>): Promise<RecordOutcome> {
    try {
      this.read(rc);
      await this.steps(rc);
      await this.fence(rc);
      await this.work(rc);
      await this.commit(rc);
    } catch (error) {
      await this.settle(rc, error);
    }
    return this.finish(rc);
  }

  /** A record's context at the start of its path; `prepared` is what a batch transaction did with it. */
  receive(
    record: SQSRecord,
    signal: AbortSignal,
    prepared?: { read: ReadMessage<z.output<S>>; settlement?: FenceSettlement },
  ): RecordContext<z.output<S>> {
    const rc: RecordContext<z.output<S>> = {
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
    this.#contexts.set(record, rc);
    return rc;
  }

  /** Step 1, pure: the record's body as a job with its fingerprint, or poison. */
  readMessage(record: SQSRecord): ReadMessage<z.output<S>> {
    return readMessage(record, this.#o.payload, this.#o.fingerprint);
  }

  /** Step 1 on the record: throws PoisonMessageError for a body that is not a job. */
  read(context: RecordContext<z.output<S>>): void {
    const rc = this.#own(context);
    if (rc.state.step !== "received") throw chainOrder("validateJob", "nothing", rc.state.step);
    const read = rc.read ?? this.readMessage(rc.record);
    if ("poison" in read) {
      rc.state = { step: "poison", identity: read.identity, fingerprint: read.fingerprint };
      throw read.poison;
    }
    rc.state = { step: "parsed", message: read };
  }

  /**
   * Before step 2, for a consumer with steps (nothing at all for one without): a redelivery's
   * claim, then the job's steps, each call checkpointed as it returns (shared/steps/). A message
   * already spent runs no step. The steps count as the job's work running: an invocation that ends
   * during one records an interruption. Throws what a step threw, a conflict, or a deadline.
   */
  async steps(context: RecordContext<z.output<S>>): Promise<void> {
    const rc = this.#own(context);
    const { steps } = this.#o;
    if (steps === undefined) return;
    if (rc.state.step !== "parsed") throw chainOrder("runSteps", "validateJob", rc.state.step);
    const { message } = rc.state;
    await this.#claim(rc);
    this.#refuseSpent(rc);
    const signal = rc.signal ?? new AbortController().signal;
    rc.working = true;
    let run: Awaited<ReturnType<typeof runSteps<z.output<S>, unknown>>>;
    try {
      run = await runSteps(
        { pool: this.#o.pool, consumer: this.#o.consumer, ttlSeconds: this.#o.ttlSeconds },
        steps,
        workJob(rc.record, message.job, currentAttempt(rc)),
        message.fingerprint,
        signal,
      );
    } finally {
      rc.working = false;
    }
    rc.state = run.fenced
      ? { step: "stepped", message, results: undefined, fenced: true }
      : { step: "stepped", message, results: run.results, fenced: false };
  }

  /**
   * Step 2: opens the record's own fence transaction, or takes the batch's settlement (first
   * deliveries only). Throws JobConflictError, InterruptedJobError, RetriesExhaustedError (a
   * message already spent), FenceLockTimeoutError (held) or the database's error.
   */
  async fence(context: RecordContext<z.output<S>>): Promise<void> {
    const rc = this.#own(context);
    const { state } = rc;
    if (this.#o.steps !== undefined && state.step !== "stepped")
      throw chainOrder("fenceTransaction", "runSteps", state.step);
    if (state.step !== "parsed" && state.step !== "stepped")
      throw chainOrder("fenceTransaction", "validateJob", state.step);
    const { message } = state;
    const results = state.step === "stepped" ? state.results : undefined;
    if (!rc.settlement) await this.#claim(rc);
    const settlement = rc.settlement ?? (await this.#openFence(message, rc.signal));
    switch (settlement.status) {
      case "open":
        rc.state = { step: "open", message, fence: settlement.fence, results };
        // A fence granted after the invocation's deadline (a lock wait that outlasted it) is rolled
        // back before any work: nothing runs for the record after its invocation returned.
        throwIfAborted(rc);
        // The steps found the job's fence, and ran nothing; it is gone now (it expired and the
        // cleanup took it): the work must not run without its steps' results, so the record is
        // tried again, when its steps run.
        if (state.step === "stepped" && state.fenced) throw new StepsFenceGoneError(message.job.jobId);
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

  /**
   * Step 3: the work, once, when the record holds a fresh fence of its own (nothing to do for a
   * duplicate or a job the batch applied). Returns what the record stands at.
   */
  async work(context: RecordContext<z.output<S>>): Promise<RecordOutcome> {
    const rc = this.#own(context);
    const { state } = rc;
    if (state.step === "duplicate" || state.step === "applied") return { status: state.step };
    if (state.step !== "open") throw chainOrder("runWork", "fenceTransaction", state.step);
    throwIfAborted(rc);
    const { message, fence, results } = state;
    rc.state = { step: "working", message, fence, results };
    rc.working = true;
    try {
      await this.runWork(rc.record, message.job, currentAttempt(rc), fence, results);
    } finally {
      rc.working = false;
    }
    const left = fence.leftStatements;
    if (left > 0) throw new WorkLeftStatementsError(left);
    // A follow-up refused and caught by the work: the job is not done as written.
    if (fence.refusal) throw fence.refusal;
    rc.state = { step: "worked", message, fence };
    return { status: "applied" };
  }

  /**
   * Step 4: COMMIT, only after the work returned on the record's own fence transaction, then the
   * relay of its follow-ups. A duplicate or a job the batch applied has nothing to commit.
   */
  async commit(context: RecordContext<z.output<S>>): Promise<void> {
    const rc = this.#own(context);
    const { state } = rc;
    if (state.step === "duplicate" || state.step === "applied") return;
    if (state.step !== "worked") throw chainOrder("the commit", "runWork", state.step);
    // Past the invocation's deadline nothing may commit: the record is reported back unfinished.
    throwIfAborted(rc);
    const fenceMs = await state.fence.commit();
    rc.state = { step: "applied", message: state.message, fenceMs };
    await this.#o.outbox.relay(state.fence.followUps, recordLogKeys(rc));
  }

  /**
   * Rolls the record's own fence transaction back (a no-op when none is open). Returns the error
   * the failure becomes when the transaction turned out not to be the fence's any more.
   */
  async abandon(context: RecordContext<z.output<S>>): Promise<Error | undefined> {
    const rc = this.#own(context);
    const { state } = rc;
    if (state.step !== "open" && state.step !== "working" && state.step !== "worked") return undefined;
    rc.state = { step: "abandoned", message: state.message };
    return state.fence.abandon();
  }

  /** Step 5: a failure of any step, settled once: the fence rolled back, then the decision. Never throws. */
  async settle(context: RecordContext<z.output<S>>, error: unknown): Promise<RecordOutcome> {
    const rc = this.#contexts.get(context.record);
    if (rc === undefined) return { status: "failed", error: foreignContext() };
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
    // A chain wired wrongly is the deployment's bug: no message pays for it, and nothing is counted.
    if (isRecordChainError(cause)) {
      await this.#releaseClaim(rc);
      return { status: "failed", error: cause };
    }
    // A failure before the message was read (a user's middleware): the dead letter says who it is.
    if (rc.state.step === "received") {
      try {
        this.read(rc);
      } catch {
        // Poison: the state says so.
      }
    }
    return decideFailure(this.#o, rc, cause);
  }

  /**
   * Step 6, the end of every record however its chain ran. The outcome is what the spine itself
   * decided — applied or a duplicate, or the failure as settled — never what a chain claims: a
   * fence transaction still open (a middleware returned early past the commit), or a record a chain
   * ended without either, fails and stays in the queue. Then the outcome is observed and the
   * record's span ended. Never throws.
   */
  async finish(context: RecordContext<z.output<S>>): Promise<RecordOutcome> {
    const rc = this.#contexts.get(context.record);
    if (rc === undefined) return { status: "failed", error: foreignContext() };
    const open = heldFence(rc) !== undefined;
    if (open) await this.abandon(rc);
    let outcome: RecordOutcome;
    if (rc.state.step === "applied" || rc.state.step === "duplicate") outcome = { status: rc.state.step };
    else if (rc.settled && !open) outcome = rc.settled;
    else {
      // A middleware returned early: past the commit (the fence was still open), or past everything.
      await this.#releaseClaim(rc);
      const why = open
        ? "with the fence transaction open: rolled back"
        : "without applying the job or settling a failure";
      outcome = {
        status: "failed",
        error: new RecordChainError(`the chain ended ${why} (a middleware returned early)`),
      };
    }
    observeRecord(this.#o, rc, outcome);
    try {
      this.#o.spans?.end(rc.record, outcome, whoFailed(rc).identity);
    } catch {
      // Tracing is for watching: an SDK's failure must never change what happens to the record.
    }
    return outcome;
  }

  /**
   * The invocation's time ran out while the record was running: its transaction is rolled back
   * (the connection destroyed, so nothing the work still sends reaches the server) and, within
   * `timeoutMs`, its interruption is recorded. Never throws.
   */
  async interrupt(context: RecordContext<z.output<S>>, timeoutMs: number): Promise<void> {
    const rc = this.#contexts.get(context.record) ?? context;
    heldFence(rc)?.interrupt();
    await recordInterruption(this.#o, rc, timeoutMs);
  }

  /**
   * Runs the consumer's work for `job` on `fence` (the record's own, or the batch's shared one),
   * under the record's span: its queries, and `send` staging each follow-up in the transaction.
   */
  runWork(
    record: SQSRecord,
    job: Job<z.output<S>>,
    attempt: number,
    fence: FenceTransaction,
    results?: unknown,
  ): Promise<void> {
    const span = this.#o.spans?.of(record);
    const tx = this.#o.outbox.transaction(fence, job, traceparentOf(span));
    return inSpan(span, () => this.#o.work(workJob(record, job, attempt, results), tx));
  }

  /**
   * Batch mode: the invocation's time ran out in this record's work, in the batch's transaction
   * (rolled back with the batch; `context` is {@link receive}'s, with how the batch read it): its
   * interruption is recorded, within `timeoutMs`. Never throws.
   */
  async interruptedInBatch(context: RecordContext<z.output<S>>, timeoutMs: number): Promise<void> {
    const rc = this.#own(context);
    if (rc.state.step === "received" && rc.read && !("poison" in rc.read)) this.read(rc);
    rc.working = true;
    await recordInterruption(this.#o, rc, timeoutMs);
  }

  async #openFence(
    message: JobMessage<z.output<S>>,
    signal: AbortSignal | undefined,
  ): Promise<FenceSettlement | { status: "open"; fence: FenceTransaction }> {
    const { job, fingerprint } = message;
    const { transaction, fresh, existing } = await FenceTransaction.open(
      this.#o.pool,
      {
        consumer: this.#o.consumer,
        ttlSeconds: this.#o.ttlSeconds,
        jobs: [{ jobId: job.jobId, tenantId: job.tenantId, fingerprint }],
      },
      signal,
    );
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

  /** The record's own context; a step given one this spine did not make refuses it. */
  #own(context: RecordContext<z.output<S>>): RecordContext<z.output<S>> {
    const rc = this.#contexts.get(context.record);
    if (rc === undefined) throw foreignContext();
    return rc;
  }

  /**
   * A redelivery claims its delivery in the attempt ledger once, before its steps or its fence,
   * learning its failures so far.
   */
  async #claim(rc: RecordContext<z.output<S>>): Promise<void> {
    if (rc.receiveCount > 1 && !rc.claimed) {
      rc.ledger = await claimRedelivery(this.#o, rc);
      rc.claimed = true;
    }
    // A claim answered after the deadline (its COMMIT acknowledged late) came back when the
    // invocation's interruption had already looked for a claim to release and found none: the
    // work never started, so the marker goes, or the next delivery would count an interruption.
    if (rc.signal?.aborted) await this.#releaseClaim(rc);
    throwIfAborted(rc);
  }

  async #releaseClaim(rc: RecordContext<z.output<S>>): Promise<void> {
    if (!rc.claimed) return;
    rc.claimed = false;
    await releaseClaim(this.#o, rc);
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

/** A step reached out of order: a user's chain that misses a middleware, repeats one or misplaces it. */
function chainOrder(step: string, before: string, at: string): RecordChainError {
  return new RecordChainError(
    `${step} ran with the record at step "${at}": ${before} must run before it, and each step once (shared/middy/)`,
  );
}

/** A context this consumer's spine did not make: a copy, or another consumer's. */
function foreignContext(): RecordChainError {
  return new RecordChainError(
    "a step was given a record context this consumer did not make (a copy, or another consumer's)",
  );
}

/** The record's own fence transaction, while it holds one. */
function heldFence(rc: RecordContext): FenceTransaction | undefined {
  const { state } = rc;
  return state.step === "open" || state.step === "working" || state.step === "worked"
    ? state.fence
    : undefined;
}
