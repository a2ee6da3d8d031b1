/**
 * `node bench/managed-instances.ts`: N concurrent invocations of one consumer in one process, as
 * Lambda Managed Instances run them (docs/scaling.md, "Lambda Managed Instances"): the managed
 * runtime's environment (`AWS_LAMBDA_MAX_CONCURRENCY` = N, one worker thread) and its
 * per-invocation store (local/invoke-store.ts), the real `createConsumer` building its own pool,
 * side by side in one run:
 *
 * - "fixed 2": the pool capped at 2 connections (`JOBFENCE_POOL_MAX` = 2), every invocation
 *   sharing it, as every consumer was before its pool was sized from the concurrency;
 * - "sized": the pool the consumer sizes from AWS_LAMBDA_MAX_CONCURRENCY (N connections).
 *
 * Each invocation carries `--records` award-points jobs, each holding its connection for
 * `--work-ms` in its fence transaction (pg_sleep, then the award), under a `--timeout-seconds`
 * function timeout; all N start at once. Reported per variant: the pool, time per invocation
 * (median and slowest), and records applied / left unstarted / interrupted (the harness's own
 * RecordUnstarted and RecordInterrupted metrics, counted as they are added), and jobs applied more
 * than once (the ledger, counted after the run). SQS and EventBridge are stand-ins that answer at
 * once (bench/lib/harness-driver.ts), so the figures are the pool's and the database's.
 *
 * Targets (sized pool): every record applied, none left unstarted or interrupted, the median
 * invocation within 2× its records' own work (records × work-ms); both variants: no job applied
 * twice.
 */
import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics } from "@aws-lambda-powertools/metrics";
import type { EventBridgeClient } from "@aws-sdk/client-eventbridge";
import type { SQSClient } from "@aws-sdk/client-sqs";
import type { SQSBatchResponse } from "aws-lambda";
import pg from "pg";
import { z } from "zod";
import { awardPoints } from "../functions/award-points/award.ts";
import { awardPointsConsumer } from "../functions/award-points/consumer.ts";
import { concurrentInvocations } from "../local/invoke-store.ts";
import { lambdaContext } from "../local/lambda-context.ts";
import { type ConsumerHandler, createConsumer } from "../shared/consumer.ts";
import { consumerRoleName } from "../shared/db/queries/provision-login.ts";
import { MANAGED_INSTANCE_ENV } from "../shared/invocation/concurrency.ts";
import { METRIC } from "../shared/metrics/names.ts";
import { defineBenchmark, type Target } from "./lib/define.ts";
import { answerAtOnce, makeJobs, recordOf } from "./lib/harness-driver.ts";
import { int, median, ratio, secs } from "./lib/report.ts";

const count = () => z.coerce.number().int().positive();
const options = z.object({
  invocations: count().default(64).describe("invocations at once in the one execution environment"),
  records: count().default(10).describe("records per invocation"),
  workMs: count()
    .default(300)
    .describe("ms each record's work holds its connection (pg_sleep in the transaction)"),
  timeoutSeconds: count().default(30).describe("the function timeout each invocation runs under"),
});

/** The sized pool's slowest median: twice the records' own work (the rest is the harness and the server). */
const TARGET_MEDIAN_OVER_WORK = 2;

/** Metrics that count what the harness adds, by name, besides keeping them as Powertools does. */
class CountingMetrics extends Metrics {
  readonly counts = new Map<string, number>();
  override addMetric(...args: Parameters<Metrics["addMetric"]>): this {
    const [name, , value] = args;
    this.counts.set(name, (this.counts.get(name) ?? 0) + value);
    return super.addMetric(...args);
  }
}

interface VariantFigures {
  readonly variant: string;
  readonly poolMax: number;
  readonly medianMs: number;
  readonly slowestMs: number;
  readonly records: number;
  readonly applied: number;
  readonly unstarted: number;
  readonly interrupted: number;
  /** Reported back for another reason (neither left unstarted nor interrupted). */
  readonly otherFailures: number;
  readonly doubles: number;
}

// The harness's metrics are counted in-process; printing each invocation's EMF would time the terminal.
process.env.POWERTOOLS_METRICS_DISABLED ??= "true";

await defineBenchmark({
  name: "managed-instances",
  title:
    "N concurrent invocations in one process (Lambda Managed Instances): a fixed 2-connection pool vs the sized pool",
  method:
    "AWS_LAMBDA_MAX_CONCURRENCY = invocations, AWS_LAMBDA_NODEJS_WORKER_COUNT = 1, a per-invocation invoke store; per variant the real createConsumer (award-points' role) builds its pool (fixed: poolMax 2; sized: from the environment), then N invocations of `records` fresh jobs start at once, each job's work pg_sleep(work-ms) then the award in its fence transaction, under a timeout-seconds function timeout; time per invocation by performance.now(); applied = ledger rows, unstarted/interrupted = the harness's RecordUnstarted/RecordInterrupted metrics; doubles = jobs with more than one ledger row",
  options,
  quick: { invocations: 16, records: 5, workMs: 100, timeoutSeconds: 10 },
  database: "fast",
  settings: ["max_connections"],
  async setup({ options: o, database, cleanups }) {
    const invocations = concurrentInvocations(o.invocations);
    cleanups.push(async () => invocations.release());
    process.env[MANAGED_INSTANCE_ENV.maxConcurrency] = String(o.invocations);
    process.env[MANAGED_INSTANCE_ENV.workerCount] = "1";
    const admin = new pg.Pool({ connectionString: database.url, max: 1 });
    // pg's end() resolves before its connection has closed; the database stopping right after ends
    // it from the server's side, which an idle connection reports as an error: not news here.
    admin.on("error", () => {});
    cleanups.push(() => admin.end());
    return { invocations, admin };
  },
  async run({ options: o, database, cleanups, table }, { invocations, admin }) {
    const figures: VariantFigures[] = [];
    for (const [variant, poolMax] of [
      ["fixed 2", 2],
      ["sized", undefined],
    ] as const) {
      const metrics = new CountingMetrics({ namespace: "jobfence-bench", serviceName: "bench" });
      const handler = consumer(database.url, o.workMs, o.timeoutSeconds, metrics, poolMax);
      cleanups.push(() => handler.pool.end());
      const jobs = makeJobs(o.invocations * o.records);
      const batches = Array.from({ length: o.invocations }, (_, i) =>
        jobs.slice(i * o.records, (i + 1) * o.records).map((job) => recordOf(job)),
      );
      const runs = await Promise.all(
        batches.map(async (records) => {
          const context = lambdaContext("award-points", o.timeoutSeconds * 1000);
          const started = performance.now();
          const response: SQSBatchResponse = await invocations.run(context, () =>
            handler({ Records: records }, context),
          );
          return { ms: performance.now() - started, failed: response.batchItemFailures.length };
        }),
      );
      const { rows } = await admin.query<{ applied: number; doubles: number }>(
        `SELECT count(*)::int AS applied, count(*) FILTER (WHERE n > 1)::int AS doubles
           FROM (SELECT count(*) AS n FROM award_points.ledger WHERE job_id = ANY($1) GROUP BY job_id) j`,
        [jobs.map((j) => j.jobId)],
      );
      const unstarted = metrics.counts.get(METRIC.recordUnstarted) ?? 0;
      const interrupted = metrics.counts.get(METRIC.recordInterrupted) ?? 0;
      const failed = runs.reduce((sum, r) => sum + r.failed, 0);
      figures.push({
        variant,
        poolMax: handler.pool.options.max ?? Number.NaN,
        medianMs: median(runs.map((r) => r.ms)),
        slowestMs: Math.max(...runs.map((r) => r.ms)),
        records: jobs.length,
        applied: rows[0]?.applied ?? 0,
        unstarted,
        interrupted,
        otherFailures: Math.max(0, failed - unstarted - interrupted),
        doubles: rows[0]?.doubles ?? 0,
      });
    }
    table(
      `${o.invocations} invocations × ${o.records} records, ${o.workMs} ms of work each, ${o.timeoutSeconds} s timeout`,
      [
        "pool",
        "connections",
        "per invocation (median)",
        "slowest",
        "applied",
        "unstarted",
        "interrupted",
        "other failures",
        "doubles",
      ],
      figures.map((f) => [
        f.variant,
        String(f.poolMax),
        secs(f.medianMs),
        secs(f.slowestMs),
        `${int(f.applied)} of ${int(f.records)}`,
        int(f.unstarted),
        int(f.interrupted),
        int(f.otherFailures),
        int(f.doubles),
      ]),
    );
    return { figures, ownWorkMs: o.records * o.workMs };
  },
  verdict({ figures, ownWorkMs }) {
    const sized = figures.find((f) => f.variant === "sized");
    const fixed = figures.find((f) => f.variant === "fixed 2");
    const targets: Target[] = [
      {
        name: "sized pool: records not applied (unstarted, interrupted or failed)",
        measured: sized ? sized.records - sized.applied : Number.NaN,
        bound: "at most",
        target: 0,
        format: int,
      },
      {
        name: `sized pool: median invocation ÷ its records' own work (${secs(ownWorkMs)})`,
        measured: sized ? sized.medianMs / ownWorkMs : Number.NaN,
        bound: "at most",
        target: TARGET_MEDIAN_OVER_WORK,
        format: ratio,
      },
      {
        name: "jobs applied more than once, both pools",
        measured: figures.reduce((sum, f) => sum + f.doubles, 0),
        bound: "at most",
        target: 0,
        format: int,
      },
    ];
    const notes = fixed
      ? [
          `fixed 2-connection pool: median invocation ${secs(fixed.medianMs)} (${ratio(fixed.medianMs / ownWorkMs)} its own work), ` +
            `${int(fixed.applied)} of ${int(fixed.records)} applied, ${int(fixed.unstarted)} unstarted, ${int(fixed.interrupted)} interrupted`,
        ]
      : [];
    return { targets, notes };
  },
});

/** The award-points consumer as deployed on Managed Instances, its pool built by the factory. */
function consumer(
  databaseUrl: string,
  workMs: number,
  timeoutSeconds: number,
  metrics: Metrics,
  poolMax: number | undefined,
): ConsumerHandler {
  return createConsumer(
    {
      name: awardPointsConsumer.name,
      payload: awardPointsConsumer.payload,
      work: async (job, tx) => {
        await tx.query("SELECT pg_sleep($1)", [workMs / 1000]);
        await awardPoints(tx, {
          jobId: job.jobId,
          tenantId: job.tenantId,
          userId: job.payload.user_id,
          points: job.payload.points,
        });
      },
    },
    {
      config: {
        databaseUrl,
        dbRole: consumerRoleName(awardPointsConsumer.name),
        opsBusName: "jobfence-ops-bench",
        functionTimeoutSeconds: timeoutSeconds,
        ...(poolMax === undefined ? {} : { poolMax }),
      },
      sqs: answerAtOnce as unknown as SQSClient,
      eventBridge: answerAtOnce as unknown as EventBridgeClient,
      metrics,
      logger: new Logger({ serviceName: "bench", logLevel: "SILENT" }),
    },
  );
}
