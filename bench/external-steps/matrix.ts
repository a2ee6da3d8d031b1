/**
 * The external-steps crash matrix, measured: for each variant and point, trials in which a real
 * child process (./crash-child.ts) runs one invocation of a batch of fresh jobs and SIGKILLs itself
 * at the point for the nth job; each trial has its own fake provider (in this process, so it
 * outlives the child), whose ledger and request log are the trial's alone. Then the batch is
 * redelivered to a fresh container in this process until every record is acked, at most
 * `redeliveries` times (bench/lib/crash-trials.ts), and the provider's effects and calls are
 * counted per job (./attribution.ts): 1 effect = charged once, 0 = lost, 2+ = doubled. The
 * database's effect (award-points' ledger rows) is counted too: the fence keeps it exactly once in
 * every variant, which the matrix checks rather than assumes.
 */
import { fileURLToPath } from "node:url";
import type { SQSRecord } from "aws-lambda";
import pg from "pg";
import { lambdaContext } from "../../local/lambda-context.ts";
import { createPool } from "../../shared/db/pool.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import {
  classifyEffects,
  type EffectCount,
  killedRecord,
  oneAtATime,
  redeliverUntilAcked,
  runCrashChild,
  runTrials,
} from "../lib/crash-trials.ts";
import { batchesOf, makeJobs } from "../lib/harness-driver.ts";
import { countEffects } from "../powertools/effects.ts";
import { dynamoClient } from "../powertools/stores.ts";
import { effectsOf, tallyByJob } from "./attribution.ts";
import { externalContainer } from "./consumers.ts";
import { jobKeys } from "./keys.ts";
import { startFakeProvider } from "./provider.ts";
import {
  type DynamoAddress,
  type ExternalChildConfig,
  POINTS,
  type Point,
  VARIANTS,
  type VariantKey,
} from "./systems.ts";

/** One trial's outcome. */
export interface TrialResult {
  readonly variant: VariantKey;
  readonly point: Point;
  /** The job killed at (1-based in the batch). */
  readonly nth: number;
  /** The provider's effects per job, classified. */
  readonly provider: EffectCount;
  /** Effects and calls of all the trial's jobs, and calls no job could be told for. */
  readonly effects: number;
  readonly calls: number;
  readonly unattributed: number;
  /** The killed job's effects and calls. */
  readonly killedEffects: number;
  readonly killedCalls: number;
  /** The database's effect per job, classified. */
  readonly database: EffectCount;
  readonly neverAcked: number;
  /** ms from the invocation's start to the kill. */
  readonly killedAfterMs: number;
}

export interface ExternalMatrixOptions {
  readonly databaseUrl: string;
  readonly dynamodb: DynamoAddress;
  readonly keyPrefix: string;
  readonly variants: readonly VariantKey[];
  readonly trials: number;
  /** Records per SQS batch (per trial). */
  readonly batch: number;
  readonly timeoutMs: number;
  readonly parallel: number;
  readonly redeliveries: number;
  readonly log: (line: string) => void;
}

const CHILD = fileURLToPath(new URL("./crash-child.ts", import.meta.url));

interface Trial {
  readonly variant: VariantKey;
  readonly point: Point;
  readonly nth: number;
}

export async function runExternalMatrix(o: ExternalMatrixOptions): Promise<TrialResult[]> {
  const trials: Trial[] = o.variants.flatMap((variant) =>
    POINTS.flatMap((point) =>
      Array.from({ length: o.trials }, (_, t) => ({
        variant,
        point,
        nth: killedRecord(t, o.trials, o.batch),
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
  const dynamo = dynamoClient(o.dynamodb.endpoint, { requests: 0 });
  const turn = oneAtATime();
  const results: TrialResult[] = [];

  const runTrial = async (trial: Trial, index: number) => {
    const provider = await startFakeProvider();
    try {
      // Users of this trial only: parallel trials do not queue on each other's balance rows.
      const jobs = makeJobs(o.batch).map((job, i) => ({ ...job, userId: `steps-${index}-${i}` }));
      const jobIds = jobs.map((j) => j.jobId);
      const records = batchesOf(jobs, o.batch)[0] as SQSRecord[];
      const killJobId = jobIds[trial.nth - 1] as string;
      const config: ExternalChildConfig = {
        ...trial,
        killJobId,
        records,
        databaseUrl: o.databaseUrl,
        providerUrl: provider.url,
        dynamodb: o.dynamodb,
        keyPrefix: o.keyPrefix,
        timeoutMs: o.timeoutMs,
      };
      const mark = await runCrashChild(
        CHILD,
        config,
        `${VARIANTS[trial.variant]}, ${trial.point}, job ${trial.nth}`,
        turn,
      );
      // A kill after the function timeout is a timeout, not a crash (and Powertools' in-progress
      // record would already have expired): the trial would measure neither.
      if (mark.killedAt - mark.invokedAt >= o.timeoutMs) {
        throw new Error(
          `crash child (${VARIANTS[trial.variant]}, ${trial.point}) reached its point ${mark.killedAt - mark.invokedAt} ms into a ${o.timeoutMs} ms invocation: raise --timeout-ms or lower --parallel`,
        );
      }
      const container = externalContainer(trial.variant, {
        pool,
        databaseUrl: o.databaseUrl,
        providerUrl: provider.url,
        dynamodb: { client: dynamo, tableName: o.dynamodb.tableName },
        keyPrefix: o.keyPrefix,
        functionTimeoutSeconds: o.timeoutMs / 1000,
      });
      const pending = await redeliverUntilAcked(
        records,
        async (redelivered) => {
          const response = await container.invoke(redelivered, lambdaContext("award-points", o.timeoutMs));
          return new Set(response.batchItemFailures.map((f) => f.itemIdentifier));
        },
        { mark, timeoutMs: o.timeoutMs, redeliveries: o.redeliveries },
      );
      const keys = jobKeys(jobIds);
      const tally = tallyByJob(jobIds, provider.ledger(), provider.requests(), (key) => keys.get(key));
      const killed = tally.byJob.get(killJobId) ?? { effects: 0, calls: 0 };
      const all = [...tally.byJob.values()];
      results.push({
        ...trial,
        provider: classifyEffects(jobIds, effectsOf(tally)),
        effects: all.reduce((n, t) => n + t.effects, 0),
        calls: all.reduce((n, t) => n + t.calls, 0),
        unattributed: tally.unattributed,
        killedEffects: killed.effects,
        killedCalls: killed.calls,
        database: await countEffects(admin, jobIds),
        neverAcked: pending.length,
        killedAfterMs: mark.killedAt - mark.invokedAt,
      });
    } finally {
      await provider.close();
    }
  };

  try {
    await runTrials(trials, o.parallel, runTrial);
  } finally {
    dynamo.destroy();
    await admin.end();
    await pool.end();
  }
  const slowest = Math.max(...results.map((r) => r.killedAfterMs));
  o.log(`${trials.length} crash trials; the slowest reached its point ${slowest} ms into its invocation`);
  return results;
}
