/**
 * `npm run bench -- --only fence-anatomy`: where the fence's cost comes from, with no harness (so
 * no JavaScript of ours): the same jobs, `--concurrency` connections, each variant one transaction
 * per job, alternated round by round:
 *
 * - `bare`: BEGIN; effect; COMMIT;
 * - `fence as shipped`: the harness's own BEGIN + fence message (`beginWithFences`); effect; the
 *   harness's checked COMMIT (`fenceCommit`, which the fence's deferred trigger requires);
 * - `fence, plain INSERT`: that message without `ON CONFLICT … DO NOTHING` (a duplicate would be a
 *   unique violation): what the speculative insertion costs;
 * - `fence, no expires_at index`: the shipped message into a copy of the table without its
 *   expires_at index: what cleanup's index costs each insert;
 * - `fence as its own statement`: BEGIN, then the fence insert in a message of its own: one more
 *   round trip.
 *
 * The altered variants are made from the shipped message's text (recorded from beginWithFences),
 * so they follow the fence table's columns as they are. Loopback and through the latency proxy.
 */
import pg from "pg";
import { z } from "zod";
import { createPool } from "../../shared/db/pool.ts";
import { beginWithFences, type FenceSet, fenceCommit } from "../../shared/db/queries/begin-with-fences.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { FINGERPRINT_BYTES } from "../../shared/envelope/fingerprint.ts";
import { defineBenchmark } from "../lib/define.ts";
import { type BenchJob, compareVariants, transactionVariant, type Variant } from "../lib/harness-driver.ts";
import { startLatencyProxy } from "../lib/latency-proxy.ts";
import { type RateSummary, rateRows, ratioSpread, spread } from "../lib/report.ts";

const options = z.object({
  jobs: z.coerce.number().int().positive().default(4000).describe("jobs per variant per round"),
  reps: z.coerce.number().int().positive().default(7).describe("measured rounds after a warm-up round"),
  concurrency: z.coerce.number().int().positive().default(8).describe("connections"),
  rtt: z.coerce.number().positive().default(0.5).describe("round-trip time the latency proxy adds, ms"),
});

const FINGERPRINT = Buffer.alloc(FINGERPRINT_BYTES, 0xab);

function fences(job: BenchJob): FenceSet {
  return {
    consumer: "award-points",
    ttlSeconds: 7 * 24 * 3600,
    jobs: [{ ...job, fingerprint: FINGERPRINT }],
  };
}

/** The text beginWithFences sends for `job`: `BEGIN;\n`, the transaction's mark and the INSERT. */
async function shippedText(job: BenchJob): Promise<string> {
  let text = "";
  const recorder = {
    query: async (sql: string) => {
      text = sql;
      return [{}, { rows: [{ scope: "" }] }, { rows: [] }];
    },
  };
  await beginWithFences(recorder as unknown as pg.ClientBase, fences(job));
  return text;
}

function variants(pool: pg.Pool, concurrency: number): Variant[] {
  // Each ends with the checked COMMIT, made from what its messages answered (the mark's scope, the
  // insert's transaction id).
  const altered = (label: string, change: (text: string) => string[]) =>
    transactionVariant(label, pool, concurrency, async (client, job) => {
      const rows: Record<string, unknown>[] = [];
      for (const message of change(await shippedText(job))) {
        const answer = (await client.query(message)) as unknown as pg.QueryResult | pg.QueryResult[];
        for (const result of [answer].flat()) rows.push(...result.rows);
      }
      const scope = rows.find((r) => typeof r.scope === "string")?.scope as string;
      const xid = (rows.find((r) => typeof r.xid === "string")?.xid as string | undefined) ?? null;
      const fresh = new Set(rows.filter((r) => typeof r.job_id === "string").map((r) => r.job_id as string));
      return fenceCommit({ xid, scope, fresh });
    });
  const withoutConflict = (text: string) => text.replace(/\nON CONFLICT[^\n]*DO NOTHING/, "");
  return [
    transactionVariant("bare", pool, concurrency),
    transactionVariant("fence as shipped", pool, concurrency, async (client, job) =>
      fenceCommit(await beginWithFences(client, fences(job))),
    ),
    altered("fence, plain INSERT", (text) => [withoutConflict(text)]),
    altered("fence, no expires_at index", (text) => [
      text.replace("INSERT INTO core.processed_jobs", "INSERT INTO bench_anatomy.fences"),
    ]),
    altered("fence as its own statement", (text) => ["BEGIN", text.replace(/^BEGIN;\n/, "")]),
  ];
}

await defineBenchmark({
  name: "fence-anatomy",
  title: "the fence's cost with no harness: bare, the shipped fence, and the fence altered one way at a time",
  method:
    "one pool (award-points' role, max = concurrency) per network; each variant one transaction per job; fresh jobs per round, order rotated; effects/s = jobs / wall time; ratios per round against bare",
  options,
  quick: { jobs: 300, reps: 3 },
  database: "durable",
  async setup({ database, options: o, cleanups }) {
    const admin = new pg.Client({ connectionString: database.url });
    await admin.connect();
    // The fence table's copy without the expires_at index: same columns, constraints and key.
    const { rows } = await admin.query<{ columns: string }>(
      `SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY array_position(i.indkey, a.attnum)) AS columns
         FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
        WHERE i.indrelid = 'core.processed_jobs'::regclass AND i.indisprimary`,
    );
    await admin.query(`CREATE SCHEMA bench_anatomy;
      CREATE TABLE bench_anatomy.fences (LIKE core.processed_jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
      ALTER TABLE bench_anatomy.fences ADD PRIMARY KEY (${rows[0]?.columns});
      GRANT USAGE ON SCHEMA bench_anatomy TO ${consumerRoleName("award-points")};
      GRANT SELECT, INSERT ON bench_anatomy.fences TO ${consumerRoleName("award-points")};`);
    await admin.end();
    const target = new URL(database.url);
    const proxy = await startLatencyProxy({
      target: { host: target.hostname, port: Number(target.port || 5432) },
      oneWayDelayMs: o.rtt / 2,
    });
    cleanups.push(() => proxy.stop());
    return [
      { name: "loopback", url: database.url },
      { name: `+${o.rtt} ms RTT`, url: proxy.url(database.url) },
    ];
  },
  async run({ options: o, table }, networks) {
    const summaries: Record<string, Record<string, RateSummary>> = {};
    for (const network of networks) {
      console.log(`\n${network.name}:`);
      const pool = createPool({
        connectionString: network.url,
        role: consumerRoleName("award-points"),
        max: o.concurrency,
      });
      try {
        const rates = await compareVariants(variants(pool, o.concurrency), {
          reps: o.reps,
          jobs: o.jobs,
          log: (line) => console.log(`  ${line}`),
        });
        const bare = rates.bare ?? [];
        summaries[network.name] = Object.fromEntries(
          Object.entries(rates).map(([label, values]) => [
            label,
            { rate: spread(values), vsBare: ratioSpread(values, bare) },
          ]),
        );
      } finally {
        await pool.end();
      }
    }
    table(
      "effects/s, median (min–max), and × bare in the same round",
      ["variant", ...networks.flatMap((n) => [n.name, "× bare"])],
      rateRows(
        networks.map((n) => n.name),
        summaries,
      ),
    );
    return { summaries };
  },
  verdict: () => ({ targets: [] }),
});
