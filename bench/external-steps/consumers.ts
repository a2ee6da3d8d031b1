/**
 * The three variants as Lambda containers (bench/external-steps/systems.ts says how they differ):
 * each one the award-points effect in jobfence's fence transaction plus a charge through the fake
 * provider, made with a step, bare in the work, or wrapped by Powertools' `makeIdempotent`.
 *
 * A container is what one Lambda execution environment holds: its consumer, and for Powertools its
 * idempotency configuration (which keeps the invocation's Lambda context, registered on each
 * invocation so an in-progress record expires with the invocation's remaining time, as Powertools
 * documents for a wrapped function that is not the handler) and persistence layer.
 */
import { IdempotencyConfig, makeIdempotent } from "@aws-lambda-powertools/idempotency";
import type { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import type { Context, SQSBatchResponse, SQSRecord } from "aws-lambda";
import type pg from "pg";
import type { z } from "zod";
import { awardPoints } from "../../functions/award-points/award.ts";
import { awardPointsConsumer, type awardPointsPayload } from "../../functions/award-points/consumer.ts";
import { type ConsumerDefinition, createConsumer } from "../../shared/consumer.ts";
import { quietRuntime } from "../lib/harness-driver.ts";
import { persistenceLayer } from "../powertools/powertools-variant.ts";
import { Charge, type ChargeRequest, charge, chargeRequestOf, ProviderCallError } from "./charge.ts";
import { STEP_NAME, type VariantKey, type WorkPoint } from "./systems.ts";

/** Called at a work's own points with the job's id; installed only in the crash child, where it kills. */
export type WorkFault = (point: WorkPoint, jobId: string) => void;

/** One Lambda container of a variant. */
export interface ExternalContainer {
  invoke(records: SQSRecord[], context: Context): Promise<SQSBatchResponse>;
}

export interface ContainerOptions {
  readonly pool: pg.Pool;
  readonly databaseUrl: string;
  readonly providerUrl: string;
  /** Powertools' store: a client of the emulator and the table. */
  readonly dynamodb: { readonly client: DynamoDBClient; readonly tableName: string };
  /** Powertools' idempotency keys' prefix. */
  readonly keyPrefix: string;
  /** The Lambda function timeout, whole seconds, as the consumer's configuration states it. */
  readonly functionTimeoutSeconds: number;
  readonly fault?: WorkFault;
}

type Payload = z.output<typeof awardPointsPayload>;
type Definition = ConsumerDefinition<typeof awardPointsPayload>;

/** The job as award-points' effect and the charge take it. */
function awardOf(job: { jobId: string; tenantId: string; payload: Payload }) {
  return {
    jobId: job.jobId,
    tenantId: job.tenantId,
    userId: job.payload.user_id,
    points: job.payload.points,
  };
}

/** The definitions' common part: award-points' name (and role), payload and per-record commits. */
const base = {
  name: awardPointsConsumer.name,
  payload: awardPointsConsumer.payload,
  commitMode: "per-record",
} as const;

/**
 * jobfence: the charge as a step, with the key jobfence derives as the provider's Idempotency-Key;
 * a 4xx other than a conflict or a rate limit can never succeed, so it is declared permanent.
 */
function jobfenceDefinition(
  o: ContainerOptions,
): ConsumerDefinition<typeof awardPointsPayload, Record<never, never>, { charge: Charge }> {
  const permanent = (error: unknown) =>
    error instanceof ProviderCallError &&
    error.status >= 400 &&
    error.status < 500 &&
    error.status !== 409 &&
    error.status !== 429;
  return {
    ...base,
    steps: async (job) => ({
      charge: await job.step(
        STEP_NAME,
        Charge,
        (key, { signal }) => charge(o.providerUrl, chargeRequestOf(awardOf(job)), key, signal),
        { permanent },
      ),
    }),
    work: async (job, tx) => {
      if (job.steps.charge.amount !== job.payload.points * 100)
        throw new Error("the charge is not the job's");
      await awardPoints(tx, awardOf(job));
    },
  };
}

function bareDefinition(o: ContainerOptions): Definition {
  return {
    ...base,
    work: async (job, tx) => {
      const award = awardOf(job);
      o.fault?.("before-call", job.jobId);
      Charge.parse(await charge(o.providerUrl, chargeRequestOf(award), undefined));
      o.fault?.("after-call", job.jobId);
      await awardPoints(tx, award);
    },
  };
}

/** Powertools: the call made idempotent on the job id, the request validated against the record's. */
function powertoolsDefinition(o: ContainerOptions, config: IdempotencyConfig): Definition {
  const chargeOnce = makeIdempotent(
    async (input: { job_id: string; request: ChargeRequest }): Promise<Charge> => {
      o.fault?.("before-call", input.job_id);
      const answer = Charge.parse(await charge(o.providerUrl, input.request, undefined));
      o.fault?.("after-call", input.job_id);
      return answer;
    },
    {
      persistenceStore: persistenceLayer({ kind: "dynamodb", ...o.dynamodb }),
      config,
      keyPrefix: o.keyPrefix,
    },
  );
  return {
    ...base,
    work: async (job, tx) => {
      const award = awardOf(job);
      Charge.parse(await chargeOnce({ job_id: job.jobId, request: chargeRequestOf(award) }));
      o.fault?.("after-checkpoint", job.jobId);
      await awardPoints(tx, award);
    },
  };
}

/** A fresh container of `variant`. */
export function externalContainer(variant: VariantKey, o: ContainerOptions): ExternalContainer {
  const runtime = quietRuntime(o.pool, o.databaseUrl, {
    functionTimeoutSeconds: o.functionTimeoutSeconds,
    // The defaults are sized for a 30 s function; the matrix's short one (every redelivery
    // waits it out) needs its own: the least return reserve, a short lock wait (no two trials
    // share a job), so a record may start until 1 s before the timeout on a busy machine.
    recordBudgetMs: 1000,
    returnReserveMs: 500,
    lockTimeoutMs: 300,
  });
  if (variant === "jobfence") {
    const handler = createConsumer(jobfenceDefinition(o), runtime);
    return { invoke: (records, context) => handler({ Records: records }, context) };
  }
  const config = new IdempotencyConfig({
    eventKeyJmesPath: "job_id",
    payloadValidationJmesPath: "request",
    throwOnNoIdempotencyKey: true,
  });
  const definition = variant === "bare" ? bareDefinition(o) : powertoolsDefinition(o, config);
  const handler = createConsumer(definition, runtime);
  return {
    invoke(records, context) {
      config.registerLambdaContext(context);
      return handler({ Records: records }, context);
    },
  };
}
