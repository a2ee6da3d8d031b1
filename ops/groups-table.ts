/** Failure groups as table rows: `groups` lists them, `stats` shows the biggest. */
import type { z } from "zod";
import type { groupSchema } from "../shared/dead-letters/api-schemas.ts";
import { shortTime } from "./format.ts";
import { type Column, table } from "./table.ts";

export type FailureGroup = z.output<typeof groupSchema>;

const GROUP_COLUMNS: readonly Column[] = [
  { header: "consumer", max: 24 },
  { header: "group" },
  { header: "error_class", max: 32 },
  { header: "pending", align: "right" },
  { header: "total", align: "right" },
  { header: "last_seen" },
  { header: "sample message", max: 60 },
];

/** The groups as a table, header first. */
export function groupTable(groups: readonly FailureGroup[]): string[] {
  return table(
    GROUP_COLUMNS,
    groups.map((g) => [
      g.consumer,
      g.group,
      g.error_class,
      g.pending,
      g.total,
      shortTime(g.last_seen),
      g.sample?.message,
    ]),
  );
}
