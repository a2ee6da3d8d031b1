/**
 * `node bench/round-trips.ts`: what each job costs the database, by mode: round trips, statements,
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
 * simple-protocol messages: `BEGIN; INSERT fence` is two and
 * `SELECT core.assert_fence_transaction(…); COMMIT` two); the jobs are applied, the
 * pool is ended, and the server's counters are read through bench/pg-counters.ts (transactions and
 * rows written from pg_stat_database, WAL from the insert LSN). WAL per job varies with full-page
 * images written after a checkpoint, so it is reported as the median and range of repetitions.
 * That combining statements is injection-safe is tested, not benchmarked:
 * test/integration/begin-with-fences.test.ts.
 *
 * Options: `--jobs N` per mode per repetition (default 2,000; 300 with --quick), `--reps N`
 * (default 5), `--concurrency N` (default 8).
 */
import { parseArgs } from "node:util";
import type pg from "pg";
import { createPool } from "../shared/db/pool.ts";
import { consumerRoleName } from "../shared/db/queries/provision-login.ts";
import { bareVariant, harnessVariant, makeJobs, type Variant } from "./harness-driver.ts";
import { counterDelta, openObserver } from "./pg-counters.ts";
import { describeEnvironment, showSpread, spread, table, writeResult } from "./report.ts";
import { benchDatabase, createCleanups, positiveInt, runBenchmark } from "./support.ts";

const { values: argv } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    jobs: { type: "string" },
    reps: { type: "string" },
    concurrency: { type: "string" },
  },
});
const QUICK = argv.quick;
const JOBS = positiveInt(argv.jobs, QUICK ? 300 : 2000, "jobs");
const REPS = positiveInt(argv.reps, 5, "reps");
const CONCURRENCY = positiveInt(argv.concurrency, 8, "concurrency");

/** Counts round trips and statements on every connection the pool hands out. */
function countingPool(url: string): { pool: pg.Pool; counts: { roundTrips: number; statements: number } } {
  const pool = createPool({
    connectionString: url,
    role: consumerRoleName("award-points"),
    max: CONCURRENCY,
  });
  const counts = { roundTrips: 0, statements: 0 };
  const wrapped = new WeakSet<object>();
  pool.on("acquire", (client) => {
    if (wrapped.has(client)) return;
    wrapped.add(client);
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as { query: unknown }).query = (...args: unknown[]) => {
      counts.roundTrips += 1;
      const text = typeof args[0] === "string" ? args[0] : "";
      // The harness joins the statements of one message with ";\n" (BEGIN; fence insert — and the
      // COMMIT check; COMMIT); no other query here holds one.
      counts.statements += 1 + (text.match(/;\n/g)?.length ?? 0);
      return query(...args);
    };
  });
  return { pool, counts };
}

/** A harness mode: its commit mode and batch size, with or without one follow-up per job. */
const harness = (
  label: string,
  commitMode: "per-record" | "batch",
  batchSize: number,
  followUps = false,
): { label: string; make: (pool: pg.Pool, url: string) => Variant } => ({
  label,
  make: (pool, url) =>
    harnessVariant(label, pool, url, { commitMode, batchSize, concurrency: CONCURRENCY, followUps }),
});

const MODES: ReadonlyArray<{ label: string; make: (pool: pg.Pool, url: string) => Variant }> = [
  { label: "bare", make: (pool) => bareVariant("bare", pool, CONCURRENCY) },
  harness("per-record", "per-record", 10),
  harness("batch 10", "batch", 10),
  harness("batch 50", "batch", 50),
  harness("per-record + follow-up", "per-record", 10, true),
  harness("batch 10 + follow-up", "batch", 10, true),
];

type PerJob = {
  roundTrips: number;
  statements: number;
  xacts: number;
  rowsWritten: number;
  walBytes: number;
};

const cleanups = createCleanups();
await runBenchmark(async () => {
  const database = await benchDatabase("durable", cleanups);
  const observer = await openObserver(database.url);
  cleanups.push(() => observer.close());
  const environment = await describeEnvironment(
    { query: observer.query } as unknown as pg.ClientBase,
    database.serverKind,
    ["fsync", "full_page_writes", "wal_level"],
  );
  console.log(
    `round trips and WAL: ${JOBS} jobs per mode, ${REPS} repetitions after a warm-up, concurrency ${CONCURRENCY}`,
  );
  const samples: Record<string, PerJob[]> = Object.fromEntries(MODES.map((m) => [m.label, []]));
  for (let rep = 0; rep <= REPS; rep++) {
    for (const mode of MODES) {
      const { pool, counts } = countingPool(database.url);
      const before = await observer.settled();
      await mode.make(pool, database.url).run(makeJobs(JOBS));
      await pool.end();
      const delta = counterDelta(before, await observer.settled());
      if (rep === 0) continue; // warm-up
      samples[mode.label]?.push({
        roundTrips: counts.roundTrips / JOBS,
        statements: counts.statements / JOBS,
        xacts: delta.xacts / JOBS,
        rowsWritten: delta.rowsWritten / JOBS,
        walBytes: delta.walBytes / JOBS,
      });
    }
  }
  const fmt = (digits: number) => (v: number) => v.toFixed(digits);
  const summary = Object.fromEntries(
    Object.entries(samples).map(([label, list]) => [
      label,
      Object.fromEntries(
        (["roundTrips", "statements", "xacts", "rowsWritten", "walBytes"] as const).map((k) => [
          k,
          spread(list.map((s) => s[k])),
        ]),
      ),
    ]),
  ) as Record<string, Record<keyof PerJob, ReturnType<typeof spread>>>;
  console.log(
    `\n${table(
      ["per job", "round trips", "statements", "transactions", "rows written", "WAL bytes"],
      Object.entries(summary).map(([label, s]) => [
        label,
        showSpread(s.roundTrips, fmt(2)),
        showSpread(s.statements, fmt(2)),
        showSpread(s.xacts, fmt(2)),
        showSpread(s.rowsWritten, fmt(2)),
        showSpread(s.walBytes, fmt(0)),
      ]),
    )}`,
  );
  const median = (label: string, key: keyof PerJob) => summary[label]?.[key].median ?? Number.NaN;
  const rt = (label: string) => median(label, "roundTrips");
  // What one follow-up per job adds to each mode, per job (= per follow-up).
  const followUpCost = Object.fromEntries(
    (["per-record", "batch 10"] as const).map((mode) => [
      mode,
      Object.fromEntries(
        (["roundTrips", "statements", "xacts", "rowsWritten", "walBytes"] as const).map((k) => [
          k,
          median(`${mode} + follow-up`, k) - median(mode, k),
        ]),
      ),
    ]),
  ) as Record<"per-record" | "batch 10", Record<keyof PerJob, number>>;
  console.log(
    `\n${table(
      ["per follow-up", "round trips", "statements", "transactions", "rows written", "WAL bytes"],
      Object.entries(followUpCost).map(([mode, c]) => [
        mode,
        fmt(2)(c.roundTrips),
        fmt(2)(c.statements),
        fmt(2)(c.xacts),
        fmt(2)(c.rowsWritten),
        fmt(0)(c.walBytes),
      ]),
    )}`,
  );
  const met = {
    perRecord: rt("per-record") <= rt("bare"),
    batch: rt("batch 10") < rt("bare") && rt("batch 50") < rt("bare"),
    // The plain modes send nothing: what they cost is the fence's own protocol exactly (two more
    // statements in the same round trips, one more row: the fence), with nothing for the outbox.
    nothingSentPaysNothing:
      median("per-record", "statements") === median("bare", "statements") + 2 &&
      median("per-record", "rowsWritten") === median("bare", "rowsWritten") + 1,
  };
  const verdict =
    `round trips per job: bare ${rt("bare").toFixed(2)}, per-record ${rt("per-record").toFixed(2)}, batch 10 ${rt("batch 10").toFixed(2)}, batch 50 ${rt("batch 50").toFixed(2)}; ` +
    `the fence adds no round trip: ${met.perRecord && met.batch ? "met" : "MISSED"}; ` +
    `a job that sends nothing pays nothing for the outbox: ${met.nothingSentPaysNothing ? "met" : "MISSED"}; ` +
    `a follow-up costs per-record +${followUpCost["per-record"].roundTrips.toFixed(2)} round trips and +${followUpCost["per-record"].walBytes.toFixed(0)} WAL bytes, batch 10 +${followUpCost["batch 10"].roundTrips.toFixed(2)} and +${followUpCost["batch 10"].walBytes.toFixed(0)}`;
  console.log(`\nVERDICT: ${verdict}`);
  const path = await writeResult("round-trips", {
    benchmark: "round trips, statements, transactions and WAL per job by commit mode",
    options: {
      jobs: JOBS,
      reps: REPS,
      concurrency: CONCURRENCY,
      quick: QUICK,
      observer_exact: observer.canForceFlush,
    },
    method:
      "client instrumentation (query calls = round trips; statements, each of the harness's multi-statement messages counted by its statements) and pg_stat_database / WAL insert LSN deltas read after the pool ended; a warm-up repetition discarded",
    environment,
    samples,
    summary,
    followUpCost,
    met,
    verdict,
  });
  console.log(`wrote ${path}`);
}, cleanups);
