/**
 * The crash matrix of both systems, measured: for each point and system, trials in which a real
 * child process (bench/powertools/crash-child.ts, spawned with `process.execPath`) runs one
 * invocation of a batch of fresh jobs and SIGKILLs itself at the point, for the nth record; then
 * the same SQS records are redelivered (the same message ids and bodies, the receive count one
 * higher) to a fresh container in this process, after the function timeout plus a margin has
 * passed since the invocation began (SQS's visibility timeout is longer than the function timeout,
 * and Powertools' in-progress record expires with the invocation's remaining time), and again,
 * after the same wait, for every record reported failed, up to a bound. Then each job's ledger rows
 * are counted: 1 = applied once, 0 = lost, 2+ = doubled; a record still failing at the bound is
 * "never acked" (real SQS would move it to the dead-letter queue at its maxReceiveCount). Trials
 * run `parallel` at a time (mostly waiting), but the children invoke one at a time: a child reaching
 * its point after its function timeout would be a timeout, not a crash, and the trial fails.
 * Every system waits the same before its redelivery; jobfence does not need to (it keeps no lease
 * that has to expire), and its invocations get the harness's default 30 s function timeout.
 *
 * Points, the same for both systems:
 * - P1, before the effect commits: jobfence `fence:after-work` (the work ran, COMMIT not sent);
 *   Powertools inside the record handler after the effect's statement, before COMMIT (the
 *   in-progress record saved);
 * - P2, after the effect commits, before the store records completion: jobfence's fence is in the
 *   effect's transaction, so this is `fence:after-commit`; Powertools after COMMIT returned, at the
 *   end of the wrapped function, before makeIdempotent saves the completed record;
 * - P3, after both, before the ack: the handler returned its batch response, which never reaches
 *   Lambda.
 * In jobfence's batch mode the batch is one transaction, so P1 and P2 are its one commit (nth 1).
 */
import { fileURLToPath } from "node:url";
import { FullBatchFailureError } from "@aws-lambda-powertools/batch";
import type { SQSBatchResponse, SQSRecord } from "aws-lambda";
import pg from "pg";
import { lambdaContext } from "../../local/lambda-context.ts";
import { createPool } from "../../shared/db/pool.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import {
  killedRecord,
  oneAtATime,
  redeliverUntilAcked,
  runCrashChild,
  runTrials,
} from "../lib/crash-trials.ts";
import { batchesOf, benchConsumer, makeJobs } from "../lib/harness-driver.ts";
import { countEffects } from "./effects.ts";
import { type PersistenceClient, powertoolsContainer } from "./powertools-variant.ts";
import { dynamoClient, redisCacheClient, type StoreAddress } from "./stores.ts";
import {
  BATCH_SIZE,
  type CrashChildConfig,
  LABELS,
  POINTS,
  type Point,
  type SystemLabel,
} from "./systems.ts";

/** One system's row at one point. */
export interface CrashRow {
  readonly system: SystemLabel;
  readonly point: Point;
  readonly trials: number;
  readonly jobs: number;
  readonly once: number;
  readonly doubled: number;
  readonly lost: number;
  readonly neverAcked: number;
  /** The records killed at, one per trial ("–" at P3). */
  readonly killedRecords: string;
}

export interface CrashMatrixOptions {
  readonly databaseUrl: string;
  readonly dynamodb: Extract<StoreAddress, { kind: "dynamodb" }>;
  readonly redis?: Extract<StoreAddress, { kind: "redis" }>;
  readonly keyPrefix: string;
  readonly trials: number;
  readonly timeoutMs: number;
  /** Trials run at once (each waits out the timeout, mostly idle). */
  readonly parallel: number;
  /** Deliveries after the crash before a record still failing is counted as never acked. */
  readonly redeliveries: number;
  readonly log: (line: string) => void;
}

interface Trial {
  readonly system: SystemLabel;
  readonly point: Point;
  readonly nth: number;
}

export async function runCrashMatrix(o: CrashMatrixOptions): Promise<CrashRow[]> {
  const systems: SystemLabel[] = [LABELS.perRecord, LABELS.batch, LABELS.dynamodb];
  if (o.redis) systems.push(LABELS.redis);
  const trials: Trial[] = systems.flatMap((system) =>
    POINTS.flatMap((point) =>
      Array.from({ length: o.trials }, (_, t) => ({
        system,
        point,
        nth: point === "P3" || system === LABELS.batch ? 1 : killedRecord(t, o.trials, BATCH_SIZE),
      })),
    ),
  );
  const pool = createPool({
    connectionString: o.databaseUrl,
    role: consumerRoleName("award-points"),
    max: o.parallel,
  });
  const admin = new pg.Client({ connectionString: o.databaseUrl });
  await admin.connect();
  // The redeliveries' requests are not what this matrix measures.
  const uncounted = { requests: 0 };
  const dynamo = dynamoClient(o.dynamodb.endpoint, uncounted);
  const redis = o.redis ? await redisCacheClient(o.redis.url, uncounted) : undefined;
  const handlers = {
    [LABELS.perRecord]: benchConsumer(pool, "per-record", o.databaseUrl),
    [LABELS.batch]: benchConsumer(pool, "batch", o.databaseUrl),
  };
  /** The system as a fresh container in this process (the killed one is gone). */
  const container = (system: SystemLabel): ((records: SQSRecord[]) => Promise<SQSBatchResponse>) => {
    if (system === LABELS.perRecord || system === LABELS.batch) {
      const handler = handlers[system];
      return (records) => handler({ Records: records }, lambdaContext(handler.consumer));
    }
    const store: PersistenceClient =
      system === LABELS.dynamodb
        ? { kind: "dynamodb", client: dynamo, tableName: o.dynamodb.tableName }
        : { kind: "redis", client: (redis ?? unreachable()).client };
    const c = powertoolsContainer({ pool, store, keyPrefix: o.keyPrefix });
    return (records) => c.invoke(records, lambdaContext("award-points", o.timeoutMs));
  };

  let slowest = 0;
  const turn = oneAtATime();
  const results: Array<Trial & { once: number; doubled: number; lost: number; neverAcked: number }> = [];
  const runTrial = async (trial: Trial, index: number) => {
    // Users of this trial only: parallel trials do not queue on each other's balance rows.
    const jobs = makeJobs(BATCH_SIZE).map((job, i) => ({ ...job, userId: `crash-${index}-${i}` }));
    const records = batchesOf(jobs, BATCH_SIZE)[0] as SQSRecord[];
    const config: CrashChildConfig = {
      ...trial,
      records,
      databaseUrl: o.databaseUrl,
      ...(trial.system === LABELS.dynamodb ? { store: o.dynamodb } : {}),
      ...(trial.system === LABELS.redis && o.redis ? { store: o.redis } : {}),
      keyPrefix: o.keyPrefix,
      timeoutMs: o.timeoutMs,
    };
    const mark = await runCrashChild(
      CHILD,
      config,
      `${trial.system}, ${trial.point}, record ${trial.nth}`,
      turn,
    );
    // A kill after the function timeout is not a crash but a timeout, and Powertools gives a record
    // started with no time left no in-progress expiry at all: the trial would measure neither.
    if (mark.killedAt - mark.invokedAt >= o.timeoutMs) {
      throw new Error(
        `crash child (${trial.system}, ${trial.point}) reached its point ${mark.killedAt - mark.invokedAt} ms into a ${o.timeoutMs} ms invocation: raise --crash-timeout-ms or lower --crash-parallel`,
      );
    }
    slowest = Math.max(slowest, mark.killedAt - mark.invokedAt);
    const invoke = container(trial.system);
    const pending = await redeliverUntilAcked(
      records,
      (redelivered) =>
        invoke(redelivered).then(
          (response) => new Set(response.batchItemFailures.map((f) => f.itemIdentifier)),
          (error: unknown) => {
            // The batch utility throws when every record failed: Lambda then returns them all.
            if (error instanceof FullBatchFailureError) return new Set(redelivered.map((r) => r.messageId));
            throw error;
          },
        ),
      { mark, timeoutMs: o.timeoutMs, redeliveries: o.redeliveries },
    );
    const effects = await countEffects(
      admin,
      jobs.map((j) => j.jobId),
    );
    results.push({ ...trial, ...effects, neverAcked: pending.length });
  };

  try {
    await runTrials(trials, o.parallel, runTrial);
  } finally {
    redis?.close();
    dynamo.destroy();
    await admin.end();
    await pool.end();
  }
  o.log(`${trials.length} crash trials; the slowest reached its point ${slowest} ms into its invocation`);
  return systems.flatMap((system) =>
    POINTS.map((point) => {
      const of = results.filter((r) => r.system === system && r.point === point);
      const sum = (key: "once" | "doubled" | "lost" | "neverAcked") => of.reduce((n, r) => n + r[key], 0);
      return {
        system,
        point,
        trials: of.length,
        jobs: of.length * BATCH_SIZE,
        once: sum("once"),
        doubled: sum("doubled"),
        lost: sum("lost"),
        neverAcked: sum("neverAcked"),
        killedRecords:
          point === "P3"
            ? "–"
            : of
                .map((r) => r.nth)
                .sort((a, b) => a - b)
                .join(","),
      };
    }),
  );
}

const CHILD = fileURLToPath(new URL("./crash-child.ts", import.meta.url));

function unreachable(): never {
  throw new Error("the Redis trials run only when Redis answers");
}
