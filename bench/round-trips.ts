/**
 * `npm run bench -- --only round-trips`: what each job costs the database, by mode: round trips, statements,
 * transactions, rows written and WAL bytes per job, for the bare effect (BEGIN; effect; COMMIT,
 * no fence), the harness per-record, and batch-commit at 10 and 50, each of the harness's modes also
 * with one follow-up per job sent through the outbox. Targets: the fence adds no round trip of its
 * own in either mode (per-record = bare; batch < bare), and a job that sends nothing pays nothing
 * for the outbox (its rows are the plain modes'), measured, not assumed; the cost of a follow-up
 * (round trips, statements, rows written and WAL per job beyond the plain mode's) is reported.
 *
 * Method, per mode and repetition: a fresh pool (award-points's role, max = concurrency) whose
 * connections count every query call they make (one call = one round trip: pg sends a query and
 * waits for its answer) and every statement sent (a call is one statement, except the harness's
 * simple-protocol messages: `BEGIN; mark; INSERT fence` is three and
 * `SELECT core.fence_commit_check(…); COMMIT` two); the jobs are applied, the
 * pool is ended, and the server's counters are read through bench/pg-counters.ts (transactions and
 * rows written from pg_stat_database, WAL from the insert LSN). WAL per job varies with full-page
 * images written after a checkpoint, so it is reported as the median and range of repetitions.
 * That combining statements is injection-safe is tested, not benchmarked:
 * test/integration/begin-with-fences.test.ts.
 */
import type pg from "pg";
import { z } from "zod";
import { countingPool } from "./lib/counting-pool.ts";
import { defineBenchmark } from "./lib/define.ts";
import { bareVariant, harnessVariant, makeJobs, type Variant } from "./lib/harness-driver.ts";
import { counterDelta, openObserver } from "./lib/pg-counters.ts";
import { type Spread, showSpread, spread } from "./lib/report.ts";

const options = z.object({
  jobs: z.coerce.number().int().positive().default(2000).describe("jobs per mode per repetition"),
  reps: z.coerce.number().int().positive().default(5).describe("measured repetitions after a warm-up"),
  concurrency: z.coerce.number().int().positive().default(8).describe("connections and callers"),
});

type Mode = { label: string; make: (pool: pg.Pool, url: string, concurrency: number) => Variant };

/** A harness mode: its commit mode and batch size, with or without one follow-up per job. */
const harness = (
  label: string,
  commitMode: "per-record" | "batch",
  batchSize: number,
  followUps = false,
): Mode => ({
  label,
  make: (pool, url, concurrency) =>
    harnessVariant(label, pool, url, { commitMode, batchSize, concurrency, followUps }),
});

const MODES: readonly Mode[] = [
  { label: "bare", make: (pool, _url, concurrency) => bareVariant("bare", pool, concurrency) },
  harness("per-record", "per-record", 10),
  harness("batch 10", "batch", 10),
  harness("batch 50", "batch", 50),
  harness("per-record + follow-up", "per-record", 10, true),
  harness("batch 10 + follow-up", "batch", 10, true),
];

/**
 * Statements a per-record job sends beyond the bare effect's: the transaction's mark, the fence
 * insert and its COMMIT check (shared/fence/fence-transaction.ts).
 */
const FENCE_STATEMENTS = 3;

const KEYS = ["roundTrips", "statements", "xacts", "rowsWritten", "walBytes"] as const;
type PerJob = Record<(typeof KEYS)[number], number>;
const HEADERS = ["round trips", "statements", "transactions", "rows written", "WAL bytes"];
const fixed = (digits: number) => (v: number) => v.toFixed(digits);

await defineBenchmark({
  name: "round-trips",
  title: "round trips, statements, transactions, rows and WAL per job, by commit mode",
  method:
    "client instrumentation (query calls = round trips; statements, each of the harness's multi-statement messages counted by its statements) and pg_stat_database / WAL insert LSN deltas read after the pool ended; modes alternated within each repetition, a warm-up repetition discarded",
  options,
  quick: { jobs: 300 },
  database: "durable",
  settings: ["full_page_writes", "wal_level"],
  async setup(context) {
    const observer = await openObserver(context.database.url);
    context.cleanups.push(() => observer.close());
    return observer;
  },
  async run({ options: o, database, table }, observer) {
    const samples: Record<string, PerJob[]> = Object.fromEntries(MODES.map((m) => [m.label, []]));
    for (let rep = 0; rep <= o.reps; rep++) {
      for (const mode of MODES) {
        const { pool, counts } = countingPool(database.url, o.concurrency);
        const before = await observer.settled();
        await mode.make(pool, database.url, o.concurrency).run(makeJobs(o.jobs));
        await pool.end();
        const delta = counterDelta(before, await observer.settled());
        if (rep === 0) continue; // warm-up
        samples[mode.label]?.push({
          roundTrips: counts.roundTrips / o.jobs,
          statements: counts.statements / o.jobs,
          xacts: delta.xacts / o.jobs,
          rowsWritten: delta.rowsWritten / o.jobs,
          walBytes: delta.walBytes / o.jobs,
        });
      }
    }
    const summary = Object.fromEntries(
      Object.entries(samples).map(([label, list]) => [
        label,
        Object.fromEntries(KEYS.map((k) => [k, spread(list.map((s) => s[k]))])),
      ]),
    ) as Record<string, Record<keyof PerJob, Spread>>;
    const median = (label: string, key: keyof PerJob) => summary[label]?.[key].median ?? Number.NaN;
    table(
      "per job",
      ["mode", ...HEADERS],
      Object.entries(summary).map(([label, s]) => [
        label,
        ...KEYS.map((k) => showSpread(s[k], fixed(k === "walBytes" ? 0 : 2))),
      ]),
    );
    // What one follow-up per job adds to each mode, per job (= per follow-up).
    const followUpCost = Object.fromEntries(
      (["per-record", "batch 10"] as const).map((mode) => [
        mode,
        Object.fromEntries(
          KEYS.map((k) => [k, median(`${mode} + follow-up`, k) - median(mode, k)]),
        ) as PerJob,
      ]),
    ) as Record<"per-record" | "batch 10", PerJob>;
    table(
      "what one follow-up adds, per job",
      ["mode", ...HEADERS],
      Object.entries(followUpCost).map(([mode, c]) => [
        mode,
        ...KEYS.map((k) => fixed(k === "walBytes" ? 0 : 2)(c[k])),
      ]),
    );
    return { samples, summary, followUpCost, observerExact: observer.canForceFlush };
  },
  verdict({ summary }) {
    const median = (label: string, key: keyof PerJob) => summary[label]?.[key].median ?? Number.NaN;
    const rt = (label: string) => median(label, "roundTrips");
    return {
      targets: [
        {
          name: "round trips per job, per-record − bare",
          measured: rt("per-record") - rt("bare"),
          bound: "at most",
          target: 0,
        },
        {
          name: "round trips per job, batch 10 − bare",
          measured: rt("batch 10") - rt("bare"),
          bound: "at most",
          target: 0,
        },
        {
          name: "round trips per job, batch 50 − bare",
          measured: rt("batch 50") - rt("bare"),
          bound: "at most",
          target: 0,
        },
        // The plain modes send nothing: what they cost is the fence's own protocol exactly (three
        // more statements in the same round trips: the transaction's mark, the fence insert and its
        // COMMIT check; one more row: the fence), nothing for the outbox.
        {
          name: `statements per job beyond the fence's ${FENCE_STATEMENTS}, per-record`,
          measured: median("per-record", "statements") - median("bare", "statements") - FENCE_STATEMENTS,
          bound: "at most",
          target: 0,
        },
        {
          name: "rows written per job beyond the fence, per-record",
          measured: median("per-record", "rowsWritten") - median("bare", "rowsWritten") - 1,
          bound: "at most",
          target: 0,
        },
      ],
    };
  },
});
