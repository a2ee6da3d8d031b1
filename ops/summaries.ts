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

/**
 * The last error, as `show` prints it ("Class: message"), last so it can run long: cut at this many
 * characters, which leaves its start readable on a wide terminal; `show <id>` prints it whole.
 */
export const ERROR_COLUMN: Column = { header: "last_error", max: 100 };

export interface SummaryTableOptions {
  /** Add the {@link ERROR_COLUMN}. @default false */
  readonly errors?: boolean;
}

/** The summaries as a table, header first. */
export function summaryTable(
  items: readonly DeadLetterSummary[],
  options: SummaryTableOptions = {},
): string[] {
  const errors = options.errors === true;
  return table(
    errors ? [...SUMMARY_COLUMNS, ERROR_COLUMN] : SUMMARY_COLUMNS,
    items.map((d) => {
      const row: unknown[] = [
        d.id,
        shortTime(d.created_at),
        d.consumer,
        d.error_kind,
        d.status,
        d.attempts,
        d.job_id,
      ];
      if (errors) row.push(d.last_error ? `${d.last_error.class}: ${d.last_error.message}` : null);
      return row;
    }),
  );
}
