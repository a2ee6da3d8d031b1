/**
 * What a JobConsumer's props decide, validated at synth with every problem reported together in
 * one ConfigurationError: the retry override (whose type already requires a rationale), the fence
 * TTL against retention and the retry window (the same `validateFenceTtl` the consumer runs at
 * start-up), the delivery timings together (`validateDeliveryTimings`: visibility, redrive count,
 * retention, time budget), the queue and event-source bounds (provisioned pollers within
 * maxConcurrency, and no event filtering: Lambda deletes what a filter drops), and the queues given
 * for the definition's follow-up targets.
 */
import type * as sqs from "aws-cdk-lib/aws-sqs";
import {
  BACKSTOP_RETENTION_SECONDS,
  type ConsumerDeployment,
  resolveDeliveryTimings,
} from "../../functions/consumers.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { TTL_DEFAULTS, validateFenceTtl } from "../../shared/fence/ttl.ts";
import { type DeliveryTimings, validateDeliveryTimings } from "../../shared/retry/delivery-timings.ts";
import { DEFAULT_RETRY_POLICY, type RetryPolicy, resolveRetryPolicy } from "../../shared/retry/policy.ts";
import { BACKSTOP_DRAIN_DEFAULTS, CONSUMER_DEFAULTS } from "../defaults.ts";
import { type ManagedInstancesProps, managedInstancesProblems } from "./managed-instances.ts";

/** The props of a JobConsumer that decide its queues, timings and follow-up targets. */
export interface ConsumerSettingsProps {
  /**
   * The consumer and how it is deployed (an entry of `functions/consumers.ts`). Its definition's
   * `retry` override, if any, is the policy both the function and the queues use.
   */
  readonly deployment: ConsumerDeployment;
  /**
   * The fence TTL; validated at synth against every place a copy of a job can wait (the outbox
   * deadline, the source and backstop queues, the drain) and the retry window (docs/design.md §7.2).
   * @default TTL_DEFAULTS.fenceTtlSeconds (21 days)
   */
  readonly fenceTtlSeconds?: number;
  /**
   * The source queue's visibility timeout; at least 6 × the function timeout + the batching
   * window (AWS's guidance for SQS event sources).
   * @default 6 × the deployment's functionTimeoutSeconds + its batchingWindowSeconds
   */
  readonly visibilityTimeoutSeconds?: number;
  /**
   * The queue of each consumer the definition sends follow-ups to (its `sends`), by the target's
   * name: exactly those targets, checked at synth. A target named after this consumer itself is its
   * own queue and need not be given.
   * @default none: right only for a consumer that sends nothing
   */
  readonly followUpTargets?: Readonly<Record<string, sqs.IQueue>>;
  /**
   * Runs the consumer function on Lambda Managed Instances (./managed-instances.ts): timeouts up to
   * 90 minutes, and the connection budget counts its execution environments.
   * @default none: Lambda's default compute
   */
  readonly managedInstances?: ManagedInstancesProps;
}

/** SQS event sources: FIFO batches hold at most 10 records; standard ones up to 10,000. */
const MAX_BATCH = { fifo: 10, standard: 10_000 } as const;
/** Standard batches above 10 records need a batching window. */
const MAX_BATCH_WITHOUT_WINDOW = 10;
/** SQS event source maximum concurrency bounds. */
const MAX_CONCURRENCY = { min: 2, max: 1000 } as const;
/** SQS provisioned mode's poller bounds. */
const PROVISIONED_POLLERS = { minimum: { min: 2, max: 200 }, maximum: { min: 2, max: 2000 } } as const;
const CONSUMER_NAME = /^[a-z][a-z0-9-]{0,62}$/;

/** A consumer's resolved settings, after validation. */
export interface ConsumerSettings {
  /** The targets its definition sends follow-ups to, by name; empty when it sends nothing. */
  readonly followUpTargets: readonly string[];
  readonly retryPolicy: RetryPolicy;
  readonly visibilityTimeoutSeconds: number;
  readonly fenceTtlSeconds: number;
  readonly maxReceiveCount: number;
  /** Everything `validateDeliveryTimings` checked, as deployed. */
  readonly timings: DeliveryTimings;
}

/** Validates the props and resolves what they leave out; throws one error listing every problem. */
export function resolveConsumerSettings(props: ConsumerSettingsProps): ConsumerSettings {
  const { deployment } = props;
  const name = deployment.definition.name;
  const problems: string[] = [];
  if (!CONSUMER_NAME.test(name)) {
    problems.push(`name "${name}" must be 1–63 lowercase letters, digits or dashes, starting with a letter`);
  }

  let retryPolicy: RetryPolicy = DEFAULT_RETRY_POLICY;
  try {
    if (deployment.definition.retry) retryPolicy = resolveRetryPolicy(deployment.definition.retry);
  } catch (error) {
    if (!(error instanceof ConfigurationError)) throw error;
    problems.push(...error.problems);
  }

  const timeout = deployment.functionTimeoutSeconds;
  // Visibility, redrive count, retention and time budget are only safe together: one validation
  // checks them as a set (the consumer's start-up runs the same one).
  const managedInstances = props.managedInstances !== undefined;
  const timings: DeliveryTimings = {
    ...resolveDeliveryTimings(deployment, retryPolicy, props.visibilityTimeoutSeconds),
    ...(managedInstances ? { managedInstances } : {}),
  };
  problems.push(...validateDeliveryTimings(timings));
  problems.push(...managedInstancesProblems(props.managedInstances));

  const maxBatch = deployment.fifo ? MAX_BATCH.fifo : MAX_BATCH_WITHOUT_WINDOW;
  if (
    !Number.isInteger(deployment.batchSize) ||
    deployment.batchSize < 1 ||
    deployment.batchSize > maxBatch
  ) {
    problems.push(
      `batch size must be 1–${maxBatch} for a ${deployment.fifo ? "FIFO" : "standard"} queue ` +
        `(without a batching window; SQS allows ${deployment.fifo ? MAX_BATCH.fifo : MAX_BATCH.standard}), ` +
        `got ${deployment.batchSize}`,
    );
  }
  const concurrency = deployment.maxConcurrency;
  if (deployment.provisionedPollers) {
    problems.push(...validateProvisionedPollers(deployment.provisionedPollers, concurrency));
  } else if (
    !Number.isInteger(concurrency) ||
    concurrency < MAX_CONCURRENCY.min ||
    concurrency > MAX_CONCURRENCY.max
  ) {
    problems.push(
      `maxConcurrency must be ${MAX_CONCURRENCY.min}–${MAX_CONCURRENCY.max} (the SQS event source's bounds), got ${concurrency}`,
    );
  }
  if (deployment.filters !== undefined) {
    problems.push(
      "filters are refused: Lambda deletes every message an event filter drops, never processed and never " +
        "dead-lettered, a silent loss; remove them and decide in the work (a job it returns from is applied)",
    );
  }

  const fenceTtlSeconds = props.fenceTtlSeconds ?? TTL_DEFAULTS.fenceTtlSeconds;
  problems.push(
    ...validateFenceTtl({
      queueRetentionSeconds: deployment.queueRetentionSeconds,
      backstopRetentionSeconds: BACKSTOP_RETENTION_SECONDS,
      fifo: deployment.fifo,
      drainTimeoutSeconds: BACKSTOP_DRAIN_DEFAULTS.timeout.toSeconds(),
      retryPolicy,
      functionTimeoutSeconds: timeout,
      managedInstances,
      fenceTtlSeconds,
    }),
  );

  const followUpTargets = Object.keys(deployment.definition.sends ?? {}).sort();
  problems.push(...followUpTargetProblems(name, followUpTargets, props.followUpTargets ?? {}));

  // validateDeliveryTimings and validateFenceTtl word the function-timeout and retention bounds
  // alike; report such a line once.
  if (problems.length > 0) throw new ConfigurationError(`JobConsumer "${name}"`, [...new Set(problems)]);
  return {
    followUpTargets,
    retryPolicy,
    visibilityTimeoutSeconds: timings.visibilityTimeoutSeconds,
    fenceTtlSeconds,
    maxReceiveCount: timings.maxReceiveCount,
    timings,
  };
}

/**
 * The queues given for the follow-up targets against the definition's `sends`, as the consumer's
 * start-up checks its `JOBFENCE_OUTBOX_QUEUES`: a queue for every target (but itself, whose queue is
 * its own), and none for a consumer it does not send to (a deployment wired for another version).
 */
function followUpTargetProblems(
  consumer: string,
  declared: readonly string[],
  given: Readonly<Record<string, sqs.IQueue>>,
): string[] {
  const problems: string[] = [];
  for (const target of declared) {
    if (target !== consumer && !Object.hasOwn(given, target)) {
      problems.push(
        `sends: "${target}" has no queue: give followUpTargets["${target}"], the target consumer's source queue`,
      );
    }
  }
  for (const target of Object.keys(given)) {
    if (!declared.includes(target)) {
      problems.push(
        `followUpTargets: "${target}" is not a target of consumer "${consumer}" (its definition's sends): remove it`,
      );
    }
  }
  return problems;
}

/**
 * Provisioned pollers within SQS's bounds, and within maxConcurrency: AWS takes no maximum
 * concurrency beside them, so the pollers' reach is the bound, and maxConcurrency must cover it.
 */
function validateProvisionedPollers(
  pollers: NonNullable<ConsumerDeployment["provisionedPollers"]>,
  maxConcurrency: number,
): string[] {
  const { minimumPollers: min, maximumPollers: max } = pollers;
  const problems: string[] = [];
  const { minimum, maximum } = PROVISIONED_POLLERS;
  if (!Number.isInteger(min) || min < minimum.min || min > minimum.max) {
    problems.push(
      `provisionedPollers.minimumPollers must be ${minimum.min}–${minimum.max} (SQS's bounds), got ${min}`,
    );
  }
  if (!Number.isInteger(max) || max < maximum.min || max > maximum.max) {
    problems.push(
      `provisionedPollers.maximumPollers must be ${maximum.min}–${maximum.max} (SQS's bounds), got ${max}`,
    );
  }
  if (problems.length > 0) return problems;
  if (min > max) {
    return [`provisionedPollers.minimumPollers ${min} must not exceed maximumPollers ${max}`];
  }
  const perPoller = CONSUMER_DEFAULTS.invocationsPerPoller;
  const reach = max * perPoller;
  if (!Number.isInteger(maxConcurrency) || maxConcurrency < reach) {
    problems.push(
      `maxConcurrency ${maxConcurrency} is below what the provisioned pollers can run: maximumPollers ${max} × ` +
        `${perPoller} invocations per poller = ${reach} (provisioned mode has no maximum concurrency of its own, ` +
        `and each invocation holds its pool's connections); raise maxConcurrency to ${reach} or lower maximumPollers`,
    );
  }
  return problems;
}
