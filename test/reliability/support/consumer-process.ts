/**
 * A consumer "container": a process of its own that runs a consumer built by the real factory
 * behind the local stack's event-source poller (receive → handler → delete what it acked), the way
 * Lambda runs one. The database-fault scenarios run it as a child, so a fault that crashes a real
 * container crashes this one too, and its supervisor starts another, as Lambda would.
 *
 * Configured by JOBFENCE_REL_CONSUMER (JSON, {@link ConsumerProcessConfig}); tells its parent
 * every record's outcome over IPC; on a `stop` message it stops polling, closes its pool and exits.
 */
import { localEventBridgeClient, localSqsClient } from "../../../local/aws-clients.ts";
import { startPoller } from "../../../local/poller.ts";
import { createConsumer } from "../../../shared/consumer.ts";
import { createPool } from "../../../shared/db/pool.ts";
import { consumerRoleName } from "../../../shared/db/queries/provision-login.ts";
import { recordLogKeys } from "../../../shared/record/observe.ts";
import type { RetryPolicy } from "../../../shared/retry/policy.ts";
import { type FaultWorkOptions, faultyAwardPoints } from "./fault-work.ts";

/** What the parent tells the process. */
export interface ConsumerProcessConfig {
  readonly databaseUrl: string;
  readonly sqsEndpoint: string;
  readonly eventBridgeEndpoint: string;
  readonly queueUrl: string;
  readonly queueArn: string;
  readonly pool: {
    readonly max: number;
    readonly applicationName: string;
    readonly connectionTimeoutMs?: number;
    readonly statementTimeoutMs?: number;
  };
  readonly retryPolicy: RetryPolicy;
  readonly work: FaultWorkOptions;
  /** Invocations at once. */
  readonly concurrency: number;
  readonly batchSize: number;
}

/** What the process tells its parent. */
export type ConsumerProcessMessage =
  | { readonly type: "ready" }
  | {
      readonly type: "outcome";
      readonly status: string;
      readonly jobId: string;
      readonly attempt: number;
      /** The failure behind a retry, a failed dead-letter write or a dead letter: SQLSTATE or message. */
      readonly error?: string;
    }
  | { readonly type: "poller-error"; readonly error: string }
  | { readonly type: "stopped" };

/** The SQLSTATE of a database error, otherwise the start of the message: what the figures count. */
export function errorKey(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    if (typeof code === "string") return code;
    return error.message.slice(0, 80);
  }
  return String(error).slice(0, 80);
}

const ENV = "JOBFENCE_REL_CONSUMER";

async function main(): Promise<void> {
  const config = JSON.parse(process.env[ENV] ?? "") as ConsumerProcessConfig;
  const tell = (message: ConsumerProcessMessage) => process.send?.(message);
  const sqs = localSqsClient(config.sqsEndpoint);
  const pool = createPool({
    connectionString: config.databaseUrl,
    role: consumerRoleName("award-points"),
    max: config.pool.max,
    applicationName: config.pool.applicationName,
    ...(config.pool.connectionTimeoutMs !== undefined
      ? { connectionTimeoutMs: config.pool.connectionTimeoutMs }
      : {}),
    ...(config.pool.statementTimeoutMs !== undefined
      ? { statementTimeoutMs: config.pool.statementTimeoutMs }
      : {}),
  });
  const handler = createConsumer(faultyAwardPoints(config.work), {
    config: {
      databaseUrl: config.databaseUrl,
      opsBusName: "jobfence-ops-reliability",
      queueUrl: config.queueUrl,
    },
    pool,
    sqs,
    eventBridge: localEventBridgeClient(config.eventBridgeEndpoint),
    retryPolicy: config.retryPolicy,
    onOutcome: (outcome, rc) => {
      const cause =
        outcome.status === "retry" || outcome.status === "failed"
          ? outcome.error
          : outcome.status === "dead-letter-failed"
            ? outcome.writeError
            : outcome.status === "dead-lettered"
              ? ((outcome.error as { cause?: unknown }).cause ?? outcome.error)
              : undefined;
      tell({
        type: "outcome",
        status: outcome.status === "dead-lettered" ? `dead-lettered:${outcome.kind}` : outcome.status,
        jobId: recordLogKeys(rc).job_id,
        attempt: rc.receiveCount,
        ...(cause === undefined ? {} : { error: errorKey(cause) }),
      });
    },
  });
  const poller = startPoller({
    source: {
      sqs,
      queueUrl: config.queueUrl,
      queueArn: config.queueArn,
      batchSize: config.batchSize,
      waitSeconds: 1,
    },
    handler,
    functionName: "award-points",
    concurrency: config.concurrency,
    timeoutSeconds: 30,
    onError: (error) => tell({ type: "poller-error", error: errorKey(error) }),
  });
  process.on("message", (message: { type?: string }) => {
    if (message.type !== "stop") return;
    void (async () => {
      await poller.stop();
      await pool.end().catch(() => {});
      sqs.destroy();
      // Exit once the parent has the message: keep-alive sockets would otherwise hold the process.
      process.send?.({ type: "stopped" } satisfies ConsumerProcessMessage, () => process.exit(0));
    })();
  });
  tell({ type: "ready" });
}

await main();
