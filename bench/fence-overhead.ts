/**
 * `node bench/fence-overhead.ts`: what the fence costs. The reference consumer's effect (one
 * ledger row + the user's balance, functions/award-points) through the harness in per-record mode,
 * against the identical effect in a bare transaction with no fence (BEGIN; effect; COMMIT), on the
 * same pool (same connections, logged in as award-points's role) and the same concurrency, alternated
 * in one run. Target: harness ≥ 0.90 × bare.
 *
 * The harness is invoked in process with SQS batches of 10 records, as Lambda delivers them; no
 * queue is involved (nothing fails, so it makes no SQS call). Each round applies fresh jobs (new
 * 36-character ids) over 1,000 balances; a warm-up round, then `--reps` measured rounds.
 *
 * Where a miss comes from, measured in the same run (`anatomy`): the same jobs, 8 connections, no
 * harness (so no JavaScript of ours), each variant one transaction per job, alternated:
 *
 * - `bare`: BEGIN; effect; COMMIT;
 * - `fence as shipped`: BEGIN + INSERT … ON CONFLICT DO NOTHING RETURNING (one message); effect; COMMIT;
 * - `fence, plain INSERT`: the same with a plain INSERT (a duplicate would be a unique violation),
 *   i.e. without the speculative insertion ON CONFLICT costs;
 * - `fence, no expires_at index`: as shipped, into a copy of the table without its expires_at
 *   index (what cleanup's index costs each insert);
 * - `fence as its own statement`: BEGIN; INSERT (bound parameters); effect; COMMIT: one more round trip.
 *
 * The comparison runs twice: on loopback, and through a latency proxy adding `--rtt` ms (default
 * 0.5) per round trip (bench/latency-proxy.ts), where round trips rather than this machine's CPU
 * are the cost, as between Lambda and Aurora.
 *
 * Options: `--jobs N` per variant per round (default 4,000; 400 with --quick), `--reps N` (default 7;
 * 5 with --quick), `--concurrency N` (default 8), `--durability durable|fast` (embedded only;
 * default durable: fsync and synchronous_commit on, as a real server runs).
 */
import { parseArgs } from "node:util";
import pg from "pg";
import { awardPoints } from "../functions/award-points/award.ts";
import { createPool } from "../shared/db/pool.ts";
import { consumerRoleName } from "../shared/db/queries/provision-login.ts";
import {
  bareVariant,
  compareVariants,
  harnessVariant,
  runConcurrently,
  type Variant,
  type VariantRates,
} from "./harness-driver.ts";
import { startLatencyProxy } from "./latency-proxy.ts";
import { describeEnvironment, int, median, ratio, showSpread, spread, table, writeResult } from "./report.ts";
import { benchDatabase, createCleanups, positiveInt, runBenchmark } from "./support.ts";

const { values: argv } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    jobs: { type: "string" },
    reps: { type: "string" },
    concurrency: { type: "string" },
    durability: { type: "string", default: "durable" },
    rtt: { type: "string", default: "0.5" },
  },
});
const QUICK = argv.quick;
const JOBS = positiveInt(argv.jobs, QUICK ? 400 : 4000, "jobs");
const REPS = positiveInt(argv.reps, QUICK ? 5 : 7, "reps");
const CONCURRENCY = positiveInt(argv.concurrency, 8, "concurrency");
const DURABILITY = argv.durability === "fast" ? "fast" : "durable";
const TARGET = 0.9;
const RTT = Number(argv.rtt);
if (!Number.isFinite(RTT) || RTT <= 0) {
  console.error(`--rtt must be a positive number of milliseconds, got ${argv.rtt}`);
  process.exit(2);
}

type Statement = (
  client: pg.PoolClient,
  job: { jobId: string; tenantId: string; userId: string; points: number },
) => Promise<void>;

/** A transaction per job, made of `steps` around the effect. */
function anatomyVariant(label: string, pool: pg.Pool, begin: Statement): Variant {
  return {
    label,
    run: async (jobs) => ({
      ms: await runConcurrently(jobs, CONCURRENCY, async (job) => {
        const client = await pool.connect();
        try {
          await begin(client, job);
          await awardPoints(client, job);
          await client.query("COMMIT");
        } catch (error) {
          await client.query("ROLLBACK").catch(() => {});
          throw error;
        } finally {
          client.release();
        }
      }),
      applied: jobs.length,
    }),
  };
}

const literal = pg.escapeLiteral;
const FENCE_COLUMNS = "(job_id, consumer, tenant_id, processed_at, expires_at)";
const fenceRow = (jobId: string, tenantId: string) =>
  `(${literal(jobId)}, 'award-points', ${literal(tenantId)}, now(), now() + make_interval(secs => 604800))`;

function anatomy(pool: pg.Pool): Variant[] {
  return [
    anatomyVariant("bare", pool, async (c) => {
      await c.query("BEGIN");
    }),
    anatomyVariant("fence as shipped", pool, async (c, j) => {
      await c.query(
        `BEGIN;\nINSERT INTO core.processed_jobs ${FENCE_COLUMNS} VALUES ${fenceRow(j.jobId, j.tenantId)}\nON CONFLICT (job_id, consumer) DO NOTHING RETURNING job_id`,
      );
    }),
    anatomyVariant("fence, plain INSERT", pool, async (c, j) => {
      await c.query(
        `BEGIN;\nINSERT INTO core.processed_jobs ${FENCE_COLUMNS} VALUES ${fenceRow(j.jobId, j.tenantId)}`,
      );
    }),
    anatomyVariant("fence, no expires_at index", pool, async (c, j) => {
      await c.query(
        `BEGIN;\nINSERT INTO bench_anatomy.fences ${FENCE_COLUMNS} VALUES ${fenceRow(j.jobId, j.tenantId)}\nON CONFLICT (job_id, consumer) DO NOTHING RETURNING job_id`,
      );
    }),
    anatomyVariant("fence as its own statement", pool, async (c, j) => {
      await c.query("BEGIN");
      await c.query(
        `INSERT INTO core.processed_jobs ${FENCE_COLUMNS} VALUES ($1, 'award-points', $2, now(), now() + make_interval(secs => 604800)) ON CONFLICT (job_id, consumer) DO NOTHING RETURNING 1`,
        [j.jobId, j.tenantId],
      );
    }),
  ];
}

const cleanups = createCleanups();
await runBenchmark(async () => {
  const database = await benchDatabase(DURABILITY, cleanups);
  const pool = createPool({
    connectionString: database.url,
    role: consumerRoleName("award-points"),
    max: CONCURRENCY,
  });
  cleanups.push(() => pool.end());
  const admin = new pg.Client({ connectionString: database.url });
  await admin.connect();
  cleanups.push(() => admin.end());
  const environment = await describeEnvironment(admin, database.serverKind, ["fsync", "synchronous_commit"]);
  // The fence table's copy without the expires_at index, for the anatomy.
  await admin.query(`CREATE SCHEMA bench_anatomy;
    CREATE TABLE bench_anatomy.fences (LIKE core.processed_jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
    ALTER TABLE bench_anatomy.fences ADD PRIMARY KEY (job_id, consumer);
    GRANT USAGE ON SCHEMA bench_anatomy TO jobfence_consumer_award_points;
    GRANT SELECT, INSERT ON bench_anatomy.fences TO jobfence_consumer_award_points;`);
  console.log(
    `fence overhead: ${JOBS} jobs per variant per round, ${REPS} rounds, concurrency ${CONCURRENCY}`,
  );

  const clientCpu: VariantRates = {};
  const compare = (p: pg.Pool, url: string, cpu?: VariantRates) =>
    compareVariants(
      [
        bareVariant("bare", p, CONCURRENCY),
        harnessVariant("harness", p, url, {
          commitMode: "per-record",
          batchSize: 10,
          concurrency: CONCURRENCY,
        }),
      ],
      { reps: REPS, jobs: JOBS, log: (line) => console.log(`  ${line}`), ...(cpu ? { clientCpu: cpu } : {}) },
    );
  const rates = await compare(pool, database.url, clientCpu);

  // The same through the latency proxy: where round trips, not the machine's CPU, are the cost.
  const target = new URL(database.url);
  const proxy = await startLatencyProxy({
    target: { host: target.hostname, port: Number(target.port || 5432) },
    oneWayDelayMs: RTT / 2,
  });
  cleanups.push(() => proxy.stop());
  console.log(`\nthrough the latency proxy (+${RTT} ms per round trip):`);
  const proxied = createPool({
    connectionString: proxy.url(database.url),
    role: consumerRoleName("award-points"),
    max: CONCURRENCY,
  });
  const latencyRates = await compare(proxied, proxy.url(database.url)).finally(() => proxied.end());

  const summarize = (r: VariantRates) => {
    const bare = r.bare ?? [];
    const harness = r.harness ?? [];
    return {
      bare: spread(bare),
      harness: spread(harness),
      ratio: spread(harness.map((h, i) => h / (bare[i] ?? Number.NaN))),
    };
  };
  const summary = summarize(rates);
  const latencySummary = summarize(latencyRates);
  const ratios = [summary.ratio.median];
  console.log(
    `\n${table(
      ["effects/s median (min–max)", "loopback", `+${RTT} ms RTT`],
      [
        ["bare transaction, no fence", showSpread(summary.bare, int), showSpread(latencySummary.bare, int)],
        ["harness, per-record", showSpread(summary.harness, int), showSpread(latencySummary.harness, int)],
        [
          "harness / bare (per round)",
          showSpread(summary.ratio, ratio),
          showSpread(latencySummary.ratio, ratio),
        ],
      ],
    )}`,
  );

  const cpuSummary = { bare: spread(clientCpu.bare ?? []), harness: spread(clientCpu.harness ?? []) };
  console.log(
    `\nclient process CPU per effect on loopback (µs): bare ${showSpread(cpuSummary.bare, int)}, ` +
      `harness ${showSpread(cpuSummary.harness, int)}; on 2 shared cores, CPU the server does not get`,
  );

  console.log(`\nanatomy (no harness; each variant one transaction per job, same pool, alternated):`);
  const anatomyRates = await compareVariants(anatomy(pool), {
    reps: REPS,
    jobs: JOBS,
    log: (line) => console.log(`  ${line}`),
  });
  const anatomyBare = anatomyRates.bare ?? [];
  const anatomySummary = Object.fromEntries(
    Object.entries(anatomyRates).map(([label, values]) => [
      label,
      { rate: spread(values), vs_bare: spread(values.map((v, i) => v / (anatomyBare[i] ?? Number.NaN))) },
    ]),
  );
  console.log(
    `\n${table(
      ["anatomy variant", "effects/s median (min–max)", "× bare"],
      Object.entries(anatomySummary).map(([label, r]) => [
        label,
        showSpread(r.rate, int),
        showSpread(r.vs_bare, ratio),
      ]),
    )}`,
  );
  const met = median(ratios) >= TARGET;
  const verdict =
    `harness ${ratio(median(ratios))} bare on loopback (target ≥ ${TARGET}×: ${met ? "met" : "MISSED"}); ` +
    `${ratio(latencySummary.ratio.median)} with ${RTT} ms RTT; fence alone, no harness: ${ratio(anatomySummary["fence as shipped"]?.vs_bare.median ?? Number.NaN)}`;
  console.log(`\nVERDICT: ${verdict}`);
  const path = await writeResult("fence-overhead", {
    benchmark: "fence overhead (per-record harness vs bare transaction)",
    options: {
      jobs: JOBS,
      reps: REPS,
      concurrency: CONCURRENCY,
      durability: DURABILITY,
      quick: QUICK,
      sqs_batch: 10,
    },
    method:
      "one pool (award-points's role, max = concurrency) shared by both variants; per round fresh jobs, variants alternated; effects/s = jobs / wall time",
    environment: { ...environment, durability: database.embedded ? DURABILITY : "server's own" },
    target: TARGET,
    rates,
    summary,
    client_cpu_us_per_effect: { samples: clientCpu, summary: cpuSummary },
    latency: { rtt_ms: RTT, rates: latencyRates, summary: latencySummary },
    anatomy: { rates: anatomyRates, summary: anatomySummary },
    met,
    verdict,
  });
  console.log(`wrote ${path}`);
}, cleanups);
