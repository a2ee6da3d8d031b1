/**
 * EXPLAIN plans, as benchmarks read them: run `EXPLAIN` on a statement with its parameters, then
 * walk the JSON plan (node types depth first, the scans it makes, whether it reads a relation
 * sequentially, a one-line shape to print).
 */
import type { Queryable } from "../../shared/db/queryable.ts";
import { at } from "./support.ts";

/** A node of `EXPLAIN (FORMAT JSON)`: the fields the walkers read, and whatever else it carries. */
export interface PlanNode {
  readonly "Node Type": string;
  readonly "Relation Name"?: string;
  readonly "Index Name"?: string;
  readonly "Scan Direction"?: string;
  readonly "Sort Key"?: readonly string[];
  readonly Plans?: readonly PlanNode[];
  readonly [field: string]: unknown;
}

/** A plan, and with ANALYZE what running it took. */
export interface Explained {
  readonly plan: PlanNode;
  /** "Execution Time" (ANALYZE only). */
  readonly executionMs?: number;
  readonly planningMs?: number;
}

export interface ExplainOptions {
  /** Runs the statement (EXPLAIN ANALYZE): only for one that writes nothing, or in a transaction rolled back. */
  readonly analyze?: boolean;
  /** Buffer counts, with ANALYZE. */
  readonly buffers?: boolean;
}

const optionList = (options: ExplainOptions, format: string) =>
  [...(options.analyze ? ["ANALYZE"] : []), ...(options.buffers ? ["BUFFERS"] : []), format].join(", ");

/** `EXPLAIN (…, FORMAT JSON) sql` with `values` as its parameters. */
export async function explain(
  db: Queryable,
  sql: string,
  values: readonly unknown[] = [],
  options: ExplainOptions = {},
): Promise<Explained> {
  const { rows } = await db.query<{
    "QUERY PLAN": Array<{ Plan: PlanNode; "Execution Time"?: number; "Planning Time"?: number }>;
  }>(`EXPLAIN (${optionList(options, "FORMAT JSON")}) ${sql}`, [...values]);
  const top = at(at(rows, 0)["QUERY PLAN"], 0);
  return {
    plan: top.Plan,
    ...(top["Execution Time"] === undefined ? {} : { executionMs: top["Execution Time"] }),
    ...(top["Planning Time"] === undefined ? {} : { planningMs: top["Planning Time"] }),
  };
}

/** The plan as psql prints it (`EXPLAIN (…, FORMAT TEXT)`), one string of lines. */
export async function explainText(
  db: Queryable,
  sql: string,
  values: readonly unknown[] = [],
  options: ExplainOptions = {},
): Promise<string> {
  const { rows } = await db.query<{ "QUERY PLAN": string }>(
    `EXPLAIN (${optionList(options, "FORMAT TEXT")}) ${sql}`,
    [...values],
  );
  return rows.map((row) => row["QUERY PLAN"]).join("\n");
}

/**
 * Whether EXPLAIN ANALYZE may run `sql` as it is: a SELECT or WITH that names no write and takes no
 * row lock. A textual test, erring towards "writes" (a column named `update` counts as one).
 */
export function writesNothing(sql: string): boolean {
  return (
    /^\s*(SELECT|WITH)\b/i.test(sql) &&
    !/\b(INSERT|UPDATE|DELETE|MERGE)\b/i.test(sql) &&
    !/\bFOR (UPDATE|SHARE|NO KEY UPDATE|KEY SHARE)\b/i.test(sql)
  );
}

/** Every node, depth first (the node itself, then each child's subtree in order). */
export function planNodes(node: PlanNode, into: PlanNode[] = []): PlanNode[] {
  into.push(node);
  for (const child of node.Plans ?? []) planNodes(child, into);
  return into;
}

/** The node types, depth first: `["Limit", "Index Scan"]`. */
export function nodeTypes(node: PlanNode): string[] {
  return planNodes(node).map((n) => n["Node Type"]);
}

/** A scan the plan makes: its node type, and the relation and index it reads. */
export interface ScanUse {
  readonly node: string;
  readonly relation: string | null;
  readonly index: string | null;
}

/** The scans (every node whose type contains "Scan"), depth first. */
export function scans(node: PlanNode): ScanUse[] {
  return planNodes(node)
    .filter((n) => n["Node Type"].includes("Scan"))
    .map((n) => ({
      node: n["Node Type"],
      relation: n["Relation Name"] ?? null,
      index: n["Index Name"] ?? null,
    }));
}

/** Whether the plan reads `relation` (its name, unqualified, as EXPLAIN gives it) with a Seq Scan. */
export function hasSeqScan(node: PlanNode, relation: string): boolean {
  return planNodes(node).some((n) => n["Node Type"] === "Seq Scan" && n["Relation Name"] === relation);
}

/** One node: `Index Scan Backward using dead_letters_created_idx on dead_letters`, with its sort key. */
export function nodeLabel(node: PlanNode): string {
  let label = node["Node Type"];
  if (node["Scan Direction"] === "Backward") label += " Backward";
  if (node["Index Name"]) label += ` using ${node["Index Name"]}`;
  if (node["Relation Name"]) label += ` on ${node["Relation Name"]}`;
  if (node["Sort Key"]) label += ` (${node["Sort Key"].join(", ")})`;
  return label;
}

/** The plan on one line: `Limit → Index Scan Backward using … on dead_letters`, a join's children in brackets. */
export function planShape(node: PlanNode): string {
  const children = node.Plans ?? [];
  const label = nodeLabel(node);
  if (children.length === 0) return label;
  if (children.length === 1) return `${label} → ${planShape(at(children, 0))}`;
  return `${label} → [${children.map(planShape).join(" | ")}]`;
}
