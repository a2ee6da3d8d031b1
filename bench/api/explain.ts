/**
 * The plans check of bench/api.ts: each operation's EXPLAIN events are sent to the recording
 * handler, and every statement its connections ran (transaction control left out) is EXPLAINed
 * with the same parameters: read-only statements with ANALYZE and BUFFERS, writes for their plan
 * alone. Per statement, over the variants: the plan shapes, the scans, whether core.dead_letters is
 * read sequentially, the slowest execution; and for the operations shown, the whole
 * EXPLAIN (ANALYZE, BUFFERS) of the slowest variant.
 */
import type pg from "pg";
import {
  explain,
  explainText,
  hasSeqScan,
  planShape,
  type ScanUse,
  scans,
  writesNothing,
} from "../lib/plans.ts";
import { type ApiUnderTest, type CapturedStatement, invoke } from "./handler.ts";
import type { Operation } from "./operation.ts";

/** One SQL statement an operation runs, over all EXPLAINed variants of the operation. */
export interface StatementPlan {
  sql: string;
  variants: number;
  shapes: string[];
  scans: ScanUse[];
  seq_scan_on_dead_letters: boolean;
  sorts: boolean;
  /** EXPLAIN ANALYZE execution time, read-only statements only (max over variants). */
  max_execution_ms: number | null;
  analyzed: boolean;
  /** EXPLAIN (ANALYZE, BUFFERS) in text of the slowest variant (the plan alone for a write). */
  plan_shown: string | null;
  /** The parameters of that variant. */
  plan_shown_values: unknown[] | null;
}

export interface OperationPlan {
  operation: string;
  /** Held to the target (false: reported only). */
  target: boolean;
  statements: StatementPlan[];
}

const CONTROL = /^(BEGIN|COMMIT|ROLLBACK|SET|RESET|EXPLAIN)\b/i;
const collapse = (sql: string) => sql.replace(/\s+/g, " ").trim();
const round3 = (value: number) => Math.round(value * 1000) / 1000;
const sameScan = (a: ScanUse, b: ScanUse) =>
  a.node === b.node && a.relation === b.relation && a.index === b.index;

/** EXPLAINs up to `maxVariants` events of each operation (Infinity: every one) through `admin`. */
export async function explainOperations(
  admin: pg.Client,
  under: ApiUnderTest,
  operations: readonly Operation[],
  maxVariants: number,
): Promise<OperationPlan[]> {
  const plans: OperationPlan[] = [];
  const { captured } = under;
  for (const operation of operations) {
    if (!operation.explain) continue;
    const byText = new Map<string, StatementPlan>();
    /** Per statement, the slowest analyzed variant: what "plans shown" prints. */
    const slowest = new Map<string, { statement: CapturedStatement; ms: number }>();
    for (const event of (await operation.explain()).slice(0, maxVariants)) {
      const from = captured.length;
      const { response } = await invoke(under.captureApi, event);
      if (response.statusCode !== operation.status) {
        throw new Error(
          `EXPLAIN capture of ${operation.name}: ${response.statusCode} ${response.body ?? ""}`,
        );
      }
      for (const statement of captured.slice(from)) {
        if (CONTROL.test(statement.text.trim())) continue;
        const sql = collapse(statement.text);
        const readOnly = writesNothing(sql);
        const explained = await explain(admin, statement.text, statement.values, {
          analyze: readOnly,
          buffers: readOnly,
        });
        let entry = byText.get(sql);
        if (!entry) {
          entry = {
            sql,
            variants: 0,
            shapes: [],
            scans: [],
            seq_scan_on_dead_letters: false,
            sorts: false,
            max_execution_ms: null,
            analyzed: readOnly,
            plan_shown: null,
            plan_shown_values: null,
          };
          byText.set(sql, entry);
        }
        entry.variants++;
        const shape = planShape(explained.plan);
        if (!entry.shapes.includes(shape)) entry.shapes.push(shape);
        if (shape.includes("Sort")) entry.sorts = true;
        for (const scan of scans(explained.plan)) {
          if (!entry.scans.some((s) => sameScan(s, scan))) entry.scans.push(scan);
        }
        if (hasSeqScan(explained.plan, "dead_letters")) entry.seq_scan_on_dead_letters = true;
        const executionMs = explained.executionMs;
        if (executionMs !== undefined) {
          entry.max_execution_ms = round3(Math.max(entry.max_execution_ms ?? 0, executionMs));
          const worst = slowest.get(sql);
          if (!worst || executionMs > worst.ms) slowest.set(sql, { statement, ms: executionMs });
        }
      }
    }
    if (operation.show) {
      for (const [sql, { statement }] of slowest) {
        const entry = byText.get(sql);
        if (!entry) continue;
        entry.plan_shown = await explainText(admin, statement.text, statement.values, {
          analyze: true,
          buffers: true,
        });
        entry.plan_shown_values = statement.values;
      }
    }
    plans.push({ operation: operation.name, target: operation.target, statements: [...byText.values()] });
  }
  return plans;
}
