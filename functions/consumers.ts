/**
 * The deployment's consumers and how each is wired to its queues: one list that the CDK
 * constructs and the local stack both read, so what runs locally is what deploys.
 */
import type { z } from "zod";
import { type ConsumerDefinition, TTL_DEFAULTS } from "../shared/index.ts";
import { awardPointsConsumer } from "./award-points/consumer.ts";

/** How a consumer is deployed. */
export interface ConsumerDeployment {
  // biome-ignore lint/suspicious/noExplicitAny: a list of consumers with different payload schemas
  readonly definition: ConsumerDefinition<z.ZodType<any>>;
  /** Whether its queue is FIFO. */
  readonly fifo: boolean;
  /** The function's timeout; the queue's visibility timeout is six times it (SPEC §10). */
  readonly functionTimeoutSeconds: number;
  /** The source queue's retention. */
  readonly queueRetentionSeconds: number;
  /** Records per invocation. */
  readonly batchSize: number;
  /** Invocations at once (the event source's maximum concurrency). */
  readonly maxConcurrency: number;
}

/** SPEC §10: the visibility timeout is at least six times the function timeout. */
export const VISIBILITY_TO_TIMEOUT_RATIO = 6;
/** SPEC §5: the backstop queue keeps messages 14 days. */
export const BACKSTOP_RETENTION_SECONDS = 14 * 86_400;
/** SPEC §5: the redrive to the backstop happens after maxAttempts + 3 receives. */
export const BACKSTOP_EXTRA_RECEIVES = 3;

export const CONSUMERS: readonly ConsumerDeployment[] = [
  {
    definition: awardPointsConsumer,
    fifo: false,
    functionTimeoutSeconds: 30,
    queueRetentionSeconds: TTL_DEFAULTS.queueRetentionSeconds,
    batchSize: 10,
    maxConcurrency: 4,
  },
];

/** Queue names of a consumer: its source queue and its backstop. */
export function queueNames(deployment: ConsumerDeployment): { source: string; backstop: string } {
  const suffix = deployment.fifo ? ".fifo" : "";
  const name = deployment.definition.name;
  return { source: `${name}${suffix}`, backstop: `${name}-backstop${suffix}` };
}
