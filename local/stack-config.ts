/**
 * The local stack's configuration, from the environment; refused at start-up with every problem
 * listed, like any other jobfence configuration.
 */
import { z } from "zod";
import { type ConsumerDeployment, resolveDeliveryTimings } from "../functions/consumers.ts";
import { databaseUrlField } from "../shared/config/fields.ts";
import { retryPolicyFromEnv } from "../shared/config/retry-env.ts";
import { ConfigurationError } from "../shared/errors/configuration.ts";
import type { DeliveryTimings } from "../shared/retry/delivery-timings.ts";
import type { RetryPolicy } from "../shared/retry/policy.ts";
import { localDirFromEnv } from "./local-dir.ts";
import { LOCAL_PORTS } from "./ports.ts";

/** Local retry timing: seconds, not minutes, so a demo shows retries and exhaustion quickly. */
export const LOCAL_RETRY_POLICY: RetryPolicy = Object.freeze({
  maxAttempts: 5,
  baseSeconds: 2,
  capSeconds: 10,
});

const port = z.coerce.number().int().min(0).max(65_535);

const schema = z.object({
  /** Where state lives: stack.json, the embedded PostgreSQL's data, the emulator's SQLite. */
  JOBFENCE_LOCAL_DIR: z.string().min(1).optional(),
  DATABASE_URL: databaseUrlField.optional(),
  SQS_ENDPOINT: z.url({ protocol: /^https?$/ }).optional(),
  JOBFENCE_PG_PORT: port.default(LOCAL_PORTS.postgres),
  JOBFENCE_SQS_PORT: port.default(LOCAL_PORTS.sqs),
  JOBFENCE_API_PORT: port.default(LOCAL_PORTS.api),
  JOBFENCE_PROVIDER_PORT: port.default(LOCAL_PORTS.provider),
  JOBFENCE_LOCK_TIMEOUT_MS: z.coerce.number().int().min(1).max(600_000).default(2000),
  JOBFENCE_CLEANUP_INTERVAL_SECONDS: z.coerce.number().int().min(1).default(60),
  JOBFENCE_ESCALATION_INTERVAL_SECONDS: z.coerce.number().int().min(1).default(3600),
  /** How often each sending consumer's outbox relay runs (deployed: every minute). */
  JOBFENCE_OUTBOX_INTERVAL_SECONDS: z.coerce.number().int().min(1).default(5),
  JOBFENCE_POLL_WAIT_SECONDS: z.coerce.number().int().min(0).max(20).default(1),
  /** Bulk operations over more dead letters than this need their plan's token (as the API's JOBFENCE_BULK_CONFIRM_ABOVE). */
  JOBFENCE_BULK_CONFIRM_ABOVE: z.coerce.number().int().min(0).max(1_000_000).default(100),
  /** How long the bulk-operations worker rests between runs when nothing was due. */
  JOBFENCE_BULK_WORKER_IDLE_MS: z.coerce.number().int().min(10).max(60_000).default(250),
  /** Show the functions' own JSON logs (Powertools) besides the readable progress lines. */
  JOBFENCE_JSON_LOGS: z.enum(["0", "1"]).default("0"),
});

/** The validated configuration. */
export interface LocalStackConfig {
  readonly localDir: string;
  readonly databaseUrl?: string;
  readonly sqsEndpoint?: string;
  readonly ports: {
    readonly postgres: number;
    readonly sqs: number;
    readonly api: number;
    readonly provider: number;
  };
  readonly retryPolicy: RetryPolicy;
  readonly lockTimeoutMs: number;
  readonly cleanupIntervalMs: number;
  readonly escalationIntervalMs: number;
  readonly outboxIntervalMs: number;
  readonly pollWaitSeconds: number;
  readonly bulkConfirmAbove: number;
  readonly bulkWorkerIdleMs: number;
  readonly jsonLogs: boolean;
}

export function localStackConfigFromEnv(env: NodeJS.ProcessEnv, repoRoot: string): LocalStackConfig {
  const problems: string[] = [];
  const present = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ""));
  const parsed = schema.safeParse(present);
  if (!parsed.success) problems.push(...parsed.error.issues.map((i) => `${String(i.path[0])}: ${i.message}`));
  let retryPolicy: RetryPolicy = LOCAL_RETRY_POLICY;
  try {
    retryPolicy = retryPolicyFromEnv(LOCAL_RETRY_POLICY, env);
  } catch (error) {
    if (error instanceof ConfigurationError) problems.push(...error.problems);
    else throw error;
  }
  if (problems.length > 0 || !parsed.success)
    throw new ConfigurationError("local stack environment", problems);
  const e = parsed.data;
  return {
    localDir: localDirFromEnv(env, repoRoot),
    ...(e.DATABASE_URL ? { databaseUrl: e.DATABASE_URL } : {}),
    ...(e.SQS_ENDPOINT ? { sqsEndpoint: e.SQS_ENDPOINT.replace(/\/$/, "") } : {}),
    ports: {
      postgres: e.JOBFENCE_PG_PORT,
      sqs: e.JOBFENCE_SQS_PORT,
      api: e.JOBFENCE_API_PORT,
      provider: e.JOBFENCE_PROVIDER_PORT,
    },
    retryPolicy,
    lockTimeoutMs: e.JOBFENCE_LOCK_TIMEOUT_MS,
    cleanupIntervalMs: e.JOBFENCE_CLEANUP_INTERVAL_SECONDS * 1000,
    escalationIntervalMs: e.JOBFENCE_ESCALATION_INTERVAL_SECONDS * 1000,
    outboxIntervalMs: e.JOBFENCE_OUTBOX_INTERVAL_SECONDS * 1000,
    pollWaitSeconds: e.JOBFENCE_POLL_WAIT_SECONDS,
    bulkConfirmAbove: e.JOBFENCE_BULK_CONFIRM_ABOVE,
    bulkWorkerIdleMs: e.JOBFENCE_BULK_WORKER_IDLE_MS,
    jsonLogs: e.JOBFENCE_JSON_LOGS === "1",
  };
}

/**
 * A consumer's delivery timings on the local stack: the queues' redrive count is the one the CDK
 * construct would deploy for the local retry policy (of the policy, only maxAttempts counts), and
 * the stack's lock timeout. The stack creates its queues from them; the doctor checks them.
 */
export function localDeliveryTimings(
  config: LocalStackConfig,
  deployment: ConsumerDeployment,
): DeliveryTimings {
  return resolveDeliveryTimings(
    { ...deployment, lockTimeoutMs: config.lockTimeoutMs },
    {
      ...config.retryPolicy,
      maxAttempts: deployment.definition.retry?.maxAttempts ?? config.retryPolicy.maxAttempts,
    },
  );
}
