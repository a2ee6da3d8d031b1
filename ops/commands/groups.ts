/** `dead-letters groups`: failure groups (dead letters of one consumer that failed the same way). */
import type { Command } from "commander";
import type { z } from "zod";
import {
  API_LIMITS,
  groupsQuerySchema,
  type groupsResponseSchema,
} from "../../shared/dead-letters/api-schemas.ts";
import { defineAction, type Runtime } from "../command.ts";
import { addApiFlags, collect, validate } from "../flags.ts";
import { oneLine, plural, programOf } from "../format.ts";
import { groupTable } from "../groups-table.ts";
import { BASE_PATH, call, queryOf } from "../http.ts";
import { EXIT } from "../io.ts";

type GroupsResponse = z.output<typeof groupsResponseSchema>;

const FIELDS = ["consumer", "error_class", "include_resolved", "limit"] as const;

export function registerGroups(group: Command, runtime: Runtime): void {
  const command = group
    .command("groups")
    .summary("list failure groups (dead letters that failed the same way)")
    .description(
      "List failure groups: the dead letters of one consumer whose errors share a fingerprint, " +
        "most pending first. A group's hex id is the --group filter of list, replay and discard.",
    )
    .usage("[--consumer <name>] [--error-class <class>] [--include-resolved] [--limit <n>]");
  addApiFlags(command, "Filters:", ["consumer", "error_class", "include_resolved"], {
    consumer: "only this consumer's groups",
    error_class: "only groups of this error class",
  });
  addApiFlags(command, "Paging:", ["limit"], {
    limit: `groups to list, 1–${API_LIMITS.maxGroups} (default ${API_LIMITS.defaultPageSize})`,
  });

  defineAction(command, runtime, async ({ io, options, json, connect }) => {
    const query = validate(groupsQuerySchema, collect(options, FIELDS));
    const conn = await connect();
    const result = await call<GroupsResponse>(conn, "GET", `${BASE_PATH}/groups`, { query: queryOf(query) });
    if (json) {
      io.out(oneLine(result.text));
      return EXIT.ok;
    }
    const { items } = result.body;
    if (items.length === 0) {
      io.out(
        query.include_resolved ? "no failure groups match" : "no failure group has dead letters pending",
      );
      return EXIT.ok;
    }
    for (const line of groupTable(items)) io.out(line);
    io.out("");
    io.out(
      `${plural(items.length, "group")}; the dead letters of one: ${programOf(io)} dead-letters list --group <group>`,
    );
    return EXIT.ok;
  });
}
