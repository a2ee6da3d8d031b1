/**
 * Everything a consumer is checked for at start-up (a Lambda's init), so a misconfigured consumer
 * never receives a message: its name, its configuration, its retry policy against the fence's
 * lifetime and the queue's timings, and its follow-up targets against the deployment's queues.
 * Every problem is reported at once, in one ConfigurationError.
 */
import { ConfigurationError } from "../errors/configuration.ts";
import { validateFenceTtl } from "../fence/ttl.ts";
import { type ManagedConcurrency, managedConcurrency } from "../invocation/concurrency.ts";
import {
  defaultRecordBudgetMs,
  defaultReturnReserveMs,
  validateDeliveryTimings,
  validateTimeBudget,
} from "../retry/delivery-timings.ts";
import {
  DEFAULT_RETRY_POLICY,
  type RetryOverride,
  type RetryPolicy,
  resolveRetryPolicy,
} from "../retry/policy.ts";
import { isFifoQueue } from "../sqs/queue-url.ts";
import {
  CONSUMER_DEFAULTS,
  type ConsumerConfig,
  type ConsumerConfigInput,
  consumerConfigFromEnv,
  parseConsumerConfig,
} from "./consumer-config.ts";
import { CONSUMER_NAME, consumerNameCollision } from "./fields.ts";

/** A definition's `sends`, as far as it is checked here: each target's name and what it parses with. */
type DeclaredTargets = Readonly<Record<string, unknown>>;

/** What is checked of a consumer: its definition's parts that configure it, and what the host gives. */
export interface ConsumerToCheck {
  readonly name: string;
  readonly retry?: RetryOverride;
  readonly sends?: DeclaredTargets;
  /** @default read from the environment */
  readonly config?: ConsumerConfigInput;
  /** @default DEFAULT_RETRY_POLICY */
  readonly retryPolicy?: RetryPolicy;
  /** Where the managed runtime's concurrency is read (shared/invocation/concurrency.ts). @default process.env */
  readonly env?: NodeJS.ProcessEnv;
}

/** A consumer's checked settings. */
export interface CheckedConsumer {
  /** The configuration, its pool size resolved for the compute it runs on ({@link poolSizeFor}). */
  readonly config: ConsumerConfig & { readonly poolMax: number };
  /** The managed-instance concurrency the environment declares; undefined on Lambda's default compute. */
  readonly managed: ManagedConcurrency | undefined;
  readonly retryPolicy: RetryPolicy;
  readonly timings: { readonly recordBudgetMs: number; readonly returnReserveMs: number };
}

/** Checks a consumer; throws one ConfigurationError listing every problem. */
export function checkConsumer(c: ConsumerToCheck): CheckedConsumer {
  const problems: string[] = [];
  if (!CONSUMER_NAME.test(c.name)) {
    problems.push(
      consumerNameCollision(c.name) ??
        `name "${c.name}" must be 1–63 lowercase letters, digits or dashes, starting with a letter`,
    );
  }
  const parsed = collect(problems, () =>
    c.config ? parseConsumerConfig(c.config, c.name) : consumerConfigFromEnv(),
  );
  let managed: ManagedConcurrency | undefined;
  try {
    managed = managedConcurrency(c.env ?? process.env);
  } catch (error) {
    if (!(error instanceof RangeError)) throw error;
    problems.push(error.message);
  }
  const config = parsed && { ...parsed, poolMax: poolSizeFor(parsed.poolMax, managed) };
  const retryPolicy = collect(problems, () =>
    c.retry ? resolveRetryPolicy(c.retry, c.retryPolicy) : (c.retryPolicy ?? DEFAULT_RETRY_POLICY),
  );
  if (config && retryPolicy) {
    problems.push(
      ...validateFenceTtl({
        queueRetentionSeconds: config.queueRetentionSeconds,
        backstopRetentionSeconds: config.backstopRetentionSeconds,
        retryPolicy,
        functionTimeoutSeconds: config.functionTimeoutSeconds,
        managedInstances: managed !== undefined,
        fenceTtlSeconds: config.fenceTtlSeconds,
        // Unknown until a record names its queue: FIFO, the longer of the two waits.
        fifo: config.fifo ?? (config.queueUrl === undefined ? true : isFifoQueue(config.queueUrl)),
      }),
    );
  }
  const timings = config && {
    recordBudgetMs:
      config.recordBudgetMs ?? defaultRecordBudgetMs(config.functionTimeoutSeconds, config.lockTimeoutMs),
    returnReserveMs: config.returnReserveMs ?? defaultReturnReserveMs(config.functionTimeoutSeconds),
  };
  if (config && retryPolicy && timings)
    problems.push(...timingProblems(config, retryPolicy, timings, managed !== undefined));
  if (config) problems.push(...followUpProblems(c.name, c.sends ?? {}, config.outboxQueues));
  if (problems.length > 0 || !config || !retryPolicy || !timings)
    throw new ConfigurationError(`consumer "${c.name}"`, problems);
  return { config, managed, retryPolicy, timings };
}

/**
 * The pool's size: the configuration's when it sets one (a cap: invocations beyond it wait for a
 * connection, within their deadline); else, on Lambda Managed Instances, this worker's share of
 * the environment's concurrent invocations, so each has its connection (a record holds one at a
 * time); else the default 2 (one invocation at a time: docs/scaling.md).
 */
export function poolSizeFor(configured: number | undefined, managed: ManagedConcurrency | undefined): number {
  return configured ?? managed?.perWorker ?? CONSUMER_DEFAULTS.poolMax;
}

/**
 * The delivery timings validated together (docs/design.md §4.5), as far as the configuration tells them: all
 * of them when the deployment passed the queue's redrive count and visibility timeout (the CDK
 * construct does), the time budget alone otherwise (the local stack, tests).
 */
function timingProblems(
  config: ConsumerConfig,
  retryPolicy: RetryPolicy,
  budget: { recordBudgetMs: number; returnReserveMs: number },
  managedInstances: boolean,
): string[] {
  const known = {
    functionTimeoutSeconds: config.functionTimeoutSeconds,
    managedInstances,
    lockTimeoutMs: config.lockTimeoutMs,
    ...budget,
  };
  if (config.maxReceiveCount === undefined || config.visibilityTimeoutSeconds === undefined)
    return validateTimeBudget(known);
  return validateDeliveryTimings({
    ...known,
    retryPolicy,
    maxInterruptions: config.maxInterruptions,
    maxReceiveCount: config.maxReceiveCount,
    visibilityTimeoutSeconds: config.visibilityTimeoutSeconds,
    batchingWindowSeconds: config.batchingWindowSeconds,
    queueRetentionSeconds: config.queueRetentionSeconds,
    fifo: config.fifo ?? false,
  });
}

/**
 * The follow-up targets against the deployment's queues: every target a consumer name with a
 * queue URL, and no queue for a target the definition does not declare (a deployment wired for
 * another version of the consumer).
 */
function followUpProblems(
  consumer: string,
  sends: DeclaredTargets,
  queues: Readonly<Record<string, string>>,
): string[] {
  const problems: string[] = [];
  for (const [target, declared] of Object.entries(sends)) {
    if (!CONSUMER_NAME.test(target)) {
      problems.push(`sends: "${target}" is not a consumer name`);
      continue;
    }
    const schema = (declared as { safeParse?: unknown; payload?: { safeParse?: unknown } } | null) ?? {};
    if (typeof schema.safeParse !== "function" && typeof schema.payload?.safeParse !== "function") {
      problems.push(`sends: "${target}" must be the target's definition or its payload schema`);
    }
    if (!Object.hasOwn(queues, target)) {
      problems.push(
        `sends: "${target}" has no queue URL: the deployment gives each target's (outboxQueues, JOBFENCE_OUTBOX_QUEUES)`,
      );
    }
  }
  for (const target of Object.keys(queues)) {
    if (!Object.hasOwn(sends, target)) {
      problems.push(
        `outboxQueues: "${target}" is not a target of consumer "${consumer}" (its definition's sends)`,
      );
    }
  }
  return problems;
}

function collect<T>(problems: string[], build: () => T): T | undefined {
  try {
    return build();
  } catch (error) {
    if (error instanceof ConfigurationError) problems.push(...error.problems);
    else throw error;
    return undefined;
  }
}
