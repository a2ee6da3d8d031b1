/**
 * What the external-steps benchmark's parts share and its crash child must know without loading
 * them: the variants, the kill points and where each variant dies at each, and what the child is
 * told. Pure data.
 *
 * Every variant is the same jobfence consumer (award-points' effect in the fence transaction, so
 * the database's side is exactly once in all three) whose job also charges the customer through
 * the fake provider; they differ only in how the charge is made:
 * - jobfence: `job.step("charge", …)` before the fence transaction, with the key jobfence derives
 *   (stepKey) sent as the Idempotency-Key and the result checkpointed in core.job_steps;
 * - bare: the same call made in the work, no key;
 * - Powertools: the call in the work wrapped by `makeIdempotent` (DynamoDB store, keyed on the job
 *   id), no key to the provider.
 */
import type { SQSRecord } from "aws-lambda";

/** The variants, as the tables print them. */
export const VARIANTS = {
  jobfence: "jobfence job.step",
  bare: "bare call in the work",
  powertools: "Powertools makeIdempotent",
} as const;
export type VariantKey = keyof typeof VARIANTS;
export const VARIANT_KEYS = Object.keys(VARIANTS) as VariantKey[];

export const POINTS = ["K1", "K2", "K3", "K4"] as const;
export type Point = (typeof POINTS)[number];
export const POINT_NAMES: Record<Point, string> = {
  K1: "before the call",
  K2: "provider acted, before the checkpoint",
  K3: "after the checkpoint, before the fence commits",
  K4: "after the commit, before the ack",
};

/** Where a variant's work may stop the process around its call (bare, Powertools). */
export type WorkPoint = "before-call" | "after-call" | "after-checkpoint";

/**
 * Where the child dies: at a harness fault point (shared/fault-points.ts, for the killed job) or
 * at one of the work's own points.
 */
export type KillAt = { readonly hook: string } | { readonly work: WorkPoint };

/**
 * Each variant's kill at each point. Bare has no checkpoint: its K3 is the end of the work, before
 * the COMMIT (the call made, as at K2). Powertools' checkpoint is its completion record: K2 is the
 * end of the wrapped function (the provider answered, the record still in progress), K3 right
 * after makeIdempotent returned (the record completed).
 */
export const KILL_AT: Record<VariantKey, Record<Point, KillAt>> = {
  jobfence: {
    K1: { hook: "step:before-call" },
    K2: { hook: "step:after-call" },
    K3: { hook: "step:after-checkpoint" },
    K4: { hook: "fence:after-commit" },
  },
  bare: {
    K1: { work: "before-call" },
    K2: { work: "after-call" },
    K3: { hook: "fence:after-work" },
    K4: { hook: "fence:after-commit" },
  },
  powertools: {
    K1: { work: "before-call" },
    K2: { work: "after-call" },
    K3: { work: "after-checkpoint" },
    K4: { hook: "fence:after-commit" },
  },
};

/** Powertools' store, as the child is told it. */
export interface DynamoAddress {
  readonly endpoint: string;
  readonly tableName: string;
}

/** What the child is told (bench/lib/crash-protocol.ts). */
export interface ExternalChildConfig {
  readonly variant: VariantKey;
  readonly point: Point;
  /** The job at whose point the child dies (the batch's jobs before it are done, those after not begun). */
  readonly killJobId: string;
  readonly records: SQSRecord[];
  readonly databaseUrl: string;
  readonly providerUrl: string;
  readonly dynamodb: DynamoAddress;
  readonly keyPrefix: string;
  /** The Lambda function timeout (Powertools' in-progress expiry). */
  readonly timeoutMs: number;
}

/** The jobfence variant's step name: part of the key jobfence derives for the call. */
export const STEP_NAME = "charge";
