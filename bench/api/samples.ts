/**
 * What the operations' calls are made with, drawn once after the seed: rows by id, fresh pending
 * rows for each replay and discard call, one-day windows, and the orders the filters cycle through
 * (tenants, failure groups, classes, consumer × class pairs). The rows come from the seed's session
 * (random() seeded there), the rest from mulberry32(42): the same draws run to run.
 */
import type pg from "pg";
import { mulberry32, shuffled } from "../lib/random.ts";
import { at } from "../lib/support.ts";
import type { Seeded, SeededGroup } from "./seed.ts";
import { SEED_DAYS, TENANTS } from "./world.ts";

export interface Samples {
  /** Random rows (any status): get by id, the job_id and correlation_id filters. */
  readonly rows: ReadonlyArray<{ id: string; job_id: string; correlation_id: string }>;
  /** A fresh pending row per replay and per discard call, and one each for EXPLAIN. */
  readonly replayIds: readonly string[];
  readonly discardIds: readonly string[];
  readonly explainReplayId: string;
  readonly explainDiscardId: string;
  readonly windows: ReadonlyArray<{ created_after: string; created_before: string }>;
  /** Every tenant first, then random ones. */
  readonly tenantOrder: readonly string[];
  readonly groupOrder: readonly SeededGroup[];
  /** The groups with rows pending, for plans and starts. */
  readonly pendingGroupOrder: readonly SeededGroup[];
  readonly classOrder: readonly string[];
  /** Consumer × class pairs that exist with rows pending. */
  readonly consumerClassOrder: ReadonlyArray<{ consumer: string; error_class: string }>;
}

/** Draws the samples for `calls` calls per operation (warm-up included) on the seed's session. */
export async function drawSamples(admin: pg.Client, seeded: Seeded, calls: number): Promise<Samples> {
  const { rows } = await admin.query<{ id: string; job_id: string; correlation_id: string }>(
    "SELECT id, job_id, correlation_id FROM core.dead_letters ORDER BY random() LIMIT $1",
    [Math.max(calls, 1000)],
  );
  const { rows: pending } = await admin.query<{ id: string }>(
    `SELECT id FROM core.dead_letters WHERE status = 'pending_review' ORDER BY random() LIMIT $1`,
    [2 * calls + 2],
  );
  if (pending.length < 2 * calls + 2) {
    throw new Error(`need ${2 * calls + 2} pending dead letters, the seed has ${pending.length}`);
  }
  const random = mulberry32(42);
  // The draws below in this order: each takes the next numbers of the one sequence.
  const windows = Array.from({ length: Math.max(calls, 20) }, () => {
    const start = seeded.t0Epoch + Math.floor(random() * (SEED_DAYS - 1) * 86_400_000);
    return {
      created_after: new Date(start).toISOString(),
      created_before: new Date(start + 86_400_000).toISOString(),
    };
  });
  const tenantOrder = Array.from({ length: Math.max(calls, TENANTS.length) }, (_, n) =>
    n < TENANTS.length ? at(TENANTS, n) : at(TENANTS, Math.floor(random() * TENANTS.length)),
  );
  // Shuffled, so that consecutive calls hit groups of every size.
  const groupOrder = shuffled(seeded.groups, random);
  const pendingGroupOrder = shuffled(
    seeded.groups.filter((g) => g.pending > 0),
    random,
  );
  if (pendingGroupOrder.length === 0) throw new Error("no failure group has rows pending");
  const classOrder = shuffled(seeded.classes, random);
  const consumerClassOrder = shuffled(
    [
      ...new Map(
        seeded.groups
          .filter((g) => g.error_class !== null && g.pending > 0)
          .map((g) => [
            `${g.consumer}\n${g.error_class}`,
            { consumer: g.consumer, error_class: g.error_class ?? "" },
          ]),
      ).values(),
    ],
    random,
  );
  return {
    rows,
    replayIds: pending.slice(0, calls).map((r) => r.id),
    discardIds: pending.slice(calls, 2 * calls).map((r) => r.id),
    explainReplayId: at(pending, 2 * calls).id,
    explainDiscardId: at(pending, 2 * calls + 1).id,
    windows,
    tenantOrder,
    groupOrder,
    pendingGroupOrder,
    classOrder,
    consumerClassOrder,
  };
}
