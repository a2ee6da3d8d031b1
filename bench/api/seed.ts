/**
 * Seeds the dead letters bench/api.ts measures against, and describes what the seed made: the
 * consumers registered (a fence names its consumer by the registry's id), every row inserted as
 * pending_review in chunks (bench/api/seed-sql.ts), the fences of some, ~60 % resolved, then
 * VACUUM (ANALYZE); the failure groups the database fingerprinted, the incidents'
 * groups, how many rows the timed message words match, and the table's size.
 */
import { performance } from "node:perf_hooks";
import type pg from "pg";
import { ensureConsumerRole } from "../../shared/db/queries/provision-login.ts";
import { chunkRanges } from "../lib/chunks.ts";
import { int, secs } from "../lib/report.ts";
import { at, percentile } from "../lib/support.ts";
import { FAILURES, templateIndex } from "./failures.ts";
import { FAILURE_PARAMS, FENCE_CHUNK, INSERT_CHUNK, RESOLVE_CHUNK } from "./seed-sql.ts";
import {
  ACTORS,
  CONSUMERS,
  DISCARD_REASONS,
  INCIDENTS,
  MESSAGE_BURST,
  MESSAGE_COMMON,
  MESSAGE_RARE,
  QUEUE_OF_CONSUMER,
  SEED_DAYS,
} from "./world.ts";

/** A failure group as the seed left it. */
export interface SeededGroup {
  consumer: string;
  group: string;
  error_class: string | null;
  total: number;
  pending: number;
  sample_message: string;
}

/** What the operations draw their filters from, and what the result file records of the seed. */
export interface Seeded {
  /** The start of the seeded month, ms since the epoch. */
  readonly t0Epoch: number;
  readonly groups: readonly SeededGroup[];
  /** The group of each incident, in INCIDENTS order. */
  readonly incidentGroups: ReadonlyArray<SeededGroup & { key: string }>;
  readonly classes: readonly string[];
  readonly pendingRows: number;
  readonly summary: Record<string, unknown>;
}

/**
 * Seeds `rows` dead letters through `admin`. random() is seeded first (setseed), so the rows, and
 * the samples drawn on the same session afterwards, are the same run to run.
 */
export async function seedDeadLetters(admin: pg.Client, rows: number): Promise<Seeded> {
  // A fence names its consumer by the registry's id: the superseded rows' fences need every one.
  for (const consumer of CONSUMERS) await ensureConsumerRole(admin, consumer);
  await admin.query("SET maintenance_work_mem = '512MB'");
  await admin.query("SET work_mem = '256MB'");
  await admin.query("SELECT setseed(0.4242)");
  const { rows: t0Rows } = await admin.query<{ t0: string; epoch_ms: string }>(
    `SELECT t0::text AS t0, (extract(epoch FROM t0) * 1000)::bigint::text AS epoch_ms
       FROM (SELECT date_trunc('minute', now() - make_interval(days => $1::int)) AS t0) AS s`,
    [SEED_DAYS],
  );
  const t0 = at(t0Rows, 0).t0;
  const step = (SEED_DAYS * 86_400) / rows;
  const seedStart = performance.now();
  let inserted = 0;
  let resolved = 0;
  const phaseMs = { insert: 0, resolve: 0, fences: 0 };
  const phase = async <T>(name: keyof typeof phaseMs, work: () => Promise<T>): Promise<T> => {
    const start = performance.now();
    const result = await work();
    phaseMs[name] += performance.now() - start;
    return result;
  };
  for (const { lo, hi } of chunkRanges(rows)) {
    const range = [t0, lo, hi === rows ? null : hi, step];
    const insert = await phase("insert", () =>
      admin.query(INSERT_CHUNK, [
        lo,
        hi - 1,
        CONSUMERS,
        QUEUE_OF_CONSUMER,
        t0,
        step,
        rows,
        ...FAILURE_PARAMS,
      ]),
    );
    await phase("fences", () => admin.query(FENCE_CHUNK, range));
    const resolve = await phase("resolve", () =>
      admin.query(RESOLVE_CHUNK, [...range, DISCARD_REASONS, ACTORS]),
    );
    inserted += insert.rowCount ?? 0;
    resolved += resolve.rowCount ?? 0;
    console.log(
      `  seeded ${int(inserted)} / ${int(rows)} (${int(resolved)} resolved) — ${secs(performance.now() - seedStart)}`,
    );
  }
  const insertMs = performance.now() - seedStart;
  const vacuumStart = performance.now();
  await admin.query(
    "VACUUM (ANALYZE) core.dead_letters, core.dead_letter_counts, core.dead_letter_groups, core.processed_jobs",
  );
  const vacuumMs = performance.now() - vacuumStart;
  const seedMs = performance.now() - seedStart;
  // Back to the server's defaults: the EXPLAIN ANALYZE later should run as the API's sessions do.
  await admin.query("RESET maintenance_work_mem");
  await admin.query("RESET work_mem");
  console.log(
    `seed: ${secs(seedMs)} (insert ${secs(phaseMs.insert)}, resolve ${secs(phaseMs.resolve)}, ` +
      `fences ${secs(phaseMs.fences)}, VACUUM (ANALYZE) ${secs(vacuumMs)})`,
  );

  const { rows: distribution } = await admin.query<{ status: string; error_kind: string; count: string }>(
    `SELECT status, error_kind, sum(count)::text AS count FROM core.dead_letter_counts
      GROUP BY 1, 2 ORDER BY 1, 2`,
  );
  const byStatus: Record<string, number> = {};
  const byKind: Record<string, number> = {};
  for (const row of distribution) {
    byStatus[row.status] = (byStatus[row.status] ?? 0) + Number(row.count);
    byKind[row.error_kind] = (byKind[row.error_kind] ?? 0) + Number(row.count);
  }
  console.log(`  by status: ${JSON.stringify(byStatus)}`);
  console.log(`  by error_kind: ${JSON.stringify(byKind)}`);

  const { groups, incidentGroups, classes, groupSummary } = await failureGroups(admin);
  const messageMatches = await messageMatchCounts(admin, rows);
  const { rows: sizeRows } = await admin.query<{ table_mb: string; total_mb: string; fences: string }>(
    `SELECT round(pg_relation_size('core.dead_letters') / 1048576.0)::text AS table_mb,
            round(pg_total_relation_size('core.dead_letters') / 1048576.0)::text AS total_mb,
            (SELECT count(*) FROM core.processed_jobs)::text AS fences`,
  );
  const sizes = at(sizeRows, 0);
  console.log(
    `  core.dead_letters ${sizes.table_mb} MB heap, ${sizes.total_mb} MB with indexes; ${sizes.fences} fences`,
  );
  return {
    t0Epoch: Number(at(t0Rows, 0).epoch_ms),
    groups,
    incidentGroups,
    classes,
    pendingRows: byStatus.pending_review ?? 0,
    summary: {
      rows,
      fences: Number(sizes.fences),
      dead_letters_heap_mb: Number(sizes.table_mb),
      dead_letters_total_mb: Number(sizes.total_mb),
      total_ms: Math.round(seedMs),
      insert_resolve_fences_ms: Math.round(insertMs),
      insert_ms: Math.round(phaseMs.insert),
      resolve_ms: Math.round(phaseMs.resolve),
      fences_ms: Math.round(phaseMs.fences),
      vacuum_analyze_ms: Math.round(vacuumMs),
      by_status: byStatus,
      by_error_kind: byKind,
      failure_groups: groupSummary,
      message_matches: messageMatches,
    },
  };
}

/** The failure groups as the database fingerprinted the seed (migration 0011), and the incidents'. */
async function failureGroups(admin: pg.Client) {
  const { rows } = await admin.query<
    Omit<SeededGroup, "total" | "pending"> & { total: string; pending: string }
  >(
    `SELECT consumer, encode(fingerprint, 'hex') AS "group", error_class, total::text, pending::text, sample_message
       FROM core.dead_letter_groups ORDER BY total DESC, consumer, fingerprint`,
  );
  const groups: SeededGroup[] = rows.map((r) => ({
    ...r,
    total: Number(r.total),
    pending: Number(r.pending),
  }));
  if (groups.length === 0) throw new Error("the seed made no failure group");
  const incidentGroups = INCIDENTS.map((inc) => {
    const template = at(FAILURES, templateIndex(inc.key));
    const consumer = at(CONSUMERS, at(template.consumers, 0));
    const prefix = template.message.split("%")[0] ?? template.message;
    const group = groups.find((g) => g.consumer === consumer && g.sample_message.startsWith(prefix));
    if (!group) throw new Error(`no failure group for incident ${inc.key}`);
    return { ...inc, ...group };
  });
  const classes = [...new Set(groups.map((g) => g.error_class).filter((c): c is string => c !== null))];
  const sizes = groups.map((g) => g.total).sort((a, b) => a - b);
  const groupSummary = {
    groups: groups.length,
    with_pending: groups.filter((g) => g.pending > 0).length,
    error_classes: classes.length,
    templates: FAILURES.length,
    total_largest: sizes.at(-1) ?? 0,
    total_median: percentile(sizes, 50),
    total_smallest: sizes[0] ?? 0,
    pending_largest: Math.max(...groups.map((g) => g.pending)),
    incidents: incidentGroups.map((g) => ({
      key: g.key,
      consumer: g.consumer,
      group: g.group,
      total: g.total,
      pending: g.pending,
    })),
  };
  console.log(
    `  failure groups: ${groupSummary.groups} (consumer × fingerprint; ${groupSummary.with_pending} with rows pending) ` +
      `from ${FAILURES.length} templates, ${classes.length} error classes; rows per group ` +
      `${int(groupSummary.total_smallest)} … median ${int(groupSummary.total_median)} … ` +
      `${int(groupSummary.total_largest)}; pending per group at most ${int(groupSummary.pending_largest)}`,
  );
  for (const g of incidentGroups) {
    console.log(
      `  incident ${g.key}: ${g.consumer}, group ${g.group}, ${int(g.total)} rows, ${int(g.pending)} pending`,
    );
  }
  return { groups, incidentGroups, classes, groupSummary };
}

/** How many rows each timed message word matches (the message filter's selectivity). */
async function messageMatchCounts(admin: pg.Client, rows: number): Promise<Record<string, number>> {
  const { rows: matchRows } = await admin.query<{ common: string; rare: string; burst: string }>(
    `SELECT count(*) FILTER (WHERE (last_error ->> 'message') ILIKE $1)::text AS common,
            count(*) FILTER (WHERE (last_error ->> 'message') ILIKE $2)::text AS rare,
            count(*) FILTER (WHERE (last_error ->> 'message') ILIKE $3)::text AS burst
       FROM core.dead_letters`,
    [`%${MESSAGE_COMMON}%`, `%${MESSAGE_RARE}%`, `%${MESSAGE_BURST}%`],
  );
  const matches = {
    [MESSAGE_COMMON]: Number(at(matchRows, 0).common),
    [MESSAGE_RARE]: Number(at(matchRows, 0).rare),
    [MESSAGE_BURST]: Number(at(matchRows, 0).burst),
  };
  console.log(
    `  message matches: ${Object.entries(matches)
      .map(([word, count]) => `"${word}" ${int(count)} rows (${((100 * count) / rows).toFixed(2)} %)`)
      .join(", ")}`,
  );
  return matches;
}
