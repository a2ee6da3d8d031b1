/**
 * The bulk-operations worker: `functions/bulk-operations` on an EventBridge schedule every minute,
 * running the chunks of the bulk replays and discards the dead-letter API started (table
 * core.bulk_operations). It logs in as the ops login, like the API, and may `SendMessage` (one or
 * a batch) only to the consumers' source queues, like the API's replay. Invocations that overlap
 * share the operations (SKIP LOCKED), so no reserved concurrency is needed. Two alarms: the
 * function's errors, and chunks that failed (`BulkOperationChunkFailures`).
 */
import type * as cloudwatch from "aws-cdk-lib/aws-cloudwatch";
import * as events from "aws-cdk-lib/aws-events";
import * as targets from "aws-cdk-lib/aws-events-targets";
import type * as sqs from "aws-cdk-lib/aws-sqs";
import { Construct } from "constructs";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { BULK_WORKER_DEFAULTS } from "../defaults.ts";
import { alarmFactory } from "./alarms.ts";
import type { DatabaseAccess } from "./database.ts";
import { jobfenceEntry } from "./entries.ts";
import { JobfenceFunction } from "./jobfence-function.ts";
import { jobfenceMetric } from "./metrics.ts";
import { grantReplaySend } from "./replay-send.ts";

/** Props of {@link BulkOperationsWorker}. */
export interface BulkOperationsWorkerProps {
  readonly database: DatabaseAccess;
  /** The consumers' source queues: the only queues a bulk replay may send to (the API's). */
  readonly consumerQueues: readonly sqs.IQueue[];
  /** Where the alarms notify. @default none (the alarms are still created) */
  readonly alarmActions?: readonly cloudwatch.IAlarmAction[];
}

/** The worker function, its schedule and alarms. */
export class BulkOperationsWorker extends Construct {
  readonly workerFunction: JobfenceFunction;
  /** `rate(1 minute)`. */
  readonly schedule: events.Rule;
  readonly alarms: { readonly errors: cloudwatch.Alarm; readonly chunkFailures: cloudwatch.Alarm };

  constructor(scope: Construct, id: string, props: BulkOperationsWorkerProps) {
    super(scope, id);
    if (props.consumerQueues.length === 0) {
      throw new ConfigurationError("BulkOperationsWorker", [
        "consumerQueues must name at least one queue (bulk replays send only to these)",
      ]);
    }

    this.workerFunction = new JobfenceFunction(this, "Worker", {
      entry: jobfenceEntry("bulk-operations"),
      description: "jobfence bulk-operations worker (bulk replays and discards, in chunks)",
      timeout: BULK_WORKER_DEFAULTS.timeout,
      database: props.database,
      login: "ops",
    });
    grantReplaySend(this.workerFunction.function, props.consumerQueues);
    // A failed run is not retried: the next one starts within a minute and finds the same work (a
    // chunk's transaction rolled back), so a retry would only add an overlapping run.
    this.workerFunction.function.configureAsyncInvoke({
      retryAttempts: 0,
      maxEventAge: BULK_WORKER_DEFAULTS.rate,
    });
    this.schedule = new events.Rule(this, "Schedule", {
      description: "jobfence bulk-operations worker, every minute",
      schedule: events.Schedule.rate(BULK_WORKER_DEFAULTS.rate),
      targets: [
        new targets.LambdaFunction(this.workerFunction.function, {
          retryAttempts: 0,
          maxEventAge: BULK_WORKER_DEFAULTS.rate,
        }),
      ],
    });

    const alarm = alarmFactory(this, { actions: props.alarmActions });
    const period = BULK_WORKER_DEFAULTS.alarmPeriod;
    this.alarms = {
      errors: alarm(
        "ErrorsAlarm",
        this.workerFunction.function.metricErrors({ period, statistic: "Sum" }),
        0,
        "jobfence bulk-operations worker failed a run (configuration, database): running bulk replays and discards are not advancing",
      ),
      chunkFailures: alarm(
        "ChunkFailuresAlarm",
        jobfenceMetric(BULK_WORKER_DEFAULTS.metricsService, BULK_WORKER_DEFAULTS.chunkFailuresMetric, {
          period,
          statistic: "Sum",
        }),
        0,
        "jobfence bulk-operations chunks failed (rolled back, retried; an operation fails after 10 in a row): see the worker's log and the operation's last_error",
      ),
    };
  }
}
