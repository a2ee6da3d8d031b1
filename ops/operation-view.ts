/**
 * How a bulk operation reads: a one-line progress, a progress bar for a terminal, the whole
 * operation, a table of operations. Shared by starting, watching, cancelling and listing them.
 */
import type { z } from "zod";
import type { operationDetailSchema, operationSchema } from "../shared/dead-letters/api-schemas.ts";
import { shortTime } from "./format.ts";
import { type Column, table } from "./table.ts";
import { clean, truncate } from "./text.ts";

export type Operation = z.output<typeof operationSchema>;
export type OperationDetail = z.output<typeof operationDetailSchema>;

/** Whole percent of the planned rows handled; an empty plan is done. */
export function percent(op: Operation): number {
  return op.planned <= 0 ? 100 : Math.min(100, Math.floor((op.processed / op.planned) * 100));
}

/** What the rows handled so far came to: "118 replayed, 1 superseded, 1 conflicts, 0 failed". */
export function outcomes(op: Operation): string {
  // A discard sends nothing, so it has no superseded, conflicts or failed sends to count.
  if (op.kind === "discard") return `${op.discarded} discarded`;
  return `${op.replayed} replayed, ${op.superseded} superseded, ${op.conflicts} conflicts, ${op.failed} failed`;
}

/** "replay 0d5…: running 120/240 (50%) — 118 replayed, …": one line per change when watching. */
export function progressLine(op: Operation): string {
  return `${op.kind} ${clean(op.id)}: ${op.status} ${op.processed}/${op.planned} (${percent(op)}%) — ${outcomes(op)}`;
}

/** A progress bar that fits `columns`: "[█████░░░░░]  50% 120/240 — 118 replayed, …". */
export function progressBar(op: Operation, columns: number): string {
  const size = Math.max(10, Math.min(40, columns - 60));
  const filled = Math.round((percent(op) / 100) * size);
  const bar = `[${"█".repeat(filled)}${"░".repeat(size - filled)}]`;
  const text = `${bar} ${String(percent(op)).padStart(3)}% ${op.processed}/${op.planned} — ${outcomes(op)}`;
  // One character short of the width: writing the last column makes some terminals wrap.
  return truncate(text, Math.max(1, columns - 1));
}

const FIELD_COLUMNS: readonly Column[] = [{ header: "field" }, { header: "value" }];

/** The whole operation, field by field, then the dead letters it left pending. */
export function describeOperation(op: Operation | OperationDetail): string[] {
  const fields: [string, unknown][] = [
    ["operation", op.id],
    ["kind", op.kind],
    ["status", op.status],
    ["progress", `${op.processed} of ${op.planned} (${percent(op)}%)`],
    ["outcome", outcomes(op)],
    ["filter", JSON.stringify(op.filter)],
    ...(op.kind === "discard" ? [["reason", op.reason] as [string, unknown]] : []),
    ...(op.kind === "replay" ? [["delay", `${op.delay_seconds} s`] as [string, unknown]] : []),
    ["rate", `${op.rate_per_second}/s`],
    ["submitted", `${op.submitted_at} by ${op.submitted_by}`],
    ["cancelled_by", op.cancelled_by],
    ["finished_at", op.finished_at],
    ["last_error", op.last_error],
  ];
  const lines = table(FIELD_COLUMNS, fields, { header: false });
  const skipped = "skipped" in op ? op.skipped : [];
  if (skipped.length > 0) {
    lines.push("", `left pending (${skipped.length}):`);
    lines.push(
      ...table(
        [
          { header: "dead_letter_id" },
          { header: "reason" },
          { header: "at" },
          { header: "detail", max: 100 },
        ],
        skipped.map((s) => [s.dead_letter_id, s.reason, shortTime(s.at), s.detail]),
        { indent: "  " },
      ),
    );
  }
  return lines;
}

const LIST_COLUMNS: readonly Column[] = [
  { header: "id" },
  { header: "kind" },
  { header: "status" },
  { header: "progress", align: "right" },
  { header: "submitted_at" },
  { header: "submitted_by", max: 24 },
  { header: "filter", max: 60 },
];

/** Operations as a table, header first. */
export function operationTable(items: readonly Operation[]): string[] {
  return table(
    LIST_COLUMNS,
    items.map((op) => [
      op.id,
      op.kind,
      op.status,
      `${op.processed}/${op.planned}`,
      shortTime(op.submitted_at),
      op.submitted_by,
      JSON.stringify(op.filter),
    ]),
  );
}

/** Whether an operation did all it planned: completed, nothing failed to send. */
export function succeeded(op: Operation): boolean {
  return op.status === "completed" && op.failed === 0;
}
