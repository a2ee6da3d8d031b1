/**
 * `node bench/fence-overhead.ts`: what the fence costs. The reference consumer's effect (one
 * ledger row + the user's balance, functions/award-points) through the harness in per-record mode,
 * against the identical effect in a bare transaction with no fence (BEGIN; effect; COMMIT), on the
 * same pool (same connections, logged in as jobfence_consumer) and the same concurrency, alternated
 * in one run. Target: harness ≥ 0.90 × bare.
 *
 * The harness is invoked in process with SQS batches of 10 records, as Lambda delivers them; no
 * queue is involved (nothing fails, so it makes no SQS call). Each round applies fresh jobs (new
 * 36-character ids) over 1,000 balances; a warm-up round, then `--reps` measured rounds.
 *
 * Options: `--jobs N` per variant per round (default 4,000; 400 with --quick), `--reps N` (default 7;
 * 5 with --quick), `--concurrency N` (default 8), `--durability durable|fast` (embedded only;
 * default durable: fsync and synchronous_commit on, as a real server runs).
 */
import { parseArgs } from "node:util";
import pg from "pg";
import { createPool } from "../shared/db/pool.ts";
import { bareVariant, compareVariants, harnessVariant } from "./harness-driver.ts";
import { describeEnvironment, int, median, ratio, showSpread, spread, table, writeResult } from "./report.ts";
import { benchDatabase, createCleanups, positiveInt } from "./support.ts";

const { values: argv } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    jobs: { type: "string" },
    reps: { type: "string" },
    concurrency: { type: "string" },
    durability: { type: "string", default: "durable" },
  },
});
const QUICK = argv.quick;
const JOBS = positiveInt(argv.jobs, QUICK ? 400 : 4000, "jobs");
const REPS = positiveInt(argv.reps, QUICK ? 5 : 7, "reps");
const CONCURRENCY = positiveInt(argv.concurrency, 8, "concurrency");
const DURABILITY = argv.durability === "fast" ? "fast" : "durable";
const TARGET = 0.9;

const cleanups = createCleanups();
try {
  const database = await benchDatabase(DURABILITY, cleanups);
  const pool = createPool({ connectionString: database.url, role: "jobfence_consumer", max: CONCURRENCY });
  cleanups.push(() => pool.end());
  const admin = new pg.Client({ connectionString: database.url });
  await admin.connect();
  cleanups.push(() => admin.end());
  const environment = await describeEnvironment(admin, database.serverKind, ["fsync", "synchronous_commit"]);
  console.log(
    `fence overhead: ${JOBS} jobs per variant per round, ${REPS} rounds, concurrency ${CONCURRENCY}`,
  );

  const rates = await compareVariants(
    [
      bareVariant("bare", pool, CONCURRENCY),
      harnessVariant("harness", pool, database.url, {
        commitMode: "per-record",
        batchSize: 10,
        concurrency: CONCURRENCY,
      }),
    ],
    { reps: REPS, jobs: JOBS, log: (line) => console.log(`  ${line}`) },
  );
  const bare = rates.bare ?? [];
  const harness = rates.harness ?? [];
  const ratios = harness.map((h, i) => h / (bare[i] ?? Number.NaN));
  const summary = { bare: spread(bare), harness: spread(harness), ratio: spread(ratios) };
  console.log(
    `\n${table(
      ["variant", "effects/s median (min–max)"],
      [
        ["bare transaction, no fence", showSpread(summary.bare, int)],
        ["harness, per-record", showSpread(summary.harness, int)],
        ["harness / bare (per round)", showSpread(summary.ratio, ratio)],
      ],
    )}`,
  );
  const met = median(ratios) >= TARGET;
  const verdict = `harness ${ratio(median(ratios))} bare (target ≥ ${TARGET}×: ${met ? "met" : "MISSED"})`;
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
      "one pool (jobfence_consumer, max = concurrency) shared by both variants; per round fresh jobs, variants alternated; effects/s = jobs / wall time",
    environment: { ...environment, durability: database.embedded ? DURABILITY : "server's own" },
    target: TARGET,
    rates,
    summary,
    met,
    verdict,
  });
  console.log(`wrote ${path}`);
} finally {
  await cleanups.run();
}
