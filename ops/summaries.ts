/** Dead letters as table rows: the list and a plan's sample show them alike. */
import type { z } from "zod";
import type { deadLetterSummarySchema } from "../shared/dead-letters/api-schemas.ts";
import { shortTime } from "./format.ts";
import { type Column, table } from "./table.ts";

export type DeadLetterSummary = z.output<typeof deadLetterSummarySchema>;

const SUMMARY_COLUMNS: readonly Column[] = [
  { header: "id" },
  { header: "created_at" },
  { header: "consumer", max: 24 },
  { header: "error_kind" },
  { header: "status" },
  { header: "attempts", align: "right" },
  { header: "job_id", max: 40 },
];

/** The summaries as a table, header first. */
export function summaryTable(items: readonly DeadLetterSummary[]): string[] {
  return table(
    SUMMARY_COLUMNS,
    items.map((d) => [
      d.id,
      shortTime(d.created_at),
      d.consumer,
      d.error_kind,
      d.status,
      d.attempts,
      d.job_id,
    ]),
  );
}
