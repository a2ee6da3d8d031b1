/**
 * `npm run bench -- --only fence-anatomy`: where the fence's cost comes from, with no record path:
 * the same jobs, `--concurrency` connections of one consumer login (made as a deployment makes it),
 * each variant one transaction per job unless said, alternated round by round:
 *
 * - `bare`: BEGIN; effect; COMMIT;
 * - `fence as shipped`: the fence transaction by hand (bench/lib/fenced.ts): the harness's BEGIN +
 *   fence message (`beginWithFences`), the effect, the COMMIT check and COMMIT;
 * - then the shipped message altered one way at a time, to price each part of the insert:
 *   `consumer id as a number` (no `core.consumer_id` lookup); `no row-level security` (a copy of the
 *   table with its CHECKs, indexes and triggers and no policy: the session's consumer is not looked
 *   up); `… nor commit check` (a copy without the triggers either, committed by a plain COMMIT);
 *   `no fingerprint` (NULL); `the row and its key alone` (a copy with the key only, the id a number,
 *   a plain COMMIT: the floor);
 * - `fence transaction`: the library's FenceTransaction (the work's guarded connection, the COMMIT
 *   check and the session resets, as the harness commits); `… + a follow-up`: the same with one
 *   follow-up staged, so the outbox's insert policy runs (provenance, the parent's fence);
 * - `batch of N, fenced by hand`: one transaction for N jobs, N fences in the BEGIN message.
 *
 * Beside the rate: this process's CPU per effect and the server's (the pool's backends, read from
 * /proc when the server runs on this machine, bench/lib/server-cpu.ts), so a part's price is read in
 * server µs per job, which the machine's other load changes far less than it changes a rate.
 */
import pg from "pg";
import { z } from "zod";
import { awardPoints } from "../../functions/award-points/award.ts";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { createPool } from "../../shared/db/pool.ts";
import { beginWithFences, type FencesInserted } from "../../shared/db/queries/begin-with-fences.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { FenceTransaction } from "../../shared/fence/fence-transaction.ts";
import { stagedFollowUp } from "../../shared/outbox/follow-up.ts";
import { defineBenchmark } from "../lib/define.ts";
import { BENCH_CONSUMER, benchFences, commitFenced, FENCED_STEPS } from "../lib/fenced.ts";
import {
  BARE_STEPS,
  compareVariants,
  processCpuMeter,
  runConcurrently,
  type TransactionSteps,
  transactionVariant,
  type Variant,
} from "../lib/harness-driver.ts";
import { startLatencyProxy } from "../lib/latency-proxy.ts";
import { int, type RateSummary, rateRows, ratioSpread, showSpread, spread } from "../lib/report.ts";
import { meterServerCpu } from "../lib/server-cpu.ts";
import { consumerLoginUrl } from "../lib/support.ts";

const options = z.object({
  jobs: z.coerce.number().int().positive().default(2000).describe("jobs per variant per round"),
  reps: z.coerce.number().int().positive().default(5).describe("measured rounds after a warm-up round"),
  concurrency: z.coerce.number().int().positive().default(8).describe("connections"),
  rtt: z.coerce
    .number()
    .nonnegative()
    .default(0.5)
    .describe("round-trip time the latency proxy adds, ms (0 skips that network)"),
  batch: z.coerce.number().int().min(2).default(10).describe("jobs per transaction of the batch variant"),
});

/** `text` with `pattern` replaced; throws when it is not there (the variant would be the shipped one). */
function altered(text: string, pattern: string | RegExp, replacement: string): string {
  const result = text.replace(pattern, replacement);
  if (result === text) throw new Error(`fence-anatomy: ${pattern} is not in the fence message any more`);
  return result;
}

/**
 * The fence transaction by hand with the fence message changed by `change` before it is sent;
 * committed with the check, or by a plain COMMIT when `checked` is false (a copy of the table
 * without the fence's triggers needs none).
 */
function alteredSteps(change: (text: string) => string, checked = true): TransactionSteps<FencesInserted> {
  return {
    begin: (client, jobs) => {
      const rewriting = { query: (text: string) => client.query(change(text)) };
      return beginWithFences(rewriting as unknown as pg.ClientBase, benchFences(jobs));
    },
    commit: (client, begun) => (checked ? commitFenced(client, begun) : BARE_STEPS.commit(client, begun)),
  };
}

/** One transaction per job through the library's FenceTransaction; `followUp` stages one follow-up. */
function fenceTransactionVariant(
  label: string,
  pool: pg.Pool,
  concurrency: number,
  followUp: boolean,
): Variant {
  const spec = { consumer: BENCH_CONSUMER, sends: awardPointsConsumer.sends };
  return {
    label,
    run: async (jobs) => ({
      applied: jobs.length,
      ms: await runConcurrently(jobs, concurrency, async (job) => {
        const { transaction } = await FenceTransaction.open(pool, benchFences([job]));
        try {
          await awardPoints(transaction.tx, job);
          if (followUp) {
            const parent = { ...job, correlationId: job.jobId, payload: {} };
            const payload = { user_id: job.userId, kind: "points-awarded", points: job.points };
            transaction.stage(stagedFollowUp(spec, parent, "notify-user", { payload }, 0, null));
          }
          await transaction.commit();
        } catch (error) {
          await transaction.abandon();
          throw error;
        }
      }),
    }),
  };
}

function variants(pool: pg.Pool, o: z.output<typeof options>, consumerId: number): Variant[] {
  const c = o.concurrency;
  const lookup = /\(SELECT core\.consumer_id\([^)]*\)\)/;
  const byNumber = `${consumerId}::smallint`;
  const into = (table: string) => (text: string) =>
    altered(text, "INSERT INTO core.processed_jobs", `INSERT INTO bench_anatomy.${table}`);
  return [
    transactionVariant("bare", pool, c),
    transactionVariant("fence as shipped", pool, c, FENCED_STEPS),
    transactionVariant(
      "consumer id as a number",
      pool,
      c,
      alteredSteps((t) => altered(t, lookup, byNumber)),
    ),
    transactionVariant("no row-level security", pool, c, alteredSteps(into("unsecured"))),
    transactionVariant("… nor commit check", pool, c, alteredSteps(into("untriggered"), false)),
    transactionVariant(
      "no fingerprint",
      pool,
      c,
      alteredSteps((t) => altered(t, /'[0-9a-f]{32}'::uuid/, "NULL::uuid")),
    ),
    transactionVariant(
      "the row and its key alone",
      pool,
      c,
      alteredSteps((t) => altered(into("key_only")(t), lookup, byNumber), false),
    ),
    fenceTransactionVariant("fence transaction", pool, c, false),
    fenceTransactionVariant("fence transaction + a follow-up", pool, c, true),
    transactionVariant(`batch of ${o.batch}, fenced by hand`, pool, c, FENCED_STEPS, o.batch),
  ];
}

/** Per variant: its rate and × bare, and the CPU per effect of this process and of the server. */
type Summary = RateSummary & { client: ReturnType<typeof spread>; server: ReturnType<typeof spread> };

await defineBenchmark({
  name: "fence-anatomy",
  title: "the fence's cost with no record path: bare, the shipped fence, the fence altered one way at a time",
  method:
    "one pool (an award-points login, max = concurrency) per network; each variant one transaction per job unless said; fresh jobs per round, order rotated; effects/s = jobs / wall time; ratios per round against bare; client CPU = this process (all threads); server CPU = the pool's backends (/proc schedstat)",
  options,
  quick: { jobs: 300, reps: 3 },
  database: "durable",
  async setup({ database, options: o, cleanups }) {
    const admin = new pg.Client({ connectionString: database.url });
    await admin.connect();
    const role = consumerRoleName(BENCH_CONSUMER);
    // Copies of the fence table, the same columns and key: `unsecured` also its CHECKs, indexes and
    // triggers (as their definitions read, on the copy); `untriggered` all but the triggers.
    await admin.query(`CREATE SCHEMA bench_anatomy;
      CREATE TABLE bench_anatomy.unsecured (LIKE core.processed_jobs INCLUDING ALL);
      CREATE TABLE bench_anatomy.untriggered (LIKE core.processed_jobs INCLUDING ALL);
      CREATE TABLE bench_anatomy.key_only (LIKE core.processed_jobs INCLUDING DEFAULTS);
      ALTER TABLE bench_anatomy.key_only ADD PRIMARY KEY (job_id, consumer_id);
      GRANT USAGE ON SCHEMA bench_anatomy TO ${role};
      GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA bench_anatomy TO ${role};`);
    const triggers = await admin.query<{ definition: string }>(
      `SELECT pg_get_triggerdef(oid) AS definition FROM pg_trigger
        WHERE tgrelid = 'core.processed_jobs'::regclass AND NOT tgisinternal`,
    );
    for (const { definition } of triggers.rows)
      await admin.query(altered(definition, " ON core.processed_jobs ", " ON bench_anatomy.unsecured "));
    const { rows } = await admin.query<{ id: number }>("SELECT core.consumer_id($1) AS id", [BENCH_CONSUMER]);
    await admin.end();
    const url = await consumerLoginUrl(database, BENCH_CONSUMER, cleanups);
    const networks = [{ name: "loopback", url }];
    if (o.rtt > 0) {
      const target = new URL(database.url);
      const proxy = await startLatencyProxy({
        target: { host: target.hostname, port: Number(target.port || 5432) },
        oneWayDelayMs: o.rtt / 2,
      });
      cleanups.push(() => proxy.stop());
      networks.push({ name: `+${o.rtt} ms RTT`, url: proxy.url(url) });
    }
    return { networks, consumerId: rows[0]?.id ?? Number.NaN };
  },
  async run({ options: o, table }, { networks, consumerId }) {
    const summaries: Record<string, Record<string, Summary>> = {};
    for (const network of networks) {
      console.log(`\n${network.name}:`);
      const pool = createPool({ connectionString: network.url, max: o.concurrency });
      const [client, server] = [processCpuMeter(), meterServerCpu(pool)];
      try {
        const rates = await compareVariants(variants(pool, o, consumerId), {
          reps: o.reps,
          jobs: o.jobs,
          log: (line) => console.log(`  ${line}`),
          meters: [client, server],
        });
        summaries[network.name] = Object.fromEntries(
          Object.entries(rates).map(([label, values]) => [
            label,
            {
              rate: spread(values),
              vsBare: ratioSpread(values, rates.bare ?? []),
              client: spread(client.perEffect[label] ?? []),
              server: spread(server.perEffect[label] ?? []),
            },
          ]),
        );
      } finally {
        await pool.end();
      }
    }
    const names = networks.map((n) => n.name);
    table(
      "effects/s, median (min–max), and × bare in the same round",
      ["variant", ...names.flatMap((n) => [n, "× bare"])],
      rateRows(names, summaries),
    );
    // The server's CPU for a job does not depend on the network: every network's rounds are pooled.
    const cpuOf = (label: string, side: "client" | "server") =>
      names.map((n) => summaries[n]?.[label]?.[side].median ?? Number.NaN);
    const shipped = cpuOf("fence as shipped", "server")[0] ?? Number.NaN;
    table(
      "CPU per effect, µs, median over rounds: this process (loopback) and the server (each network); server µs beside the shipped fence",
      ["variant", "client", ...names.map((n) => `server, ${n}`), "server − shipped"],
      Object.keys(summaries[names[0] ?? ""] ?? {}).map((label) => [
        label,
        int(cpuOf(label, "client")[0] ?? Number.NaN),
        ...names.map((n) => showSpread(summaries[n]?.[label]?.server ?? spread([]), int)),
        int((cpuOf(label, "server")[0] ?? Number.NaN) - shipped),
      ]),
    );
    return { summaries };
  },
  verdict: () => ({ targets: [] }),
});
