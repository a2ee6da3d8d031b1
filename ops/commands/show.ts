/** `dead-letters show <id>`: one dead letter whole, its attempt history included. */
import type { Command } from "commander";
import type { z } from "zod";
import type { deadLetterSchema } from "../../shared/dead-letters/api-schemas.ts";
import { defineAction, type Runtime } from "../command.ts";
import { oneLine, prettyJson } from "../format.ts";
import { call, idPath } from "../http.ts";
import { EXIT } from "../io.ts";
import { table } from "../table.ts";
import { clean } from "../text.ts";

type DeadLetter = z.output<typeof deadLetterSchema>;

const FIELD_COLUMNS = [{ header: "field" }, { header: "value" }] as const;
const ATTEMPT_COLUMNS = [
  { header: "attempt", align: "right" },
  { header: "at" },
  { header: "receive" },
  { header: "kind" },
  { header: "error" },
] as const;

const STEP_COLUMNS = [
  { header: "position", align: "right" },
  { header: "step" },
  { header: "when" },
  { header: "key" },
  { header: "result" },
] as const;

export function registerShow(group: Command, runtime: Runtime): void {
  const command = group
    .command("show")
    .summary("show one dead letter whole, with its attempt history")
    .description(
      "Show one dead letter whole: its fields, last error and stack, the attempts that led to it, " +
        "message attributes and payload.",
    )
    .argument("<id>", "the dead letter's id");

  defineAction(command, runtime, async ({ io, args, json, connect }) => {
    const [id = ""] = args;
    const conn = await connect();
    const result = await call<DeadLetter>(conn, "GET", idPath(id));
    if (json) {
      io.out(oneLine(result.text));
      return EXIT.ok;
    }
    for (const line of describe(result.body)) io.out(line);
    return EXIT.ok;
  });
}

/** The lines `show` prints for a dead letter. */
function describe(d: DeadLetter): string[] {
  const fields: [string, unknown][] = [
    ["id", d.id],
    ["status", d.status],
    ["consumer", d.consumer],
    ["queue", d.queue],
    ["job_id", d.job_id],
    ["tenant_id", d.tenant_id],
    ["correlation_id", d.correlation_id],
    ["error_kind", d.error_kind],
    ["error_class", d.error_class],
    ["group", d.group],
    ["attempts", d.attempts],
    ["created_at", d.created_at],
    ["resolved_at", d.resolved_at],
    ["resolved_by", d.resolved_by],
    ["discard_reason", d.discard_reason],
    ["last_error", d.last_error ? `${d.last_error.class}: ${d.last_error.message}` : null],
    ["job_fingerprint", d.job_fingerprint],
    ["fence_fingerprint", d.fence_fingerprint],
  ];
  // The replay links, when there are: where this one came from, and what its replay became.
  if (d.replay_of) fields.push(["replay_of", `${d.replay_of} (replayed; its run failed again as this one)`]);
  if (d.replay_failed_as)
    fields.push(["replay_failed_as", `${d.replay_failed_as} (its replay's run failed again as that one)`]);
  const lines = table(FIELD_COLUMNS, fields, { header: false });
  if (d.last_error?.stack) {
    lines.push("", "stack:");
    for (const line of d.last_error.stack.split("\n")) lines.push(`  ${clean(line)}`);
  }
  if (Array.isArray(d.attempt_history) && d.attempt_history.length > 0) {
    // One line per failed run or interruption, oldest first: how it came to be dead-lettered.
    lines.push("", "attempts:");
    const rows = d.attempt_history.map((entry) => [
      entry.attempt,
      entry.at,
      `receive ${entry.receive_count}`,
      entry.kind,
      `${entry.error?.name}: ${entry.error?.message}`,
    ]);
    lines.push(...table(ATTEMPT_COLUMNS, rows, { header: false, indent: "  " }));
  }
  if (Array.isArray(d.steps) && d.steps.length > 0) {
    // The calls outside the database that happened: the work's failure undid none of them.
    lines.push("", "steps (calls outside the database; a failure of the work does not undo them):");
    const rows = d.steps.map((step) => [
      step.position,
      clean(step.name),
      step.recorded_at === null ? `called ${step.called_at}` : `recorded ${step.recorded_at}`,
      `key ${clean(step.key)}`,
      step.recorded_at === null
        ? "no answer recorded: the provider may have acted (look the key up there)"
        : clean(JSON.stringify(step.result)),
    ]);
    lines.push(...table(STEP_COLUMNS, rows, { header: false, indent: "  " }));
  }
  lines.push("", "message_attributes:");
  for (const line of prettyJson(d.message_attributes ?? {}).split("\n")) lines.push(`  ${clean(line)}`);
  lines.push("");
  if (d.payload !== null && d.payload !== undefined) {
    lines.push("payload:");
    for (const line of prettyJson(d.payload).split("\n")) lines.push(`  ${clean(line)}`);
  } else {
    // Not JSON jsonb could hold: the body is all there is, shown as one escaped string literal.
    lines.push(`body (${clean(d.body_form ?? "text")}, not stored as JSON):`);
    lines.push(`  ${clean(JSON.stringify(d.body ?? ""))}`);
  }
  return lines;
}
