/**
 * What a JobConsumer's props decide, validated at synth with every problem reported together in
 * one ConfigurationError: the deployment settings with their defaults filled in
 * (CONSUMER_DEPLOYMENT_DEFAULTS), the runtime (Node 22 or 24), the retry override (whose type
 * already requires a rationale), the fence TTL against retention and the retry window (the same
 * `validateFenceTtl` the consumer runs at start-up), the delivery timings together
 * (`validateDeliveryTimings`: visibility, redrive count, retention, time budget), the queue and
 * event-source bounds (provisioned pollers within maxConcurrency, and no event filtering: Lambda
 * deletes what a filter drops), the queues given for the definition's follow-up targets, and a
 * drain entry of the user's own for a definition with a custom `fingerprint`.
 */
import type * as lambda from "aws-cdk-lib/aws-lambda";
import type * as sqs from "aws-cdk-lib/aws-sqs";
import {
  BACKSTOP_RETENTION_SECONDS,
  type ConsumerDeploymentSettings,
  resolveDeliveryTimings,
} from "../../functions/consumer-deployment.ts";
import { CONSUMER_NAME, consumerNameCollision } from "../../shared/config/fields.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { TTL_DEFAULTS, validateFenceTtl } from "../../shared/fence/ttl.ts";
import { type DeliveryTimings, validateDeliveryTimings } from "../../shared/retry/delivery-timings.ts";
import { DEFAULT_RETRY_POLICY, type RetryPolicy, resolveRetryPolicy } from "../../shared/retry/policy.ts";
import { BACKSTOP_DRAIN_DEFAULTS, CONSUMER_DEFAULTS, CONSUMER_DEPLOYMENT_DEFAULTS } from "../defaults.ts";
import { type ManagedInstancesProps, managedInstancesProblems } from "./managed-instances.ts";
import { runtimeProblems } from "./runtime.ts";

/**
 * The props of a JobConsumer that decide its queues, timings, runtime and follow-up targets: the
 * consumer's definition and its deployment settings (what a registry entry of this repository
 * holds), each with a named default.
 */
export interface ConsumerSettingsProps extends Partial<ConsumerDeploymentSettings> {
  /**
   * The consumer's definition (a `ConsumerDefinition`). Its `retry` override, if any, is the policy both
   * the function and the queues use; its `sends` are the follow-up targets.
   */
  readonly definition: ConsumerDeploymentSettings["definition"];
  /** Whether its queues are FIFO. @default CONSUMER_DEPLOYMENT_DEFAULTS.fifo (false) */
  readonly fifo?: boolean;
  /** The function's timeout. @default CONSUMER_DEPLOYMENT_DEFAULTS.functionTimeoutSeconds (30) */
  readonly functionTimeoutSeconds?: number;
  /** The source queue's retention. @default CONSUMER_DEPLOYMENT_DEFAULTS.queueRetentionSeconds (4 days) */
  readonly queueRetentionSeconds?: number;
  /** Records per invocation. @default CONSUMER_DEPLOYMENT_DEFAULTS.batchSize (10) */
  readonly batchSize?: number;
  /** Invocations at once, at most. @default CONSUMER_DEPLOYMENT_DEFAULTS.maxConcurrency (2) */
  readonly maxConcurrency?: number;
  /**
   * The Lambda runtime of the consumer, its backstop drain and its outbox relay: Node 22 or Node 24
   * (anything else is refused); the bundles are built for it.
   * @default CONSUMER_DEPLOYMENT_DEFAULTS.runtime (Node 24)
   */
  readonly runtime?: lambda.Runtime;
  /**
   * The fence TTL; validated at synth against every place a copy of a job can wait (the outbox
   * deadline, the source and backstop queues, the drain) and the retry window (docs/design.md §7.2).
   * @default TTL_DEFAULTS.fenceTtlSeconds (21 days)
   */
  readonly fenceTtlSeconds?: number;
  /**
   * The source queue's visibility timeout; at least 6 × the function timeout + the batching
   * window (AWS's guidance for SQS event sources).
   * @default 6 × functionTimeoutSeconds + batchingWindowSeconds
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
  /**
   * The backstop drain's Lambda entry point, an absolute path exporting
   * `handler = createBackstopDrain(drainConfigFromEnv(), { definition })`: required for a definition
   * with a custom `fingerprint`, which the drain must compute as the consumer does.
   * @default jobfence's own drain, which fingerprints a job by its whole payload as received (what a
   * definition without a custom `fingerprint` does)
   */
  readonly drainEntry?: string;
}

/** SQS event sources: FIFO batches hold at most 10 records; standard ones up to 10,000. */
const MAX_BATCH = { fifo: 10, standard: 10_000 } as const;
/** Standard batches above 10 records need a batching window. */
const MAX_BATCH_WITHOUT_WINDOW = 10;
/** SQS event source maximum concurrency bounds. */
const MAX_CONCURRENCY = { min: 2, max: 1000 } as const;
/** SQS provisioned mode's poller bounds. */
const PROVISIONED_POLLERS = { minimum: { min: 2, max: 200 }, maximum: { min: 2, max: 2000 } } as const;

/** A consumer's resolved settings, after validation. */
export interface ConsumerSettings {
  /** The deployment settings, every default filled in. */
  readonly deployment: ConsumerDeploymentSettings;
  /** Node 22 or Node 24. */
  readonly runtime: lambda.Runtime;
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
  const deployment = deploymentSettings(props);
  const name = deployment.definition.name;
  const runtime = props.runtime ?? CONSUMER_DEPLOYMENT_DEFAULTS.runtime;
  const problems: string[] = [...runtimeProblems(runtime)];
  if (!CONSUMER_NAME.test(name)) {
    problems.push(
      consumerNameCollision(name) ??
        `name "${name}" must be 1–63 lowercase letters, digits or dashes, starting with a letter`,
    );
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

  if (deployment.definition.fingerprint !== undefined && props.drainEntry === undefined) {
    problems.push(
      "definition has a custom fingerprint, which jobfence's own backstop drain cannot compute: give drainEntry, " +
        "the absolute path of your module exporting `handler = createBackstopDrain(drainConfigFromEnv(), { definition })` " +
        "(docs/deploy.md, A consumer's backstop drain)",
    );
  }

  const followUpTargets = Object.keys(deployment.definition.sends ?? {}).sort();
  problems.push(...followUpTargetProblems(name, followUpTargets, props.followUpTargets ?? {}));

  // validateDeliveryTimings and validateFenceTtl word the function-timeout and retention bounds
  // alike; report such a line once.
  if (problems.length > 0) throw new ConfigurationError(`JobConsumer "${name}"`, [...new Set(problems)]);
  return {
    deployment,
    runtime,
    followUpTargets,
    retryPolicy,
    visibilityTimeoutSeconds: timings.visibilityTimeoutSeconds,
    fenceTtlSeconds,
    maxReceiveCount: timings.maxReceiveCount,
    timings,
  };
}

/** The deployment settings of `props`, with CONSUMER_DEPLOYMENT_DEFAULTS where they leave one out. */
export function deploymentSettings(props: ConsumerSettingsProps): ConsumerDeploymentSettings {
  const defaults = CONSUMER_DEPLOYMENT_DEFAULTS;
  const optional = {
    provisionedPollers: props.provisionedPollers,
    filters: props.filters,
    maxReceiveCount: props.maxReceiveCount,
    batchingWindowSeconds: props.batchingWindowSeconds,
    maxInterruptions: props.maxInterruptions,
    recordBudgetMs: props.recordBudgetMs,
    returnReserveMs: props.returnReserveMs,
    lockTimeoutMs: props.lockTimeoutMs,
  };
  return Object.freeze({
    definition: props.definition,
    fifo: props.fifo ?? defaults.fifo,
    functionTimeoutSeconds: props.functionTimeoutSeconds ?? defaults.functionTimeoutSeconds,
    queueRetentionSeconds: props.queueRetentionSeconds ?? defaults.queueRetentionSeconds,
    batchSize: props.batchSize ?? defaults.batchSize,
    maxConcurrency: props.maxConcurrency ?? defaults.maxConcurrency,
    // Only what was given: a key present as undefined would read as given to a later check.
    ...Object.fromEntries(Object.entries(optional).filter(([, value]) => value !== undefined)),
  });
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
  pollers: NonNullable<ConsumerDeploymentSettings["provisionedPollers"]>,
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
