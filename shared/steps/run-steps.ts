/**
 * A job's steps: its calls outside the database, run before its fence transaction
 * (docs/consumers.md "Steps"). In order:
 *
 *   1 find    one round trip: the job claimed for this body (its `_job` row, unless there is one),
 *             whether its fence exists, and the steps already claimed or recorded (a fenced job was
 *             applied: its steps do not run again, the fence decides the rest; a job claimed by a
 *             different body sent under its id is a conflict, before any step runs)
 *   2 steps   the definition's `steps(job)`; each `job.step(name, schema, call)`:
 *             recorded → the recorded result, parsed by the schema, and no call;
 *             else     → claimed for the job's body (one statement, just before the call: a step
 *                        another delivery recorded meanwhile is then found and not called, and a
 *                        claim of another body's is a conflict before anything is called); then
 *                        call(key) with the key derived from (consumer, job id, step), its answer
 *                        parsed by the schema and recorded in the claim (the first result of a step
 *                        stays: a racing delivery of the same body takes it)
 *
 * A consumer without steps never reaches this module: nothing is read or written for its jobs.
 * A crash between a call and its checkpoint repeats the call with the same key, and the provider
 * answers what it did the first time; after the checkpoint, no delivery of the job calls again.
 */

import type pg from "pg";
import type { z } from "zod";
import { poolBefore } from "../db/connect-before.ts";
import { claimJobSteps, claimStep, recordStepResult, type StepCheckpoint } from "../db/queries/job-steps.ts";
import type { Queryable } from "../db/queryable.ts";
import type { Job } from "../envelope/envelope.ts";
import { parseJson } from "../envelope/parse-json.ts";
import { assertStepName, STEPS_PER_JOB, stepKey } from "../envelope/step-key.ts";
import { InvocationDeadlineError, JobConflictError, PermanentJobError } from "../errors/job.ts";
import {
  PermanentStepError,
  StepDefinitionError,
  StepOutcomeUnknownError,
  StepResultError,
} from "../errors/step.ts";
import { faultHook } from "../fault-points.ts";

/** What a step's call is given beside its key. */
export interface StepCallOptions {
  /** Aborted when the invocation's time is up: pass it to the provider's client. */
  readonly signal: AbortSignal;
  /** Which run of the job this is (1, then one more after each recorded failure). */
  readonly attempt: number;
}

/** How a step's failure is classed. */
export interface StepSettings {
  /**
   * How long the provider remembers an idempotency key. A step called and never recorded (the
   * delivery died between the call and its checkpoint) is called again with the same key only
   * while the provider still remembers it; after that (less a margin for clocks), calling again
   * could act twice, so the job is dead-lettered (`StepOutcomeUnknownError`) for a person to look
   * the key up at the provider. @default 86400 (24 hours, Stripe's)
   */
  readonly keyLifetimeSeconds?: number;
  /**
   * Whether a failure of the call can never succeed on retry (a provider's 4xx other than a
   * conflict or a rate limit): the job is then dead-lettered at once. @default every failure is retried
   */
  readonly permanent?: (error: unknown) => boolean;
}

/** The job as `steps` receives it: the job, and `step` to make each call. */
export interface StepJob<P> extends StepsJob<P> {
  /**
   * Runs a named step once per job: `call(key)` with the provider idempotency key derived from
   * (consumer, job id, `name`), its answer parsed by `schema` and recorded before anything else
   * happens. A later delivery or replay of the job gets the recorded result without calling.
   */
  step<T extends z.ZodType>(
    name: string,
    schema: T,
    call: (key: string, options: StepCallOptions) => Promise<unknown>,
    settings?: StepSettings,
  ): Promise<z.output<T>>;
}

/** The job a delivery runs: the job, which run of it this is, and the delivery's message id. */
export interface StepsJob<P> extends Job<P> {
  /** Which run of the work this is: 1, then one more after each recorded failure. */
  readonly attempt: number;
  /** The SQS message id of this delivery. */
  readonly messageId: string;
}

/** A definition's steps: the calls a job makes outside the database, before its work. */
export type StepsFunction<P, R> = (job: StepJob<P>) => Promise<R>;

/** How long a provider remembers an idempotency key, unless a step says otherwise: Stripe's 24 hours. */
export const DEFAULT_KEY_LIFETIME_SECONDS = 86_400;

/**
 * Taken off a key's lifetime before a step is called again, for the clocks of the database and the
 * provider: 5 minutes, or a tenth of a shorter lifetime.
 */
export const KEY_LIFETIME_MARGIN_SECONDS = 300;

/** The step's key lifetime, refused unless a positive, finite number of seconds. */
function keyLifetimeOf(step: string, settings: StepSettings | undefined): number {
  const lifetime = settings?.keyLifetimeSeconds ?? DEFAULT_KEY_LIFETIME_SECONDS;
  if (typeof lifetime !== "number" || !Number.isFinite(lifetime) || lifetime <= 0) {
    throw new StepDefinitionError(
      `step ${JSON.stringify(step)}: keyLifetimeSeconds must be a positive number of seconds (how long the provider remembers a key), got ${String(lifetime)}`,
    );
  }
  return lifetime;
}

/** The largest result a step records, as JSON text (the table's CHECK says the same). */
export const STEP_RESULT_MAX_BYTES = 65536;

/** Where the steps are recorded, and for how long. */
export interface StepsAccess {
  readonly pool: pg.Pool;
  readonly consumer: string;
  /** The consumer's fence TTL: a checkpoint lives at least as long as a copy of its job can arrive. */
  readonly ttlSeconds: number;
}

/** What a job's steps came to. */
export type StepsRun<R> =
  /** The job's fence exists: it was applied, and nothing ran. */
  | { readonly fenced: true }
  /** Every step recorded (now or before): what `steps` returned. */
  | { readonly fenced: false; readonly results: R };

/** Runs the job's steps (above); throws what a step threw, or a conflict, or a deadline. */
export async function runSteps<P, R>(
  access: StepsAccess,
  steps: StepsFunction<P, R>,
  job: StepsJob<P>,
  fingerprint: Buffer,
  signal: AbortSignal,
): Promise<StepsRun<R>> {
  const db = poolBefore(access.pool, signal);
  const found = await claimJobSteps(db, {
    consumer: access.consumer,
    jobId: job.jobId,
    fingerprint,
    ttlSeconds: access.ttlSeconds,
  });
  if (found.fenced) return { fenced: true };
  // The job's steps are another body's (sent under the same job id): a conflict, before any call.
  if (found.claimedBy !== null && !found.claimedBy.equals(fingerprint)) {
    throw new JobConflictError(job.jobId, fingerprint, found.claimedBy, "step");
  }
  for (const recorded of found.steps.values()) refuseOtherBody(job.jobId, fingerprint, recorded);
  const run = new JobStepsRun(access, db, job, fingerprint, signal, found.steps);
  const results = await steps(run.stepJob());
  return { fenced: false, results };
}

/** One run of one job's steps. */
class JobStepsRun<P> {
  readonly #a: StepsAccess;
  readonly #db: Queryable;
  readonly #job: StepsJob<P>;
  readonly #fingerprint: Buffer;
  readonly #signal: AbortSignal;
  readonly #found: ReadonlyMap<string, StepCheckpoint>;
  /** The steps this run reached, in order: a name used twice is refused. */
  readonly #reached = new Set<string>();

  constructor(
    access: StepsAccess,
    db: Queryable,
    job: StepsJob<P>,
    fingerprint: Buffer,
    signal: AbortSignal,
    found: ReadonlyMap<string, StepCheckpoint>,
  ) {
    this.#a = access;
    this.#db = db;
    this.#job = job;
    this.#fingerprint = fingerprint;
    this.#signal = signal;
    this.#found = found;
  }

  stepJob(): StepJob<P> {
    return { ...this.#job, step: (name, schema, call, settings) => this.#step(name, schema, call, settings) };
  }

  async #step<T extends z.ZodType>(
    name: string,
    schema: T,
    call: (key: string, options: StepCallOptions) => Promise<unknown>,
    settings: StepSettings | undefined,
  ): Promise<z.output<T>> {
    assertStepName(name);
    if (this.#reached.has(name)) {
      throw new StepDefinitionError(
        `step ${JSON.stringify(name)} ran twice in one job: each step needs a name of its own`,
      );
    }
    this.#reached.add(name);
    const position = this.#reached.size;
    if (position > STEPS_PER_JOB) {
      throw new StepDefinitionError(
        `step ${JSON.stringify(name)} is the job's step ${position}: a job has at most ${STEPS_PER_JOB}`,
      );
    }
    const lifetime = keyLifetimeOf(name, settings);
    const key = stepKey(this.#a.consumer, this.#job.jobId, name);
    const found = this.#found.get(name);
    if (found?.resultText != null) return readRecorded(name, key, schema, found.resultText);

    if (this.#signal.aborted)
      throw new InvocationDeadlineError(`the invocation's time ran out before step "${name}"`);
    const step = { consumer: this.#a.consumer, jobId: this.#job.jobId, step: name };
    // Asked again right before the call, and claimed for this body: a result recorded since the
    // job's steps were read is taken, and another body's claim is a conflict, before any call.
    const there = await claimStep(this.#db, {
      ...step,
      position,
      fingerprint: this.#fingerprint,
      ttlSeconds: this.#a.ttlSeconds,
    });
    if (there !== undefined) {
      refuseOtherBody(this.#job.jobId, this.#fingerprint, there);
      if (there.resultText !== null) return readRecorded(name, key, schema, there.resultText);
      // Called before, its answer never recorded: again with the same key, while the provider
      // still remembers it.
      if (there.ageSeconds >= lifetime - Math.min(KEY_LIFETIME_MARGIN_SECONDS, lifetime / 10)) {
        throw new StepOutcomeUnknownError(name, key, there.ageSeconds, lifetime);
      }
    }

    const jobIds = [this.#job.jobId];
    if (faultHook) await faultHook("step:before-call", { jobIds });
    let answer: unknown;
    try {
      answer = await call(key, { signal: this.#signal, attempt: this.#job.attempt });
    } catch (error) {
      if (!(error instanceof PermanentJobError) && settings?.permanent?.(error) === true) {
        throw new PermanentStepError(name, error);
      }
      throw error;
    }
    if (faultHook) await faultHook("step:after-call", { jobIds });
    const recorded = await recordStepResult(this.#db, step, recordable(name, key, schema, answer));
    if (faultHook) await faultHook("step:after-checkpoint", { jobIds });
    return readRecorded(name, key, schema, recorded.resultText ?? "null");
  }
}

/**
 * The JSON text a step records for `answer`: what its schema makes of it, which the schema must
 * accept again when a later delivery reads it back, within {@link STEP_RESULT_MAX_BYTES}.
 */
function recordable(step: string, key: string, schema: z.ZodType, answer: unknown): string {
  const parsed = schema.safeParse(answer);
  if (!parsed.success) {
    throw new StepResultError(
      step,
      `step "${step}" (key ${key}): its schema refused the answer: ${parsed.error.message}`,
    );
  }
  let text: string | undefined;
  try {
    text = JSON.stringify(parsed.data);
  } catch (error) {
    throw new StepResultError(step, `step "${step}" (key ${key}): its result has no JSON form`, {
      cause: error,
    });
  }
  if (text === undefined) {
    throw new StepResultError(step, `step "${step}" (key ${key}): its result has no JSON form`);
  }
  const bytes = Buffer.byteLength(text, "utf8");
  if (bytes > STEP_RESULT_MAX_BYTES) {
    throw new StepResultError(
      step,
      `step "${step}" (key ${key}): its result is ${bytes} bytes as JSON, more than the ${STEP_RESULT_MAX_BYTES} a step records: narrow its schema to what the work needs`,
    );
  }
  // What a later delivery reads back must be what this one's work gets: the schema must give the
  // recorded JSON back unchanged (no transform, no Date, no Map: plain JSON values).
  const again = schema.safeParse(parseJson(text));
  if (!again.success || JSON.stringify(again.data) !== text) {
    throw new StepResultError(
      step,
      `step "${step}" (key ${key}): its schema does not give its own result back unchanged when read as JSON (a transform, a default, a Date, a Map?): give the step a schema of plain JSON values`,
    );
  }
  return text;
}

/** A recorded result, as the schema makes it. */
function readRecorded<T extends z.ZodType>(step: string, key: string, schema: T, text: string): z.output<T> {
  const parsed = schema.safeParse(parseJson(text));
  if (!parsed.success) {
    throw new StepResultError(
      step,
      `step "${step}" (key ${key}) was recorded, but its schema now refuses the recorded result (the schema changed since?): ${parsed.error.message}`,
    );
  }
  return parsed.data;
}

/** A step claimed by a different body sent under the same job id: this message is another job. */
function refuseOtherBody(jobId: string, fingerprint: Buffer, recorded: StepCheckpoint): void {
  if (recorded.fingerprint !== null && !recorded.fingerprint.equals(fingerprint)) {
    throw new JobConflictError(jobId, fingerprint, recorded.fingerprint, "step");
  }
}
