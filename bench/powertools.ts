/**
 * `node bench/powertools.ts`: jobfence against what a platform team uses today to make an SQS
 * consumer on Lambda idempotent, Powertools for AWS Lambda (the batch utility + makeIdempotent with
 * payload validation, bench/powertools/powertools-variant.ts), measured side by side on the same
 * PostgreSQL, the same effect (functions/award-points' awardPoints), the same SQS events and the
 * same concurrency. Two questions: what each costs per job, and what each does when the container
 * dies mid-invocation.
 *
 * Variants: (a) jobfence per-record, (b) jobfence batch 10 (the award-points consumer through the
 * harness, bench/lib/harness-driver.ts benchConsumer), (c) Powertools with its DynamoDB store on
 * dynalite, an in-memory DynamoDB emulator in a child process (bench/powertools/stores.ts), (d)
 * Powertools with its Redis cache store, when a Redis answers at REDIS_URL or 127.0.0.1:6379
 * (otherwise skipped, and the reason printed). Every variant: the effect on a pool of award-points'
 * role (max = concurrency), SQS batches of 10 built as harness-driver builds them, `--concurrency`
 * invocations at once (each worker one Lambda container: Powertools' containers have their own
 * processor, config, persistence layer and store client), a 30 s function timeout, records of an
 * invocation one after another (why: powertools-variant.ts); a warm-up round, then `--reps` rounds
 * on fresh jobs, the variants' order rotated round to round (bench/powertools/throughput.ts).
 *
 * Networks: loopback; through bench/lib/latency-proxy.ts adding `--rtt` ms per round trip to
 * PostgreSQL and to the store alike (one proxy per upstream: PostgreSQL, dynalite's HTTP port,
 * Redis); and the same with `--commit-ms` held on every PostgreSQL COMMIT (a quorum commit).
 * Reported per variant and network: effects/s (median and range over rounds, and the ratio to
 * Powertools + DynamoDB in the same round), round trips per job to each service (PostgreSQL: query
 * calls on the pool's clients, bench/lib/counting-pool.ts; DynamoDB: HTTP requests counted by an
 * SDK middleware; Redis: commands counted by wrapping the client), handler wall time per record
 * (invocation wall time ÷ records: what Lambda bills), and CPU per job of this process and of the
 * store's server (client, PostgreSQL and store share this machine's cores). After each run every
 * job's ledger rows are counted: anything but exactly one per job fails the benchmark.
 *
 * The crash matrix (bench/powertools/crash-matrix.ts): a real child process per trial dies by
 * SIGKILL at P1 (before the effect commits), P2 (after it commits, before the store records
 * completion) or P3 (after both, before the ack), for the nth record of a batch of 10; the batch is
 * redelivered until acked (bounded); effects counted per job. Measured on loopback.
 *
 * Targets: at +RTT, jobfence per-record ≥ 1.5× and batch 10 ≥ 3.5× the effects/s of Powertools +
 * DynamoDB; in the crash matrix, jobfence doubles 0 and loses 0 at every point.
 */
import { randomBytes } from "node:crypto";
import { z } from "zod";
import { defineBenchmark, type Target } from "./lib/define.ts";
import { ratio } from "./lib/report.ts";
import { type CrashRow, runCrashMatrix } from "./powertools/crash-matrix.ts";
import { NETWORK_KINDS, rttNetworkName, startNetworks } from "./powertools/networks.ts";
import {
  IDEMPOTENCY_TABLE,
  REDIS_URL,
  redisAbsence,
  redisObserver,
  startDynalite,
} from "./powertools/stores.ts";
import {
  type Figures,
  perJob,
  printCrashMatrix,
  printThroughput,
  type Samples,
  summarize,
} from "./powertools/summary.ts";
import { LABELS } from "./powertools/systems.ts";
import { measureNetwork } from "./powertools/throughput.ts";

/** "label client µs (+ store µs)", or nothing when the variant did not run. */
function cpuOf(label: string, figures: Figures | undefined): string | undefined {
  if (!figures) return undefined;
  const store = figures.storeCpuUs.median;
  return `${label} ${Math.round(figures.clientCpuUs.median)}${Number.isNaN(store) ? "" : ` + ${Math.round(store)}`}`;
}

const options = z.object({
  jobs: z.coerce.number().int().positive().default(1000).describe("jobs per variant per round"),
  reps: z.coerce.number().int().positive().default(5).describe("measured rounds after a warm-up round"),
  concurrency: z.coerce
    .number()
    .int()
    .positive()
    .default(8)
    .describe("concurrent invocations (and pool size)"),
  rtt: z.coerce.number().positive().default(0.5).describe("round-trip time the latency proxies add, ms"),
  commitMs: z.coerce
    .number()
    .positive()
    .default(2)
    .describe("time held on every COMMIT on the commit network, ms"),
  networks: z
    .array(z.enum(NETWORK_KINDS))
    .min(1)
    .default([...NETWORK_KINDS])
    .describe("networks to run: loopback, rtt (+rtt to every service), commit (+rtt and slow COMMIT)"),
  crashTrials: z.coerce.number().int().positive().default(5).describe("crash trials per point per system"),
  crashTimeoutMs: z.coerce
    .number()
    .int()
    .min(500)
    .default(3000)
    .describe("Lambda function timeout in the crash matrix (Powertools' in-progress expiry), ms"),
  crashParallel: z.coerce.number().int().positive().default(6).describe("crash trials run at once"),
  crashRedeliveries: z.coerce
    .number()
    .int()
    .positive()
    .default(3)
    .describe("deliveries after a crash before a record still failing counts as never acked"),
});

await defineBenchmark({
  name: "powertools",
  title: "jobfence vs Powertools idempotency (DynamoDB, Redis): throughput, round trips, billed ms, crashes",
  method:
    "same PostgreSQL, effect, SQS batches of 10 and concurrency; variants alternated round by round, warm-up + reps; Powertools = batch utility (records in sequence) + makeIdempotent keyed on the job id with payload validation; stores behind their own latency proxies; exactly-once checked per job after each run; crash matrix: SIGKILLed child processes at P1/P2/P3, redelivery until acked (bounded), ledger rows per job",
  options,
  quick: { jobs: 200, reps: 1, networks: ["rtt"], crashTrials: 1, crashParallel: 12, crashRedeliveries: 1 },
  database: "durable",
  async setup({ database, options: o, cleanups }) {
    const dynalite = await startDynalite();
    cleanups.push(() => dynalite.stop());
    const keyPrefix = `jobfence-bench-${randomBytes(4).toString("hex")}`;
    const redisSkipped = await redisAbsence(REDIS_URL);
    const redis = redisSkipped ? undefined : await redisObserver(REDIS_URL);
    if (redis) {
      cleanups.push(async () => {
        console.log(`deleted ${await redis.deleteKeys(keyPrefix)} Redis keys of this run`);
        redis.close();
      });
    } else console.log(`Powertools + Redis skipped: ${redisSkipped}`);
    const networks = await startNetworks(
      o.networks,
      {
        databaseUrl: database.url,
        dynamoEndpoint: dynalite.endpoint,
        ...(redis ? { redisUrl: REDIS_URL } : {}),
      },
      { rttMs: o.rtt, commitMs: o.commitMs },
      cleanups,
    );
    return { dynalite, redis, redisSkipped, keyPrefix, networks };
  },
  async run({ options: o, database, table }, { networks, dynalite, redis, redisSkipped, keyPrefix }) {
    const samples: Samples = {};
    for (const network of networks) {
      console.log(
        `\n${network.name}: ${o.jobs} jobs per variant per round, ${o.reps} rounds, concurrency ${o.concurrency}`,
      );
      samples[network.name] = await measureNetwork(network, {
        databaseUrl: database.url,
        concurrency: o.concurrency,
        jobs: o.jobs,
        reps: o.reps,
        keyPrefix,
        dynaliteCpuMs: () => dynalite.cpuMs(),
        ...(redis ? { redisCpuMs: () => redis.cpuMs() } : {}),
        log: (line) => console.log(`  ${line}`),
      });
    }
    const summary = summarize(samples);
    printThroughput(table, samples, summary);

    console.log(
      `\ncrash matrix: ${o.crashTrials} trial(s) per point per system, function timeout ${o.crashTimeoutMs} ms`,
    );
    const crash = await runCrashMatrix({
      databaseUrl: database.url,
      dynamodb: { kind: "dynamodb", endpoint: dynalite.endpoint, tableName: IDEMPOTENCY_TABLE },
      ...(redis ? { redis: { kind: "redis", url: REDIS_URL } } : {}),
      keyPrefix,
      trials: o.crashTrials,
      timeoutMs: o.crashTimeoutMs,
      parallel: o.crashParallel,
      redeliveries: o.crashRedeliveries,
      log: (line) => console.log(`  ${line}`),
    });
    printCrashMatrix(table, crash, o.crashRedeliveries);
    return { summary, samples, crash, redisSkipped };
  },
  verdict({ summary, crash, redisSkipped }, { options: o }) {
    const at = summary[rttNetworkName(o.rtt)];
    const cause = at
      ? `per job at +${o.rtt} ms RTT: ${Object.values(LABELS)
          .filter((label) => label !== LABELS.redis)
          .map((label) => `${label} ${perJob(at[label])}`)
          .join("; ")}`
      : `the +${o.rtt} ms RTT network was not run (--networks)`;
    const ratioTarget = (label: string, target: number): Target => ({
      name: `${label} ÷ Powertools + DynamoDB, effects/s, +${o.rtt} ms RTT`,
      measured: at?.[label]?.vsDynamo.median ?? Number.NaN,
      bound: "at least",
      target,
      format: ratio,
      cause,
    });
    const of = (...systems: string[]) => crash.filter((r) => systems.includes(r.system));
    const jobfence = of(LABELS.perRecord, LABELS.batch);
    const powertools = of(LABELS.dynamodb, LABELS.redis);
    const where = (rows: CrashRow[], key: "doubled" | "lost" | "neverAcked") =>
      rows
        .filter((r) => r[key] > 0)
        .map((r) => `${r.system} ${r.point}: ${r[key]} of ${r.jobs}`)
        .join("; ");
    const crashTarget = (key: "doubled" | "lost"): Target => ({
      name: `jobfence jobs ${key}, worst crash point (both modes)`,
      measured: Math.max(...jobfence.map((r) => r[key])),
      bound: "at most",
      target: 0,
      format: String,
      cause: where(jobfence, key),
    });
    return {
      targets: [
        ratioTarget(LABELS.perRecord, 1.5),
        ratioTarget(LABELS.batch, 3.5),
        crashTarget("doubled"),
        crashTarget("lost"),
      ],
      notes: [
        ...(at
          ? [
              `× ${LABELS.redis} at +${o.rtt} ms RTT (the same two store round trips per job, from a server whose own CPU per job is small): ${LABELS.perRecord} ${ratio(at[LABELS.perRecord]?.vsRedis.median ?? Number.NaN)}, ${LABELS.batch} ${ratio(at[LABELS.batch]?.vsRedis.median ?? Number.NaN)}`,
              `CPU per job at +${o.rtt} ms RTT, µs, client (+ store): ${Object.values(LABELS)
                .flatMap((label) => cpuOf(label, at[label]) ?? [])
                .join(
                  "; ",
                )}; the emulator runs on this machine's cores beside PostgreSQL, a real DynamoDB's CPU would not`,
            ]
          : []),
        `Powertools doubled: ${where(powertools, "doubled") || "none"}; lost: ${where(powertools, "lost") || "none"}`,
        `never acked within ${o.crashRedeliveries} redeliveries: ${where(crash, "neverAcked") || "none"}`,
        ...(redisSkipped ? [`Powertools + Redis skipped: ${redisSkipped}`] : []),
      ],
    };
  },
});
