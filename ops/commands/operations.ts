/**
 * `dead-letters operations`: the bulk replays and discards the API runs — list them, follow one
 * (`status <op-id> --watch`), cancel one.
 */
import type { Command } from "commander";
import type { z } from "zod";
import {
  API_LIMITS,
  operationSchema,
  operationsQuerySchema,
  type operationsResponseSchema,
} from "../../shared/dead-letters/api-schemas.ts";
import { defineAction, type Runtime } from "../command.ts";
import { addApiFlags, addWatchFlags, collect, validate, watchSettings } from "../flags.ts";
import { oneLine, plural, programOf } from "../format.ts";
import { call, idPath, OPERATIONS_PATH, queryOf } from "../http.ts";
import { EXIT } from "../io.ts";
import {
  describeOperation,
  type Operation,
  type OperationDetail,
  operationTable,
  outcomes,
} from "../operation-view.ts";
import { clean } from "../text.ts";
import { finishWatch, watchOperation } from "../watch.ts";

type OperationsResponse = z.output<typeof operationsResponseSchema>;

export function registerOperations(group: Command, runtime: Runtime): void {
  const operations = group
    .command("operations")
    .summary("bulk operations: list, status (--watch), cancel")
    .description("Bulk replays and discards: list them, follow one, cancel one.");
  registerList(operations, runtime);
  registerStatus(operations, runtime);
  registerCancel(operations, runtime);
}

function registerList(operations: Command, runtime: Runtime): void {
  // The default: `operations` alone lists them.
  const command = operations
    .command("list", { isDefault: true })
    .summary("list bulk operations, newest first (the default)")
    .description("List bulk operations, newest first.")
    .usage("[--status <status>] [--kind <kind>] [--limit <n>]");
  addApiFlags(command, "Filters:", ["status", "kind"], {
    status: operationSchema.shape.status.options.join(" | "),
  });
  addApiFlags(command, "Paging:", ["limit"], {
    limit: `operations to list, at most ${API_LIMITS.maxOperations}`,
  });

  defineAction(command, runtime, async ({ io, options, json, connect }) => {
    const query = validate(operationsQuerySchema, collect(options, ["status", "kind", "limit"]));
    const conn = await connect();
    const result = await call<OperationsResponse>(conn, "GET", OPERATIONS_PATH, { query: queryOf(query) });
    if (json) {
      io.out(oneLine(result.text));
      return EXIT.ok;
    }
    const { items } = result.body;
    if (items.length === 0) {
      io.out("no operations match");
      return EXIT.ok;
    }
    for (const line of operationTable(items)) io.out(line);
    io.out("");
    io.out(
      `${plural(items.length, "operation")}; one in full: ${programOf(io)} dead-letters operations status <id>`,
    );
    return EXIT.ok;
  });
}

function registerStatus(operations: Command, runtime: Runtime): void {
  const command = operations
    .command("status")
    .summary("show one operation; --watch follows it to its end")
    .description(
      "Show one operation: its progress, outcome, and the dead letters it left pending. With --watch, " +
        "follow it until it ends; then exit 0 if it did all it planned, 1 if it failed, was cancelled " +
        "or some dead letters failed to send.",
    )
    .argument("<op-id>", "the operation's id");
  addWatchFlags(command, "Watch:", "follow the operation until it ends");

  defineAction(command, runtime, async ({ io, args, options, json, connect }) => {
    const [id = ""] = args;
    const { watch, intervalMs } = watchSettings(options);
    const conn = await connect();
    if (watch) {
      const last = await watchOperation(conn, io, id, { json, intervalMs });
      return finishWatch(io, last, json);
    }
    const result = await call<OperationDetail>(conn, "GET", idPath(id, OPERATIONS_PATH));
    if (json) io.out(oneLine(result.text));
    else for (const line of describeOperation(result.body)) io.out(line);
    return EXIT.ok;
  });
}

function registerCancel(operations: Command, runtime: Runtime): void {
  const command = operations
    .command("cancel")
    .summary("stop a running operation")
    .description(
      "Stop a running operation: what it has done stays done, the rest stays pending. Needs the " +
        "permission of the operation's kind (replay or discard).",
    )
    .argument("<op-id>", "the operation's id");

  defineAction(command, runtime, async ({ io, args, json, connect }) => {
    const [id = ""] = args;
    const conn = await connect();
    const result = await call<Operation>(conn, "POST", `${idPath(id, OPERATIONS_PATH)}/cancel`, { body: {} });
    if (json) {
      io.out(oneLine(result.text));
      return EXIT.ok;
    }
    const op = result.body;
    io.out(
      `cancelled ${op.kind} operation ${clean(op.id)} after ${op.processed} of ${op.planned}: ${outcomes(op)}`,
    );
    return EXIT.ok;
  });
}
