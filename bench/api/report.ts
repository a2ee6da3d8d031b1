/**
 * What bench/api.ts prints beyond the framework's tables: the plan shapes of every statement each
 * operation ran (a sequential scan of core.dead_letters flagged), the whole plans of the slowest
 * variants ("plans shown"), and the rows of the per-operation table.
 */
import { ms } from "../lib/report.ts";
import type { OperationPlan } from "./explain.ts";
import type { OperationResult } from "./measure.ts";

export function printPlans(plans: readonly OperationPlan[]): void {
  console.log("\nplans (EXPLAIN of the SQL each operation ran, with its parameters):");
  for (const plan of plans) {
    for (const statement of plan.statements) {
      const flag = statement.seq_scan_on_dead_letters ? "  <-- SEQ SCAN ON dead_letters" : "";
      const exec = statement.max_execution_ms === null ? "" : `, exec ≤ ${ms(statement.max_execution_ms)} ms`;
      console.log(`  ${plan.operation} [${statement.variants} variant(s)${exec}]${flag}`);
      for (const shape of statement.shapes) console.log(`      ${shape}`);
    }
  }
  console.log(
    "\nplans shown: EXPLAIN (ANALYZE, BUFFERS) of the slowest variant of each statement of the list, groups, stats and plan reads:",
  );
  for (const plan of plans) {
    for (const statement of plan.statements) {
      if (statement.plan_shown === null) continue;
      console.log(
        `\n  -- ${plan.operation}: ${statement.sql.slice(0, 160)}${statement.sql.length > 160 ? " …" : ""}`,
      );
      console.log(`  -- parameters: ${JSON.stringify(statement.plan_shown_values)}`);
      for (const planLine of statement.plan_shown.split("\n")) console.log(`  ${planLine}`);
    }
  }
}

export const OPERATION_HEADERS = [
  "operation",
  "n",
  "p50",
  "p95",
  "p99",
  "max (ms)",
  "target p95",
  "met",
  "p95<1s",
] as const;

export function operationRows(results: readonly OperationResult[]): string[][] {
  return results.map((r) => [
    r.operation,
    String(r.iterations),
    ms(r.p50_ms),
    ms(r.p95_ms),
    ms(r.p99_ms),
    ms(r.max_ms),
    r.target_ms === null ? "reported" : `< ${r.target_ms} ms`,
    r.meets_target === null ? "–" : r.meets_target ? "yes" : "NO",
    r.meets_seed_budget ? "yes" : "NO",
  ]);
}
