/**
 * How a consumer is deployed, apart from any registry: the settings a JobConsumer construct is
 * built from, and what is derived from them (its queues' names, its delivery timings, what the
 * doctor expects of its queues). The repository's registry (functions/consumers.ts) and a user's
 * own CDK app both use it; nothing here knows which consumers exist.
 */
import type { z } from "zod";
import { CONSUMER_DEFAULTS } from "../shared/config/consumer-config.ts";
import type { ConsumerDefinition } from "../shared/consumer.ts";
import type { ExpectedConsumerQueues } from "../shared/doctor/check-queues.ts";
import { BACKSTOP_RETENTION_SECONDS } from "../shared/fence/ttl.ts";
import {
  DELIVERY_TIMING_DEFAULTS,
  type DeliveryTimings,
  defaultMaxReceiveCount,
  defaultRecordBudgetMs,
  defaultReturnReserveMs,
  VISIBILITY_TO_TIMEOUT_RATIO,
} from "../shared/retry/delivery-timings.ts";
import { DEFAULT_RETRY_POLICY, type RetryPolicy, resolveRetryPolicy } from "../shared/retry/policy.ts";

/** The visibility timeout is at least six times the function timeout (defined with the other timings). */
/** The backstop queue keeps messages 14 days (docs/design.md §5.6); the fence TTL is validated against it. */
export { BACKSTOP_RETENTION_SECONDS, VISIBILITY_TO_TIMEOUT_RATIO };

/**
 * How a consumer is deployed: its definition and the settings of its queues, event source and
 * delivery timings. The JobConsumer construct takes these (with its defaults filled in), the
 * repository's registry (functions/consumers.ts) declares them per consumer.
 */
export interface ConsumerDeploymentSettings {
  /** The consumer's definition (a `ConsumerDefinition`): its name, payload schema, work, retry override and follow-up targets. */
  // biome-ignore lint/suspicious/noExplicitAny: consumers with different payload schemas, targets and step results
  readonly definition: ConsumerDefinition<z.ZodType<any>, any, any>;
  /** Whether its queue is FIFO. */
  readonly fifo: boolean;
  /**
   * The function's timeout; the queue's visibility timeout is six times it plus the batching
   * window (AWS's guidance for SQS event sources; docs/design.md §4.5).
   */
  readonly functionTimeoutSeconds: number;
  /** The source queue's retention. */
  readonly queueRetentionSeconds: number;
  /** Records per invocation. */
  readonly batchSize: number;
  /**
   * Invocations at once, at most: the event source's maximum concurrency (2–1000). With
   * {@link ConsumerDeploymentSettings.provisionedPollers} AWS takes no maximum concurrency, and this must be at least what the
   * pollers can run (maximumPollers × 10). Either way it is the bound the connection budget counts
   * (each invocation holds its pool's connections) and the local stack runs.
   */
  readonly maxConcurrency: number;
  /**
   * Provisioned mode: the event source keeps between these many dedicated pollers (SQS: minimum
   * 2–200, maximum 2–2000), each running up to 10 invocations at once. The reference stack then
   * requires its `connectionBudget`, and refuses pollers whose reach exceeds it.
   * @default none: the event source scales on its own, up to maxConcurrency
   */
  readonly provisionedPollers?: { readonly minimumPollers: number; readonly maximumPollers: number };
  /**
   * Event filtering is refused: Lambda deletes every message a filter drops, unprocessed and
   * unrecorded, which is a silent loss for a consumer whose every message must end applied or
   * dead-lettered. Filter in the work instead (and return: the job is applied as a no-op).
   */
  readonly filters?: never;
  /**
   * The source queue's redrive to the backstop, in receives. Validated with the other timings
   * (shared/retry/delivery-timings.ts): high enough for the receives that run nothing, low enough
   * that with the database unreachable the backstop gets a message well within its retention.
   * @default minimumMaxReceiveCount: 19 for a standard queue, 100 for FIFO, with the default policy
   */
  readonly maxReceiveCount?: number;
  /**
   * The event source's MaximumBatchingWindowInSeconds (0–300; Lambda supports none on FIFO).
   * @default 0
   */
  readonly batchingWindowSeconds?: number;
  /**
   * Confirmed interruptions (crashes, timeouts) before a message is dead-lettered `interrupted`.
   * @default DELIVERY_TIMING_DEFAULTS.MAX_INTERRUPTIONS (2)
   */
  readonly maxInterruptions?: number;
  /**
   * No record starts when less than this remains of the invocation.
   * @default defaultRecordBudgetMs: a third of the function timeout, at most 10 s, at least the lock timeout + the reserve + 1 s
   */
  readonly recordBudgetMs?: number;
  /**
   * The harness stops waiting for a running record this long before the timeout.
   * @default defaultReturnReserveMs: a tenth of the function timeout, at most 2 s
   */
  readonly returnReserveMs?: number;
  /**
   * How long a fence insert waits behind another delivery of the same job.
   * @default CONSUMER_DEFAULTS.lockTimeoutMs (5 s)
   */
  readonly lockTimeoutMs?: number;
}

/** Queue names of a consumer: its source queue and its backstop. */
export function queueNames(deployment: ConsumerDeploymentSettings): { source: string; backstop: string } {
  const suffix = deployment.fifo ? ".fifo" : "";
  const name = deployment.definition.name;
  return { source: `${name}${suffix}`, backstop: `${name}-backstop${suffix}` };
}

/**
 * A consumer's delivery timings, with what the deployment leaves out filled in from
 * shared/retry/delivery-timings.ts: the one resolution the CDK construct and the local stack both
 * use, so the redrive count deployed is the one run locally. Resolves only; the caller validates
 * (`validateDeliveryTimings`), so a construct can report its problems together with its others.
 *
 * @param retryPolicy the effective policy (the definition's override applied to the default)
 * @param visibilityTimeoutSeconds the source queue's visibility timeout, when set explicitly;
 *   by default 6 × the function timeout + the batching window
 */
export function resolveDeliveryTimings(
  deployment: ConsumerDeploymentSettings,
  retryPolicy: RetryPolicy,
  visibilityTimeoutSeconds?: number,
): DeliveryTimings {
  const timeout = deployment.functionTimeoutSeconds;
  const batchingWindowSeconds = deployment.batchingWindowSeconds ?? 0;
  const maxInterruptions = deployment.maxInterruptions ?? DELIVERY_TIMING_DEFAULTS.MAX_INTERRUPTIONS;
  const lockTimeoutMs = deployment.lockTimeoutMs ?? CONSUMER_DEFAULTS.lockTimeoutMs;
  return Object.freeze({
    retryPolicy,
    maxInterruptions,
    maxReceiveCount:
      deployment.maxReceiveCount ??
      defaultMaxReceiveCount({ retryPolicy, maxInterruptions, fifo: deployment.fifo }),
    visibilityTimeoutSeconds:
      visibilityTimeoutSeconds ?? VISIBILITY_TO_TIMEOUT_RATIO * timeout + batchingWindowSeconds,
    functionTimeoutSeconds: timeout,
    batchingWindowSeconds,
    queueRetentionSeconds: deployment.queueRetentionSeconds,
    fifo: deployment.fifo,
    recordBudgetMs: deployment.recordBudgetMs ?? defaultRecordBudgetMs(timeout, lockTimeoutMs),
    returnReserveMs: deployment.returnReserveMs ?? defaultReturnReserveMs(timeout),
    lockTimeoutMs,
  });
}

/**
 * The delivery timings a deployed consumer runs with: its definition's retry override applied to
 * the default policy, as the JobConsumer construct resolves it (which also validates both).
 */
export function deployedDeliveryTimings(deployment: ConsumerDeploymentSettings): DeliveryTimings {
  const retry = deployment.definition.retry;
  return resolveDeliveryTimings(deployment, retry ? resolveRetryPolicy(retry) : DEFAULT_RETRY_POLICY);
}

/**
 * What a consumer's queues are created with, from its timings: the source queue's retention,
 * visibility timeout and redrive count, and the backstop's retention. The doctor checks the queues
 * against it.
 */
export function expectedQueues(
  deployment: ConsumerDeploymentSettings,
  timings: DeliveryTimings,
): ExpectedConsumerQueues {
  const names = queueNames(deployment);
  return {
    consumer: deployment.definition.name,
    source: {
      name: names.source,
      retentionSeconds: timings.queueRetentionSeconds,
      visibilityTimeoutSeconds: timings.visibilityTimeoutSeconds,
      maxReceiveCount: timings.maxReceiveCount,
    },
    backstop: { name: names.backstop, retentionSeconds: BACKSTOP_RETENTION_SECONDS },
  };
}
