/**
 * What a fence table takes on disk: heap = main fork (`pg_relation_size`), FSM + visibility map,
 * TOAST (its table and index), each index (`pg_relation_size` of the index; their sum is
 * `pg_indexes_size`), total = `pg_total_relation_size`; bytes per row = size / rows. B-tree leaf
 * density from pgstattuple's `pgstatindex` when the extension is available.
 */
import type pg from "pg";
import { round2 } from "../lib/report.ts";
import { at } from "../lib/support.ts";

export interface IndexSize {
  readonly name: string;
  readonly method: string;
  readonly bytes: number;
  readonly bytes_per_row: number;
  /** pgstatindex's avg_leaf_density (b-tree only), percent. */
  readonly leaf_density_pct: number | null;
}

export interface Sizes {
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

/** Whether pgstattuple could be created (leaf densities are then measured). */
export async function enablePgstattuple(db: pg.Client): Promise<boolean> {
  try {
    await db.query("CREATE EXTENSION IF NOT EXISTS pgstattuple");
    return true;
  } catch {
    return false;
  }
}

/** The sizes of table `t` (schema-qualified), with each index's leaf density when `pgstattuple`. */
export async function sizesOf(db: pg.Client, t: string, pgstattuple: boolean): Promise<Sizes> {
  const s = at(
    (
      await db.query<{
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
      )
    ).rows,
    0,
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
  const schema = t.split(".")[0] ?? "core";
  const indexes: IndexSize[] = [];
  for (const r of indexRows) {
    const density =
      pgstattuple && r.method === "btree"
        ? Number(
            at(
              (
                await db.query<{ d: string }>("SELECT avg_leaf_density::text AS d FROM pgstatindex($1)", [
                  `${schema}.${r.name}`,
                ])
              ).rows,
              0,
            ).d,
          )
        : null;
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
  const table = {
    rows,
    heap_bytes: heap,
    fsm_vm_bytes: Number(s.table_size) - heap - toast,
    toast_bytes: toast,
  };
  return compose(table, s.pages, indexes, Number(s.indexes), Number(s.total));
}

type TableBytes = Pick<Sizes, "rows" | "heap_bytes" | "fsm_vm_bytes" | "toast_bytes">;

function compose(
  table: TableBytes,
  pages: number,
  indexes: readonly IndexSize[],
  indexesBytes: number,
  total: number,
): Sizes {
  const { rows, heap_bytes: heap, fsm_vm_bytes: fsmVm, toast_bytes: toast } = table;
  return {
    rows,
    heap_bytes: heap,
    fsm_vm_bytes: fsmVm,
    toast_bytes: toast,
    indexes_bytes: indexesBytes,
    total_bytes: total,
    heap_pages: pages,
    rows_per_heap_page: round2(rows / Math.max(1, pages)),
    indexes,
    per_row: {
      heap: round2(heap / rows),
      fsm_vm: round2(fsmVm / rows),
      toast: round2(toast / rows),
      indexes: round2(indexesBytes / rows),
      total: round2(total / rows),
    },
  };
}

/**
 * `table`'s heap, FSM + VM and TOAST with `indexed`'s indexes, for a copy of `indexed`'s rows made
 * without indexes; the total is their sum, as `pg_total_relation_size` is.
 */
export function withIndexesOf(table: Sizes, indexed: Sizes): Sizes {
  const total = table.heap_bytes + table.fsm_vm_bytes + table.toast_bytes + indexed.indexes_bytes;
  return compose(table, table.heap_pages, indexed.indexes, indexed.indexes_bytes, total);
}

/** An index's role, from its name. */
function shortIndex(name: string): string {
  if (name.endsWith("_pkey")) return "pkey";
  if (name.endsWith("expires_at_idx")) return "expires_at";
  if (name.endsWith("_excl")) return "excl";
  return name;
}

/** A layout's primary key (or exclusion index): the first index that is not expires_at's. */
export function keyIndex(sizes: Sizes): IndexSize | undefined {
  return sizes.indexes.find((i) => shortIndex(i.name) !== "expires_at");
}

const b = (v: number) => v.toFixed(1);

export const sizesTitle = (rows: number, target: number) =>
  `bytes per row at ${rows.toLocaleString("en")} rows (index detail: bytes/row, leaf density when b-tree; target ≤ ${target})`;

export const SIZE_HEADERS = [
  "layout",
  "heap",
  "rows/page",
  "fsm+vm",
  "toast",
  "indexes",
  "index detail",
  "total",
  "in target",
];

export function sizeRow(name: string, s: Sizes, target: number): string[] {
  return [
    name,
    b(s.per_row.heap),
    b(s.rows_per_heap_page),
    b(s.per_row.fsm_vm),
    b(s.per_row.toast),
    b(s.per_row.indexes),
    s.indexes
      .map(
        (i) =>
          `${i.method} ${shortIndex(i.name)} ${b(i.bytes_per_row)}${i.leaf_density_pct !== null ? ` @${Math.round(i.leaf_density_pct)}%` : ""}`,
      )
      .join(", "),
    b(s.per_row.total),
    s.per_row.total <= target ? "yes" : "NO",
  ];
}

/** One progress line as a layout is measured (the tables come at the end). */
export function progressLine(name: string, s: Sizes, buildMs: number): string {
  return (
    `  ${name.padEnd(24)} ${s.per_row.total.toFixed(1).padStart(6)} bytes/row  (heap ${b(s.per_row.heap)}, ` +
    `indexes ${s.indexes.map((i) => `${shortIndex(i.name)} ${b(i.bytes_per_row)}`).join(" + ")}, ` +
    `total ${(s.total_bytes / 2 ** 20).toFixed(1)} MB)  built in ${(buildMs / 1000).toFixed(1)} s`
  );
}
