/**
 * `dead-letters list`: dead letters matching filters, newest first, a page or all of them; with
 * --errors, each one's last error too.
 */
import type { Command } from "commander";
import type { z } from "zod";
import {
  API_LIMITS,
  listQuerySchema,
  type listResponseSchema,
} from "../../shared/dead-letters/api-schemas.ts";
import { defineAction, type Runtime } from "../command.ts";
import { CliFailure } from "../errors.ts";
import { addApiFlags, addCliFlag, collect, FILTER_FIELDS, validate } from "../flags.ts";
import { oneLine, plural } from "../format.ts";
import { BASE_PATH, call, queryOf } from "../http.ts";
import { EXIT } from "../io.ts";
import { type DeadLetterSummary, ERROR_COLUMN, summaryTable } from "../summaries.ts";

type ListResponse = z.output<typeof listResponseSchema>;

export function registerList(group: Command, runtime: Runtime): void {
  const command = group
    .command("list")
    .summary("list dead letters, newest first")
    .description("List dead letters, newest first.")
    .usage("[--status <s>] [filters] [--limit <n>] [--cursor <c>] [--all-pages] [--errors]");
  addApiFlags(command, "Filters:", ["status", ...FILTER_FIELDS]);
  addApiFlags(command, "Paging:", ["limit", "cursor"], {
    limit: `rows per page, 1–${API_LIMITS.maxPageSize} (default ${API_LIMITS.defaultPageSize})`,
  });
  addCliFlag(
    command,
    "Paging:",
    "--all-pages",
    "follow next_cursor to the last page (--json: one page per line)",
  );
  addCliFlag(
    command,
    "Output:",
    "--errors",
    `add a last_error column: each one's error class and message, cut at ${ERROR_COLUMN.max} characters (show <id> prints it whole)`,
  );

  defineAction(command, runtime, async ({ io, options, json, connect }) => {
    const query = validate(
      listQuerySchema,
      collect(options, ["status", ...FILTER_FIELDS, "limit", "cursor"]),
    );
    const allPages = options.allPages === true;
    const conn = await connect();

    const items: DeadLetterSummary[] = [];
    let cursor = query.cursor;
    let next: string | null = null;
    for (;;) {
      const page = await call<ListResponse>(conn, "GET", BASE_PATH, {
        query: queryOf({ ...query, cursor }),
      });
      if (json) io.out(oneLine(page.text));
      else items.push(...page.body.items);
      next = page.body.next_cursor;
      if (!allPages || next === null) break;
      if (next === cursor) throw new CliFailure(["error: the API returned the same cursor twice; stopping"]);
      cursor = next;
    }
    if (json) return EXIT.ok;

    if (items.length === 0) {
      io.out("no dead letters match");
      return EXIT.ok;
    }
    for (const line of summaryTable(items, { errors: options.errors === true })) io.out(line);
    io.out("");
    io.out(
      next === null
        ? plural(items.length, "dead letter")
        : `${plural(items.length, "dead letter")} shown; more follow: add --cursor ${next} (same filters), or --all-pages`,
    );
    return EXIT.ok;
  });
}
