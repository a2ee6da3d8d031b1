/** `dead-letters stats`: counts, the oldest pending of each consumer, the biggest failure groups. */
import type { Command } from "commander";
import type { z } from "zod";
import type { statsResponseSchema } from "../../shared/dead-letters/api-schemas.ts";
import { DEAD_LETTER_STATUSES } from "../../shared/dead-letters/status.ts";
import { defineAction, type Runtime } from "../command.ts";
import { age, oneLine, plural, programOf, shortTime } from "../format.ts";
import { groupTable } from "../groups-table.ts";
import { BASE_PATH, call } from "../http.ts";
import { EXIT } from "../io.ts";
import { type Column, table } from "../table.ts";

type StatsResponse = z.output<typeof statsResponseSchema>;

/** Groups `stats` shows at most: an overview; `groups` lists them all. */
const STATS_GROUPS = 10;

const COUNT_COLUMNS: readonly Column[] = [
  { header: "consumer", max: 40 },
  { header: "status" },
  { header: "error_kind" },
  { header: "count", align: "right" },
];

const OLDEST_COLUMNS: readonly Column[] = [
  { header: "consumer", max: 40 },
  { header: "id" },
  { header: "created_at" },
  { header: "age", align: "right" },
];

export function registerStats(group: Command, runtime: Runtime): void {
  const command = group
    .command("stats")
    .summary("counts, the oldest pending, the biggest failure groups")
    .description(
      "Counts by consumer, status and error kind, the oldest pending dead letter of each consumer, " +
        "and the biggest failure groups with dead letters pending.",
    );

  defineAction(command, runtime, async ({ io, json, connect }) => {
    const conn = await connect();
    const result = await call<StatsResponse>(conn, "GET", `${BASE_PATH}/stats`);
    if (json) {
      io.out(oneLine(result.text));
      return EXIT.ok;
    }
    for (const line of describe(result.body, Date.now(), programOf(io))) io.out(line);
    return EXIT.ok;
  });
}

function describe(stats: StatsResponse, now: number, program: string): string[] {
  const { counts, oldest_pending: oldest } = stats;
  if (counts.length === 0) return ["no dead letters"];
  const lines = table(
    COUNT_COLUMNS,
    counts.map((c) => [c.consumer, c.status, c.error_kind, c.count]),
  );
  const byStatus = new Map<string, number>();
  let total = 0;
  for (const c of counts) {
    total += c.count;
    byStatus.set(c.status, (byStatus.get(c.status) ?? 0) + c.count);
  }
  const parts = DEAD_LETTER_STATUSES.filter((s) => byStatus.has(s)).map((s) => `${byStatus.get(s)} ${s}`);
  lines.push("", `total ${plural(total, "dead letter")} (${parts.join(", ")})`, "");
  if (oldest.length === 0) {
    lines.push("nothing is pending review");
    return lines;
  }
  lines.push("oldest pending per consumer:");
  lines.push(
    ...table(
      OLDEST_COLUMNS,
      oldest.map((o) => [o.consumer, o.id, shortTime(o.created_at), age(o.created_at, now)]),
    ),
  );
  const groups = [...(stats.groups ?? [])].sort((a, b) => b.pending - a.pending || b.total - a.total);
  if (groups.length > 0) {
    const shown = groups.slice(0, STATS_GROUPS);
    lines.push(
      "",
      `biggest pending failure groups (${shown.length} of ${groups.length}; all: ${program} dead-letters groups):`,
    );
    lines.push(...groupTable(shown));
  }
  return lines;
}
