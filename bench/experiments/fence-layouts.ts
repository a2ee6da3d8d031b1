/**
 * `npm run bench -- --only fence-layouts`: which layout of the fence table meets the issue's ≤ 200
 * bytes per row, indexes included, at 1,000,000 rows with 36-character job ids, and what each
 * costs in function; it chose the shipped one (migration 0016), which bench/fence-storage.ts
 * holds to the target. Measured the way that benchmark measures the shipped table, beside it.
 *
 * - Database: DATABASE_URL when set (a fresh database beside it, dropped at the end), otherwise an
 *   embedded PostgreSQL (`fast` durability: durability does not change sizes).
 * - Seed (bench/fence-storage/seed.ts): the shipped `core.processed_jobs`, migrated, with its
 *   indexes in place, as bench/fence-storage.ts seeds it; its sizes and checks are the reference
 *   row.
 * - Candidates (bench/experiments/fence-layouts/candidates.ts): each a table in a scratch schema,
 *   created with its indexes, then filled from the seeded table in insertion order (ORDER BY
 *   expires_at), so its indexes grow as the real one's did; some are REINDEXed afterwards (the best
 *   case, right after a rebuild). `current` is the shipped layout filled with new random job ids: a
 *   second sample of where b-tree pages split, i.e. of how reproducible the figures are (the same
 *   ids in the same order split identically). Each is VACUUM ANALYZEd.
 * - Sizes (bench/fence-storage/sizes.ts): heap, FSM + visibility map, TOAST, each index, total, per
 *   row; b-tree leaf density from pgstattuple when the extension is available.
 * - Function, per layout (bench/fence-storage/checks.ts): the fence insert's duplicate detection as
 *   the harness runs it, adapted to the layout's columns, with an existing and a new key (rolled
 *   back), and the harness's statement unchanged (does the layout need code changes?); a
 *   concurrent duplicate (B inserts a key A holds uncommitted, then A commits: B must wait, then
 *   get no row); the replay path's lookup by job_id and consumer (plan, median of 5); TTL cleanup's
 *   batch query at a backlog of half the table (plan, median of 5 after a warm-up, rolled back).
 * - Repetitions: one measurement per layout, no warm-up (sizes do not warm up). Random job ids
 *   decide where a primary key's pages split: its leaf density, ~70 %, varies by a few percent
 *   from seed to seed (±1–3 % of the total at 1,000,000 rows, more at 100,000), so a layout within
 *   a few bytes of the target is on the line; `shipped` and `current` are two such samples.
 *   Building time is no figure.
 */
import { performance } from "node:perf_hooks";
import { z } from "zod";
import {
  type Functional,
  QUERIES_HEADERS,
  QUERIES_TITLE,
  queriesRow,
  SEMANTICS_HEADERS,
  SEMANTICS_TITLE,
  semanticsRow,
  shippedInsert,
} from "../fence-storage/checks.ts";
import { prepareSeededTable } from "../fence-storage/prepare.ts";
import {
  progressLine,
  SIZE_HEADERS,
  type Sizes,
  sizeRow,
  sizesOf,
  sizesTitle,
} from "../fence-storage/sizes.ts";
import { defineBenchmark } from "../lib/define.ts";
import { int } from "../lib/report.ts";
import { CANDIDATES, type Candidate } from "./fence-layouts/candidates.ts";
import { createScratch, SCRATCH } from "./fence-layouts/scratch.ts";

const TARGET_BYTES_PER_ROW = 200;
const NAMES = CANDIDATES.map((c) => c.name);

const options = z.object({
  rows: z.coerce
    .number()
    .int()
    .positive()
    .default(1_000_000)
    .describe("fences seeded, and in each candidate"),
  only: z
    .array(
      z.string().refine((name) => NAMES.includes(name), {
        error: (issue) => `unknown layout ${String(issue.input)}; known: ${NAMES.join(", ")}`,
      }),
    )
    .default(NAMES)
    .describe("candidate layouts to build, by name, comma-separated"),
});

interface LayoutResult {
  readonly name: string;
  readonly summary: string;
  readonly table: string;
  readonly build_ms: number;
  readonly sizes: Sizes;
  readonly functional: Functional;
  readonly meets_target: boolean;
  readonly costs: string;
}

/** What measuring a layout needs to know of it; the shipped table's, then each candidate's. */
type Layout = Pick<Candidate, "name" | "summary" | "insert" | "costs">;

const SHIPPED: Layout = {
  name: "shipped",
  summary: "core.processed_jobs as migrated (0016), seeded with its indexes in place",
  insert: shippedInsert,
  costs: "none (as shipped)",
};

const b = (v: number) => v.toFixed(1);

await defineBenchmark({
  name: "fence-layouts",
  title: "candidate fence table layouts: bytes per row including indexes, and what each does to the fence",
  method:
    "seed N fences into the migrated table as bench/fence-storage.ts does, VACUUM (ANALYZE); candidates are scratch tables " +
    "created with their indexes and filled from it in insertion order (some REINDEXed), VACUUM (ANALYZE); sizes from " +
    "pg_relation_size / pg_table_size / pg_indexes_size / pg_total_relation_size, leaf density from pgstatindex; per layout the " +
    "fence insert (existing key, new key, the harness's statement unchanged), a concurrent duplicate, the replay lookup's plan and " +
    "time, a cleanup batch at a backlog of half the table (median of 5 rolled-back runs after one warm-up); one measurement per " +
    "layout (random ids move b-tree split positions: 'shipped' and 'current' are two samples)",
  options,
  // All the candidates at 50,000 rows: --quick stays under a minute.
  quick: { rows: 50_000 },
  database: "fast",
  settings: ["block_size", "server_encoding"],
  async setup({ options: o, database, cleanups }) {
    const prepared = await prepareSeededTable(database.url, "layouts", o.rows, cleanups);
    await createScratch(prepared.db, cleanups);
    return prepared;
  },
  async run({ options: o, table }, { db, pgstattuple, seeded, check }) {
    const results: LayoutResult[] = [];
    const measure = async (layout: Layout, t: string, buildMs: number) => {
      const sizes = await sizesOf(db, t, pgstattuple);
      console.log(progressLine(layout.name, sizes, buildMs));
      results.push({
        name: layout.name,
        summary: layout.summary,
        table: t,
        build_ms: Math.round(buildMs),
        sizes,
        functional: await check(t, layout.insert),
        meets_target: sizes.per_row.total <= TARGET_BYTES_PER_ROW,
        costs: layout.costs,
      });
    };
    await measure(SHIPPED, "core.processed_jobs", seeded.seedMs);
    for (const candidate of CANDIDATES.filter((c) => o.only.includes(c.name))) {
      const t = `${SCRATCH}.bench_${candidate.name.replace(/[^a-z0-9]+/g, "_")}`;
      const t0 = performance.now();
      for (const ddl of candidate.create(t)) await db.query(ddl);
      await db.query(candidate.fill(t));
      for (const ddl of candidate.after?.(t) ?? []) await db.query(ddl);
      await db.query(`VACUUM (ANALYZE) ${t}`);
      await measure(candidate, t, performance.now() - t0);
    }

    table(
      sizesTitle(o.rows, TARGET_BYTES_PER_ROW),
      SIZE_HEADERS,
      results.map((r) => sizeRow(r.name, r.sizes, TARGET_BYTES_PER_ROW)),
    );
    table(
      SEMANTICS_TITLE,
      SEMANTICS_HEADERS,
      results.map((r) => semanticsRow(r.name, r.functional)),
    );
    table(
      QUERIES_TITLE,
      QUERIES_HEADERS,
      results.map((r) => queriesRow(r.name, r.functional)),
    );
    // Prose, not a table: the result file has each in its layout's `costs`.
    console.log("\nwhat each candidate costs besides the figures above:");
    for (const r of results.slice(1)) console.log(`  ${r.name}: ${r.costs}`);
    return { rows: o.rows, cleanup_cutoff: seeded.cutoff, layouts: results };
  },
  verdict({ rows, layouts }) {
    const shipped = layouts.find((r) => r.name === "shipped");
    const copy = layouts.find((r) => r.name === "current");
    const bare = layouts.find((r) => r.name === "no-fingerprint");
    const notes: string[] = [];
    if (shipped && copy) {
      notes.push(
        `shipped ${b(shipped.sizes.per_row.total)} and current (the same layout, new random ids) ` +
          `${b(copy.sizes.per_row.total)} bytes/row: two samples of where the primary key splits`,
      );
    }
    if (copy && bare) {
      notes.push(
        `the fingerprint's share: ${b(copy.sizes.per_row.heap - bare.sizes.per_row.heap)} bytes/row of the heap ` +
          `(the same rows without it: ${b(bare.sizes.per_row.total)})`,
      );
    }
    return {
      targets: layouts.map((r) => ({
        name: `${r.name}, bytes per row at ${int(rows)} rows`,
        measured: r.sizes.per_row.total,
        bound: "at most" as const,
        target: TARGET_BYTES_PER_ROW,
        format: b,
      })),
      notes,
    };
  },
});
