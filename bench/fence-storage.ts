/**
 * `node bench/fence-storage.ts`: what one fence costs on disk. The issue's target: ≤ 200 bytes
 * per `core.processed_jobs` row, indexes included, at 1,000,000 rows with 36-character job ids;
 * index types are to be chosen accordingly, so candidate layouts are measured beside the shipped one.
 *
 * - Database: DATABASE_URL when set (a fresh database is created beside it and dropped at the end),
 *   otherwise an embedded PostgreSQL (`fast` durability: durability does not change sizes).
 * - Seed: set-based (INSERT … SELECT FROM generate_series, chunks of 100,000) into the migrated
 *   `core.processed_jobs` with its indexes in place, so they grow as they do in production (a
 *   rebuilt index is denser; that case is measured separately): job_id a random UUID as text
 *   (36 characters, random order in the primary key), consumer `award-points`, tenant
 *   `tenant-000`…`tenant-049`, a 16-byte fingerprint (as the harness writes one), processed_at rising with insertion order over the last 7 days
 *   (unique: the per-record commit mode), expires_at as the harness writes it (the start of
 *   processed_at's minute + 7 days + 1 minute: shared/db/queries/begin-with-fences.ts). Nothing is expired: the steady state of a table whose cleanup keeps up. Then VACUUM (ANALYZE).
 * - Sizes: heap = main fork (`pg_relation_size`), FSM + visibility map, TOAST (its table and index),
 *   each index (`pg_relation_size` of the index; their sum is `pg_indexes_size`), total =
 *   `pg_total_relation_size`; bytes per row = size / rows. B-tree leaf density from pgstattuple
 *   when the extension is available.
 * - Candidates: each a `bench_storage.bench_*` table in a scratch schema (no migration is touched),
 *   created with its indexes, then filled from the seeded table in insertion order (ORDER BY
 *   expires_at), so its indexes grow as the real one's did; some are REINDEXed afterwards (the best
 *   case, right after a rebuild). `current` is the shipped layout filled with new random job ids:
 *   a second sample of where b-tree pages split, i.e. of how reproducible the figures are (the same
 *   ids in the same order split identically). Each is VACUUM ANALYZEd.
 * - Function, per candidate: (1) the fence insert's duplicate detection, run as the harness runs it
 *   (INSERT … ON CONFLICT (job_id, consumer) DO NOTHING RETURNING 1, adapted to the layout's
 *   columns) with an existing and a new key, rolled back, the harness's statement unchanged (does
 *   the layout need code changes?), and a concurrent duplicate (B inserts a key A holds uncommitted,
 *   then A commits: B must wait, then get no row); (2) the replay path's lookup of one fence by
 *   job_id and consumer (plan, median of 5); (3) TTL cleanup's batch query, the inner
 *   SELECT of core.delete_expired_fences (migration 0005: WHERE expires_at < cutoff ORDER BY
 *   expires_at LIMIT CLEANUP_DEFAULTS.batchSize FOR UPDATE SKIP LOCKED), with the cutoff at the
 *   median expires_at (a backlog of half the table), in a rolled-back transaction: plan nodes and
 *   the median of 5 timed runs after one warm-up run.
 * - Repetitions: one measurement per layout, no warm-up (sizes do not warm up). Sizes are
 *   deterministic for given rows in a given order, but random job ids decide where the primary key's
 *   pages split: its leaf density, ~70 %, varies by a few percent from seed to seed (seen: ±1–3 %
 *   of the total at 1,000,000 rows, more at 100,000), so a layout within a few bytes of the target
 *   is on the line. `shipped` and `current` are two such samples. Seeding time is no figure.
 *
 * Options: `--rows N` (default 1,000,000), `--quick` (100,000 rows; < 20 s), `--only a,b` (candidates
 * by name; `none` for the shipped table only). Exits 0 whatever the figures (it is a benchmark);
 * prints a VERDICT line and writes bench/results/fence-storage.json.
 */
import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import pg from "pg";
import { CLEANUP_DEFAULTS } from "../shared/fence/cleanup.ts";
import { describeEnvironment, int, median, ms, round2, secs, table, writeResult } from "./report.ts";
import { at, benchDatabase, createCleanups, positiveInt, runBenchmark } from "./support.ts";

// ---------------------------------------------------------------------------------------------
// Options

const { values: argv } = parseArgs({
  options: {
    rows: { type: "string" },
    quick: { type: "boolean", default: false },
    only: { type: "string" },
    help: { type: "boolean", default: false },
  },
});

if (argv.help) {
  console.log(
    "usage: node bench/fence-storage.ts [--quick | --rows N] [--only current,brin,…|none]\n" +
      "  DATABASE_URL  admin URL of a PostgreSQL to use (a fresh database is created beside it);\n" +
      "                unset: an embedded PostgreSQL is started",
  );
  process.exit(0);
}

const QUICK = argv.quick;
const ROWS = positiveInt(argv.rows, QUICK ? 100_000 : 1_000_000, "rows");
const TARGET_BYTES_PER_ROW = 200;
const SEED_CHUNK = 100_000;
const TTL = "7 days";
const CONSUMER = "award-points";
const BATCH = CLEANUP_DEFAULTS.batchSize;
const CLEANUP_RUNS = 5;
const SCRATCH = "bench_storage";

// ---------------------------------------------------------------------------------------------
// Candidate layouts

/** How a candidate's fence insert looks, for the duplicate check. */
interface FenceInsert {
  /** Returns 1 row when inserted, none for a duplicate. `$1` job id, `$2` tenant id. */
  readonly sql: (table: string) => string;
  /**
   * A fence looked up by job id and consumer, as the replay queries do (shared/db/queries/replay-queries.ts).
   * @default job_id = $1 AND consumer = the consumer's name
   */
  readonly lookup?: (table: string) => string;
}

const textLookup = (t: string) => `SELECT 1 FROM ${t} WHERE job_id = $1 AND consumer = '${CONSUMER}'`;
const idLookup = (t: string) =>
  `SELECT 1 FROM ${t} WHERE job_id = $1 AND consumer_id = (SELECT id FROM ${SCRATCH}.consumers WHERE name = '${CONSUMER}')`;

interface Candidate {
  readonly name: string;
  readonly summary: string;
  /** DDL creating `table` with its indexes (before the fill). */
  readonly create: (table: string) => string[];
  /** INSERT … SELECT filling `table` from core.processed_jobs in insertion order. */
  readonly fill: (table: string) => string;
  /** DDL after the fill (REINDEX). */
  readonly after?: (table: string) => string[];
  readonly insert: FenceInsert;
  /** What the layout costs in function, besides what is measured. */
  readonly costs: string;
}

const textConsumerInsert: FenceInsert = {
  sql: (t) => `INSERT INTO ${t} (job_id, consumer, tenant_id, processed_at, expires_at)
    VALUES ($1, '${CONSUMER}', $2, now(), date_trunc('minute', now()) + interval '${TTL}' + interval '1 minute')
    ON CONFLICT (job_id, consumer) DO NOTHING RETURNING 1`,
};

const fillAll = (t: string) =>
  `INSERT INTO ${t} (job_id, consumer, tenant_id, processed_at, expires_at)
   SELECT job_id, consumer, tenant_id, processed_at, expires_at FROM core.processed_jobs ORDER BY expires_at`;

/** The shipped job id check, for layouts written out column by column. */
const JOB_ID_CHECK = "CHECK (char_length(job_id) BETWEEN 1 AND 255)";

const likeCore = (t: string) =>
  `CREATE TABLE ${t} (LIKE core.processed_jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`;

const CANDIDATES: readonly Candidate[] = [
  {
    name: "current",
    summary: "shipped layout rebuilt with new random job ids: a second sample of b-tree split positions",
    create: (t) => [`CREATE TABLE ${t} (LIKE core.processed_jobs INCLUDING ALL)`],
    fill: (t) =>
      `INSERT INTO ${t} (job_id, consumer, tenant_id, fingerprint, processed_at, expires_at)
       SELECT gen_random_uuid()::text, consumer, tenant_id, fingerprint, processed_at, expires_at
         FROM core.processed_jobs ORDER BY expires_at`,
    insert: textConsumerInsert,
    costs: "none (as shipped)",
  },
  {
    name: "no-fingerprint",
    summary:
      "the shipped layout before fences carried a fingerprint (what the fingerprint costs); the candidates below are measured without one too, and each would carry the same cost",
    create: (t) => [
      `CREATE TABLE ${t} (LIKE core.processed_jobs INCLUDING ALL)`,
      `ALTER TABLE ${t} DROP COLUMN fingerprint`,
    ],
    fill: fillAll,
    insert: textConsumerInsert,
    costs: "no conflict detection: a second job under an applied job's id is a silent duplicate",
  },
  {
    name: "current-reindexed",
    summary: "shipped layout, REINDEXed after the fill (b-trees at fillfactor 90)",
    create: (t) => [`CREATE TABLE ${t} (LIKE core.processed_jobs INCLUDING ALL)`],
    fill: fillAll,
    after: (t) => [`REINDEX TABLE ${t}`],
    insert: textConsumerInsert,
    costs:
      "a periodic REINDEX CONCURRENTLY; the gain is transient: random job ids split the packed PK pages again",
  },
  {
    name: "ff100",
    summary: "b-trees WITH (fillfactor = 100), grown by inserts",
    create: (t) => [
      likeCore(t),
      `ALTER TABLE ${t} ADD PRIMARY KEY (job_id, consumer) WITH (fillfactor = 100)`,
      `CREATE INDEX ON ${t} (expires_at) WITH (fillfactor = 100)`,
    ],
    fill: fillAll,
    insert: textConsumerInsert,
    costs:
      "none in function; fillfactor only changes rightmost (ascending) splits and rebuilds, so only the expires_at index shrinks",
  },
  {
    name: "ff100-reindexed",
    summary: "b-trees WITH (fillfactor = 100), REINDEXed after the fill",
    create: (t) => [
      likeCore(t),
      `ALTER TABLE ${t} ADD PRIMARY KEY (job_id, consumer) WITH (fillfactor = 100)`,
      `CREATE INDEX ON ${t} (expires_at) WITH (fillfactor = 100)`,
    ],
    fill: fillAll,
    after: (t) => [`REINDEX TABLE ${t}`],
    insert: textConsumerInsert,
    costs:
      "the floor of the shipped columns; the first insert into a full leaf splits it, so it does not last",
  },
  {
    name: "brin",
    summary: "BRIN (expires_at) instead of the btree",
    create: (t) => [
      likeCore(t),
      `ALTER TABLE ${t} ADD PRIMARY KEY (job_id, consumer)`,
      `CREATE INDEX ON ${t} USING brin (expires_at)`,
    ],
    fill: fillAll,
    insert: textConsumerInsert,
    costs:
      "BRIN has no order: cleanup's ORDER BY expires_at LIMIT n becomes a scan of every expired row plus a top-N sort per batch " +
      "(quadratic in the backlog); ranges only widen, so once cleanup frees pages and new fences reuse them, every range " +
      "covers old expiries and the index stops excluding anything; new ranges need brin_summarize_new_values (autosummarize off by default)",
  },
  {
    name: "no-processed-at",
    summary: "processed_at dropped (expires_at kept)",
    create: (t) => [
      `CREATE TABLE ${t} (job_id text NOT NULL, consumer text NOT NULL, tenant_id text NOT NULL,
        expires_at timestamptz NOT NULL, PRIMARY KEY (job_id, consumer), ${JOB_ID_CHECK})`,
      `CREATE INDEX ON ${t} (expires_at)`,
    ],
    fill: (t) =>
      `INSERT INTO ${t} (job_id, consumer, tenant_id, expires_at)
       SELECT job_id, consumer, tenant_id, expires_at FROM core.processed_jobs ORDER BY expires_at`,
    insert: {
      sql: (t) => `INSERT INTO ${t} (job_id, consumer, tenant_id, expires_at)
        VALUES ($1, '${CONSUMER}', $2, now() + interval '${TTL}')
        ON CONFLICT (job_id, consumer) DO NOTHING RETURNING 1`,
    },
    costs:
      "loses when the job committed (not derivable: the TTL is per consumer and configurable) and the CHECK expires_at > processed_at; " +
      "a migration plus insert changes (shared/db/queries/begin-with-fences.ts)",
  },
  {
    name: "consumer-smallint",
    summary: "consumer as smallint id (FK to a consumers table)",
    create: (t) => [
      `CREATE TABLE ${t} (job_id text NOT NULL, consumer_id smallint NOT NULL REFERENCES ${SCRATCH}.consumers (id),
        tenant_id text NOT NULL, processed_at timestamptz NOT NULL DEFAULT now(), expires_at timestamptz NOT NULL,
        PRIMARY KEY (job_id, consumer_id), ${JOB_ID_CHECK}, CHECK (expires_at > processed_at))`,
      `CREATE INDEX ON ${t} (expires_at)`,
    ],
    fill: (t) =>
      `INSERT INTO ${t} (job_id, consumer_id, tenant_id, processed_at, expires_at)
       SELECT p.job_id, c.id, p.tenant_id, p.processed_at, p.expires_at
         FROM core.processed_jobs p JOIN ${SCRATCH}.consumers c ON c.name = p.consumer ORDER BY p.expires_at`,
    insert: {
      sql: (t) => `INSERT INTO ${t} (job_id, consumer_id, tenant_id, processed_at, expires_at)
        VALUES ($1, (SELECT id FROM ${SCRATCH}.consumers WHERE name = '${CONSUMER}'), $2, now(), now() + interval '${TTL}')
        ON CONFLICT (job_id, consumer_id) DO NOTHING RETURNING 1`,
      lookup: idLookup,
    },
    costs:
      "a consumers table (a row per consumer, registered by its migration set) and a lookup in the insert; replay and ops " +
      "queries join it; an FK check per insert",
  },
  {
    name: "consumer-enum",
    summary: "consumer as an enum (4 bytes)",
    create: (t) => [
      `CREATE TABLE ${t} (job_id text NOT NULL, consumer ${SCRATCH}.consumer_name NOT NULL,
        tenant_id text NOT NULL, processed_at timestamptz NOT NULL DEFAULT now(), expires_at timestamptz NOT NULL,
        PRIMARY KEY (job_id, consumer), ${JOB_ID_CHECK}, CHECK (expires_at > processed_at))`,
      `CREATE INDEX ON ${t} (expires_at)`,
    ],
    fill: (t) =>
      `INSERT INTO ${t} (job_id, consumer, tenant_id, processed_at, expires_at)
       SELECT job_id, consumer::${SCRATCH}.consumer_name, tenant_id, processed_at, expires_at
         FROM core.processed_jobs ORDER BY expires_at`,
    insert: {
      sql: (t) => `INSERT INTO ${t} (job_id, consumer, tenant_id, processed_at, expires_at)
        VALUES ($1, '${CONSUMER}', $2, now(), date_trunc('minute', now()) + interval '${TTL}' + interval '1 minute')
        ON CONFLICT (job_id, consumer) DO NOTHING RETURNING 1`,
    },
    costs:
      "every new consumer is DDL in core (ALTER TYPE … ADD VALUE) run by the migrator; a value can never be removed",
  },
  {
    name: "hash-exclusion",
    summary: "EXCLUDE USING hash ((job_id || '/' || consumer) WITH =) instead of the btree PK",
    create: (t) => [
      `${likeCore(t)}`,
      `ALTER TABLE ${t} ADD EXCLUDE USING hash ((job_id || '/' || consumer) WITH =)`,
      `CREATE INDEX ON ${t} (expires_at)`,
    ],
    fill: fillAll,
    insert: {
      sql: (t) => `INSERT INTO ${t} (job_id, consumer, tenant_id, processed_at, expires_at)
        VALUES ($1, '${CONSUMER}', $2, now(), date_trunc('minute', now()) + interval '${TTL}' + interval '1 minute')
        ON CONFLICT DO NOTHING RETURNING 1`,
    },
    costs:
      "a hash index cannot be UNIQUE (no PK); uniqueness only through an exclusion constraint, which ON CONFLICT (job_id, consumer) " +
      "cannot infer: the insert must become a bare ON CONFLICT DO NOTHING (every constraint an arbiter); single-column " +
      "only, hence the concatenated key (unambiguous because consumer names are [a-z0-9-]); lookups by " +
      "job_id and consumer (the replay path, replay-queries.ts) cannot use it and scan the table unless rewritten to " +
      "the key expression; a hash index's size steps with its bucket splits",
  },
  {
    name: "expires-minute",
    summary: "expires_at rounded up to the minute: the btree deduplicates equal keys",
    create: (t) => [`CREATE TABLE ${t} (LIKE core.processed_jobs INCLUDING ALL)`],
    fill: (t) =>
      `INSERT INTO ${t} (job_id, consumer, tenant_id, processed_at, expires_at)
       SELECT job_id, consumer, tenant_id, processed_at, date_trunc('minute', expires_at) + interval '1 minute'
         FROM core.processed_jobs ORDER BY expires_at`,
    insert: {
      sql: (t) => `INSERT INTO ${t} (job_id, consumer, tenant_id, processed_at, expires_at)
        VALUES ($1, '${CONSUMER}', $2, now(), date_trunc('minute', now() + interval '${TTL}') + interval '1 minute')
        ON CONFLICT (job_id, consumer) DO NOTHING RETURNING 1`,
    },
    costs:
      "fences live up to a minute longer (harmless: expiry only moves later); the gain depends on the rate " +
      "(fences per minute share a key); the insert SQL changes",
  },
  {
    name: "smallint+minute",
    summary: "consumer smallint id + expires_at rounded up to the minute",
    create: (t) => [
      `CREATE TABLE ${t} (job_id text NOT NULL, consumer_id smallint NOT NULL REFERENCES ${SCRATCH}.consumers (id),
        tenant_id text NOT NULL, processed_at timestamptz NOT NULL DEFAULT now(), expires_at timestamptz NOT NULL,
        PRIMARY KEY (job_id, consumer_id), ${JOB_ID_CHECK}, CHECK (expires_at > processed_at))`,
      `CREATE INDEX ON ${t} (expires_at)`,
    ],
    fill: (t) =>
      `INSERT INTO ${t} (job_id, consumer_id, tenant_id, processed_at, expires_at)
       SELECT p.job_id, c.id, p.tenant_id, p.processed_at, date_trunc('minute', p.expires_at) + interval '1 minute'
         FROM core.processed_jobs p JOIN ${SCRATCH}.consumers c ON c.name = p.consumer ORDER BY p.expires_at`,
    insert: {
      sql: (t) => `INSERT INTO ${t} (job_id, consumer_id, tenant_id, processed_at, expires_at)
        VALUES ($1, (SELECT id FROM ${SCRATCH}.consumers WHERE name = '${CONSUMER}'), $2, now(),
                date_trunc('minute', now() + interval '${TTL}') + interval '1 minute')
        ON CONFLICT (job_id, consumer_id) DO NOTHING RETURNING 1`,
      lookup: idLookup,
    },
    costs: "both of consumer-smallint's and expires-minute's",
  },
  {
    name: "smallint+no-processed-at",
    summary: "consumer smallint id + processed_at dropped",
    create: (t) => [
      `CREATE TABLE ${t} (job_id text NOT NULL, consumer_id smallint NOT NULL REFERENCES ${SCRATCH}.consumers (id),
        tenant_id text NOT NULL, expires_at timestamptz NOT NULL, PRIMARY KEY (job_id, consumer_id), ${JOB_ID_CHECK})`,
      `CREATE INDEX ON ${t} (expires_at)`,
    ],
    fill: (t) =>
      `INSERT INTO ${t} (job_id, consumer_id, tenant_id, expires_at)
       SELECT p.job_id, c.id, p.tenant_id, p.expires_at
         FROM core.processed_jobs p JOIN ${SCRATCH}.consumers c ON c.name = p.consumer ORDER BY p.expires_at`,
    insert: {
      sql: (t) => `INSERT INTO ${t} (job_id, consumer_id, tenant_id, expires_at)
        VALUES ($1, (SELECT id FROM ${SCRATCH}.consumers WHERE name = '${CONSUMER}'), $2, now() + interval '${TTL}')
        ON CONFLICT (job_id, consumer_id) DO NOTHING RETURNING 1`,
      lookup: idLookup,
    },
    costs: "both of consumer-smallint's and no-processed-at's",
  },
];

const ONLY = argv.only === undefined ? undefined : argv.only === "none" ? [] : argv.only.split(",");
const unknownNames = (ONLY ?? []).filter((n) => !CANDIDATES.some((c) => c.name === n));
if (unknownNames.length > 0) {
  console.error(
    `--only: unknown ${unknownNames.join(", ")}; known: ${CANDIDATES.map((c) => c.name).join(", ")}`,
  );
  process.exit(2);
}
const SELECTED = CANDIDATES.filter((c) => !ONLY || ONLY.includes(c.name));

// ---------------------------------------------------------------------------------------------
// SQL

const SEED_CHUNK_SQL = `
INSERT INTO core.processed_jobs (job_id, consumer, tenant_id, fingerprint, processed_at, expires_at)
SELECT gen_random_uuid()::text, $1::text, 'tenant-' || lpad((i % 50)::text, 3, '0'),
       encode(substring(sha256(convert_to(i::text, 'UTF8')) FROM 1 FOR 16), 'hex')::uuid, p,
       date_trunc('minute', p) + interval '${TTL}' + interval '1 minute'
  FROM (SELECT i, $2::timestamptz + make_interval(secs => i * $3::float8) AS p
          FROM generate_series($4::bigint, $5::bigint) AS i) AS s`;

/** The inner SELECT of core.delete_expired_fences (migration 0005), with `now()` as `$1`. */
const cleanupBatchSql = (t: string) => `
SELECT ctid FROM ${t}
 WHERE expires_at < $1
 ORDER BY expires_at
 LIMIT ${BATCH}
   FOR UPDATE SKIP LOCKED`;

// ---------------------------------------------------------------------------------------------
// Measurement

interface IndexSize {
  readonly name: string;
  readonly method: string;
  readonly bytes: number;
  readonly bytes_per_row: number;
  /** pgstatindex's avg_leaf_density (b-tree only), percent. */
  readonly leaf_density_pct: number | null;
}

interface Sizes {
  readonly rows: number;
  readonly heap_bytes: number;
  readonly fsm_vm_bytes: number;
  readonly toast_bytes: number;
  readonly indexes_bytes: number;
  readonly total_bytes: number;
  readonly heap_pages: number;
  readonly rows_per_heap_page: number;
  readonly indexes: readonly IndexSize[];
  readonly per_row: {
    readonly heap: number;
    readonly fsm_vm: number;
    readonly toast: number;
    readonly indexes: number;
    readonly total: number;
  };
}

interface Functional {
  /** The harness's own fence insert, unchanged, with an existing key: "no row (duplicate)" or the error. */
  readonly harness_sql_unchanged: string;
  /** The layout's insert (adapted where it must be) with an existing key. */
  readonly duplicate_detected: string;
  /** …and with a new key. */
  readonly new_key_inserted: string;
  /** A second transaction inserting a key a first one holds uncommitted: waited, then no row? */
  readonly concurrent_duplicate: string;
  /** The replay path's lookup of one fence: plan and median time. */
  readonly lookup_plan: string;
  readonly lookup_ms: number;
  readonly cleanup_plan: string;
  readonly cleanup_batch_ms: number;
  readonly cleanup_batch_rows: number;
}

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

const cleanups = createCleanups();

async function main(): Promise<void> {
  const started = performance.now();
  console.log(
    `jobfence fence storage: ${int(ROWS)} fences, 36-character job ids; target ≤ ${TARGET_BYTES_PER_ROW} bytes/row ` +
      `with indexes; ${SELECTED.length} candidate layout(s)${QUICK ? " (--quick)" : ""}`,
  );
  const database = await benchDatabase("fast", cleanups);
  console.log(`database: ${database.serverKind}`);
  const db = new pg.Client({ connectionString: database.url, application_name: "jobfence-bench-storage" });
  await db.connect();
  cleanups.push(() => db.end());
  await db.query("SET maintenance_work_mem = '256MB'");
  const one = async <R extends pg.QueryResultRow>(sql: string, values: unknown[] = []): Promise<R> =>
    at((await db.query<R>(sql, values)).rows, 0);

  let pgstattuple = true;
  try {
    await db.query("CREATE EXTENSION IF NOT EXISTS pgstattuple");
  } catch {
    pgstattuple = false;
  }
  const environment = await describeEnvironment(db, database.serverKind, ["block_size", "server_encoding"]);
  console.log(
    `PostgreSQL ${environment.postgres}, Node ${environment.node}, ${environment.cores} cores; ` +
      `pgstattuple ${pgstattuple ? "available (leaf density shown)" : "not available"}`,
  );

  // --- seed the shipped table ---------------------------------------------------------------
  const seedStart = performance.now();
  const base = new Date(Date.now() - 7 * 86_400_000);
  const step = (7 * 86_400) / ROWS;
  for (let lo = 0; lo < ROWS; lo += SEED_CHUNK) {
    const hi = Math.min(ROWS, lo + SEED_CHUNK) - 1;
    await db.query(SEED_CHUNK_SQL, [CONSUMER, base, step, lo, hi]);
  }
  await db.query("VACUUM (ANALYZE) core.processed_jobs");
  const seedMs = performance.now() - seedStart;
  console.log(`seeded core.processed_jobs: ${int(ROWS)} rows in ${secs(seedMs)} (with VACUUM ANALYZE)`);

  // The cleanup batches run as if now() were the median expiry: half the table is backlog.
  const cutoff = (
    await one<{ e: Date }>(
      "SELECT expires_at AS e FROM core.processed_jobs ORDER BY expires_at OFFSET $1 LIMIT 1",
      [Math.floor(ROWS / 2)],
    )
  ).e;

  const sizesOf = async (t: string): Promise<Sizes> => {
    const s = await one<{
      rows: string;
      heap: string;
      table_size: string;
      toast: string;
      indexes: string;
      total: string;
      pages: number;
    }>(
      `SELECT (SELECT count(*) FROM ${t})::text AS rows,
              pg_relation_size(c.oid)::text AS heap,
              pg_table_size(c.oid)::text AS table_size,
              COALESCE(pg_total_relation_size(NULLIF(c.reltoastrelid, 0)), 0)::text AS toast,
              pg_indexes_size(c.oid)::text AS indexes,
              pg_total_relation_size(c.oid)::text AS total,
              (pg_relation_size(c.oid) / current_setting('block_size')::int)::int AS pages
         FROM pg_class c WHERE c.oid = $1::regclass`,
      [t],
    );
    const rows = Number(s.rows);
    const indexRows = (
      await db.query<{ name: string; method: string; bytes: string }>(
        `SELECT ic.relname AS name, am.amname AS method, pg_relation_size(i.indexrelid)::text AS bytes
           FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam
          WHERE i.indrelid = $1::regclass ORDER BY ic.relname`,
        [t],
      )
    ).rows;
    const indexes: IndexSize[] = [];
    for (const r of indexRows) {
      let density: number | null = null;
      if (pgstattuple && r.method === "btree") {
        const schema = t.split(".")[0] ?? "core";
        density = Number(
          (
            await one<{ d: string }>("SELECT avg_leaf_density::text AS d FROM pgstatindex($1)", [
              `${schema}.${r.name}`,
            ])
          ).d,
        );
      }
      indexes.push({
        name: r.name,
        method: r.method,
        bytes: Number(r.bytes),
        bytes_per_row: round2(Number(r.bytes) / rows),
        leaf_density_pct: density,
      });
    }
    const heap = Number(s.heap);
    const toast = Number(s.toast);
    const fsmVm = Number(s.table_size) - heap - toast;
    const total = Number(s.total);
    const indexesBytes = Number(s.indexes);
    return {
      rows,
      heap_bytes: heap,
      fsm_vm_bytes: fsmVm,
      toast_bytes: toast,
      indexes_bytes: indexesBytes,
      total_bytes: total,
      heap_pages: s.pages,
      rows_per_heap_page: round2(rows / Math.max(1, s.pages)),
      indexes,
      per_row: {
        heap: round2(heap / rows),
        fsm_vm: round2(fsmVm / rows),
        toast: round2(toast / rows),
        indexes: round2(indexesBytes / rows),
        total: round2(total / rows),
      },
    };
  };

  /** Plan node types, depth first. */
  const planNodes = async (sql: string, values: unknown[]): Promise<string[]> => {
    const plan = (
      await one<{ "QUERY PLAN": Array<{ Plan: PlanNode }> }>(`EXPLAIN (FORMAT JSON) ${sql}`, values)
    )["QUERY PLAN"];
    const nodes: string[] = [];
    const walk = (node: PlanNode) => {
      nodes.push(node["Node Type"]);
      for (const child of node.Plans ?? []) walk(child);
    };
    walk(at(plan, 0).Plan);
    return nodes;
  };

  /**
   * The fence's lock semantics: transaction A inserts a new key and holds it uncommitted; B inserts
   * the same key and must wait, then, once A commits, get no row (a duplicate).
   */
  const other = new pg.Client({
    connectionString: database.url,
    application_name: "jobfence-bench-storage-b",
  });
  await other.connect();
  cleanups.push(() => other.end());
  await other.query("SET lock_timeout = '5s'");
  const concurrentDuplicate = async (t: string, insert: FenceInsert): Promise<string> => {
    const key = randomUUID();
    await db.query("BEGIN");
    try {
      const a = await db.query(insert.sql(t), [key, "tenant-000"]);
      if (a.rowCount !== 1) return "A did not insert";
      let settled = false;
      const b = other.query(insert.sql(t), [key, "tenant-000"]).then(
        (r) => {
          settled = true;
          return r.rowCount === 1 ? "inserted a second fence" : "no row (duplicate)";
        },
        (error: Error) => {
          settled = true;
          return `ERROR: ${error.message}`;
        },
      );
      await new Promise((resolve) => setTimeout(resolve, 100));
      const waited = !settled;
      await db.query("COMMIT");
      const outcome = await b;
      return waited ? `waited, then ${outcome}` : `did not wait: ${outcome}`;
    } catch (error) {
      await db.query("ROLLBACK");
      return `ERROR: ${(error as Error).message}`;
    } finally {
      await db.query(`DELETE FROM ${t} WHERE job_id = $1`, [key]);
    }
  };

  const functionalOf = async (t: string, insert: FenceInsert): Promise<Functional> => {
    // Duplicate detection, as the harness does it, rolled back.
    const attempt = async (sql: string, jobId: string): Promise<string> => {
      await db.query("BEGIN");
      try {
        const r = await db.query(sql, [jobId, "tenant-000"]);
        return r.rowCount === 1 ? "inserted" : "no row (duplicate)";
      } catch (error) {
        return `ERROR: ${(error as Error).message}`;
      } finally {
        await db.query("ROLLBACK");
      }
    };
    const existing = (await one<{ job_id: string }>(`SELECT job_id FROM ${t} LIMIT 1`)).job_id;
    const unchanged = await attempt(textConsumerInsert.sql(t), existing);
    const duplicate = await attempt(insert.sql(t), existing);
    const fresh = await attempt(insert.sql(t), randomUUID());
    const concurrent = await concurrentDuplicate(t, insert);

    // The replay path's lookup.
    const lookupSql = (insert.lookup ?? textLookup)(t);
    const lookupNodes = await planNodes(lookupSql, [existing]);
    const lookupTimes: number[] = [];
    for (let run = 0; run <= CLEANUP_RUNS; run++) {
      const t0 = performance.now();
      await db.query(lookupSql, [existing]);
      if (run > 0) lookupTimes.push(performance.now() - t0);
    }

    // Cleanup's batch query, rolled back each time.
    const sql = cleanupBatchSql(t);
    const nodes = await planNodes(sql, [cutoff]);
    const times: number[] = [];
    let rows = 0;
    for (let run = 0; run <= CLEANUP_RUNS; run++) {
      await db.query("BEGIN");
      const t0 = performance.now();
      const r = await db.query(sql, [cutoff]);
      const elapsed = performance.now() - t0;
      await db.query("ROLLBACK");
      rows = r.rowCount ?? 0;
      if (run > 0) times.push(elapsed); // run 0 warms the cache
    }
    return {
      harness_sql_unchanged: unchanged,
      duplicate_detected: duplicate,
      new_key_inserted: fresh,
      concurrent_duplicate: concurrent,
      lookup_plan: lookupNodes.join(" > "),
      lookup_ms: round2(median(lookupTimes)),
      cleanup_plan: nodes.join(" > "),
      cleanup_batch_ms: round2(median(times)),
      cleanup_batch_rows: rows,
    };
  };

  const results: LayoutResult[] = [];
  const shipped = await sizesOf("core.processed_jobs");
  results.push({
    name: "shipped",
    summary: "core.processed_jobs as migrated (0001), seeded with its indexes in place",
    table: "core.processed_jobs",
    build_ms: Math.round(seedMs),
    sizes: shipped,
    functional: await functionalOf("core.processed_jobs", textConsumerInsert),
    meets_target: shipped.per_row.total <= TARGET_BYTES_PER_ROW,
    costs: "none (as shipped)",
  });
  report(at(results, 0));

  // --- candidates ---------------------------------------------------------------------------
  if (SELECTED.length > 0) {
    await db.query(`CREATE SCHEMA ${SCRATCH}`);
    cleanups.push(() => db.query(`DROP SCHEMA IF EXISTS ${SCRATCH} CASCADE`));
    await db.query(`CREATE TABLE ${SCRATCH}.consumers (id smallint PRIMARY KEY, name text NOT NULL UNIQUE)`);
    await db.query(`INSERT INTO ${SCRATCH}.consumers VALUES (1, $1)`, [CONSUMER]);
    await db.query(`CREATE TYPE ${SCRATCH}.consumer_name AS ENUM ('${CONSUMER}')`);
  }
  for (const candidate of SELECTED) {
    const t = `${SCRATCH}.bench_${candidate.name.replace(/[^a-z0-9]+/g, "_")}`;
    const t0 = performance.now();
    for (const ddl of candidate.create(t)) await db.query(ddl);
    await db.query(candidate.fill(t));
    for (const ddl of candidate.after?.(t) ?? []) await db.query(ddl);
    await db.query(`VACUUM (ANALYZE) ${t}`);
    const buildMs = performance.now() - t0;
    const sizes = await sizesOf(t);
    const result: LayoutResult = {
      name: candidate.name,
      summary: candidate.summary,
      table: t,
      build_ms: Math.round(buildMs),
      sizes,
      functional: await functionalOf(t, candidate.insert),
      meets_target: sizes.per_row.total <= TARGET_BYTES_PER_ROW,
      costs: candidate.costs,
    };
    results.push(result);
    report(result);
  }

  // --- report -------------------------------------------------------------------------------
  const b = (v: number) => v.toFixed(1);
  console.log(`\nBytes per row at ${int(ROWS)} rows (index columns: bytes/row, leaf density when b-tree)`);
  console.log(
    table(
      [
        "layout",
        "heap",
        "rows/page",
        "fsm+vm",
        "toast",
        "indexes",
        "index detail",
        "total",
        `≤ ${TARGET_BYTES_PER_ROW}`,
      ],
      results.map((r) => [
        r.name,
        b(r.sizes.per_row.heap),
        b(r.sizes.rows_per_heap_page),
        b(r.sizes.per_row.fsm_vm),
        b(r.sizes.per_row.toast),
        b(r.sizes.per_row.indexes),
        r.sizes.indexes
          .map(
            (i) =>
              `${i.method} ${shortIndex(i.name)} ${b(i.bytes_per_row)}${i.leaf_density_pct !== null ? ` @${Math.round(i.leaf_density_pct)}%` : ""}`,
          )
          .join(", "),
        b(r.sizes.per_row.total),
        r.meets_target ? "yes" : "NO",
      ]),
    ),
  );
  console.log(
    "\nFence semantics (harness SQL as is: the fence insert of begin-with-fences.ts on the layout, with an existing key; " +
      "existing/new key: the layout's insert, adapted where it must be; concurrent duplicate: B inserts a key " +
      "A holds uncommitted, then A commits)",
  );
  console.log(
    table(
      ["layout", "harness SQL as is", "existing key", "new key", "concurrent duplicate"],
      results.map((r) => [
        r.name,
        short(r.functional.harness_sql_unchanged),
        short(r.functional.duplicate_detected),
        short(r.functional.new_key_inserted),
        short(r.functional.concurrent_duplicate),
      ]),
    ),
  );
  console.log(
    `\nQueries (lookup: one fence by job_id and consumer, as the replay path looks; cleanup: one batch of ` +
      `${int(BATCH)} at a backlog of half the table, rolled back; median ms of ${CLEANUP_RUNS} after a warm-up)`,
  );
  console.log(
    table(
      ["layout", "lookup ms", "lookup plan", "cleanup batch ms", "cleanup plan"],
      results.map((r) => [
        r.name,
        ms(r.functional.lookup_ms),
        r.functional.lookup_plan,
        ms(r.functional.cleanup_batch_ms),
        r.functional.cleanup_plan,
      ]),
    ),
  );
  console.log("\nWhat each candidate costs besides the figures above:");
  for (const r of results.slice(1)) console.log(`  ${r.name}: ${r.costs}`);

  const shippedResult = at(results, 0);
  const copy = results.find((r) => r.name === "current");
  const bare = results.find((r) => r.name === "no-fingerprint");
  const meeting = results.filter((r) => r.meets_target && r.name !== "shipped");
  const verdict =
    `${shippedResult.meets_target ? "PASS" : "FAIL"}: shipped layout ${b(shippedResult.sizes.per_row.total)} bytes/row ` +
    `at ${int(ROWS)} rows (heap ${b(shippedResult.sizes.per_row.heap)}, indexes ${b(shippedResult.sizes.per_row.indexes)}` +
    `${copy ? `; rebuilt with new ids ${b(copy.sizes.per_row.total)}` : ""}` +
    `${copy && bare ? `; the fingerprint's share ${b(copy.sizes.per_row.heap - bare.sizes.per_row.heap)} of the heap (same rows without it: ${b(bare.sizes.per_row.total)})` : ""}` +
    `; target ≤ ${TARGET_BYTES_PER_ROW}). ` +
    (SELECTED.length > 0
      ? `Candidates within target: ${meeting.length > 0 ? meeting.map((r) => `${r.name} ${b(r.sizes.per_row.total)}`).join(", ") : "none"}`
      : "No candidates measured");
  console.log(`\nVERDICT: ${verdict}`);

  const path = await writeResult("fence-storage", {
    benchmark: "fence storage: bytes per core.processed_jobs row including indexes",
    options: { rows: ROWS, quick: QUICK, candidates: SELECTED.map((c) => c.name), cleanup_batch: BATCH },
    method:
      "seed N fences set-based into the migrated table with its indexes in place (uuid text job ids, one consumer, 50 tenants, " +
      "processed_at rising over 7 days, expires_at = processed_at + 7 days), VACUUM (ANALYZE); candidates are scratch tables " +
      "created with their indexes and filled from it in insertion order (some REINDEXed), VACUUM (ANALYZE); sizes from " +
      "pg_relation_size / pg_table_size / pg_indexes_size / pg_total_relation_size; one measurement per layout " +
      "(deterministic for given ids; random ids move b-tree split positions: 'shipped' and 'current' are two samples); " +
      "cleanup batch = the inner SELECT of core.delete_expired_fences with now() replaced by the median expires_at, " +
      `median of ${CLEANUP_RUNS} rolled-back runs after one warm-up`,
    environment,
    target_bytes_per_row: TARGET_BYTES_PER_ROW,
    layouts: results,
    verdict,
    total_runtime_ms: Math.round(performance.now() - started),
  });
  console.log(`wrote ${path} (total ${secs(performance.now() - started)})`);
}

interface PlanNode {
  readonly "Node Type": string;
  readonly Plans?: readonly PlanNode[];
}

function shortIndex(name: string): string {
  if (name.endsWith("_pkey")) return "pkey";
  if (name.endsWith("expires_at_idx")) return "expires_at";
  if (name.endsWith("_excl")) return "excl";
  return name;
}

function short(text: string): string {
  return text.length > 48 ? `${text.slice(0, 47)}…` : text;
}

function report(r: LayoutResult): void {
  const s = r.sizes;
  console.log(
    `  ${r.name.padEnd(24)} ${s.per_row.total.toFixed(1).padStart(6)} bytes/row  (heap ${s.per_row.heap.toFixed(1)}, ` +
      `indexes ${s.indexes.map((i) => `${shortIndex(i.name)} ${i.bytes_per_row.toFixed(1)}`).join(" + ")}, ` +
      `total ${(s.total_bytes / 2 ** 20).toFixed(1)} MB)  built in ${secs(r.build_ms)}`,
  );
}

await runBenchmark(main, cleanups);
