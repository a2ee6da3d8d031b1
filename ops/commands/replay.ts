/**
 * `dead-letters replay`: one dead letter by id (sent again now, or after --delay), or the pending
 * dead letters a filter matches — planned with --plan, then started as an operation the API runs.
 */
import type { Command } from "commander";
import type { z } from "zod";
import {
  API_LIMITS,
  bulkReplayBodySchema,
  replayBodySchema,
  replayPlanBodySchema,
  type replayResponseSchema,
} from "../../shared/dead-letters/api-schemas.ts";
import { planBulk, startBulk } from "../bulk.ts";
import { addBulkFlags, bulkFlagGiven, selection } from "../bulk-flags.ts";
import { defineAction, type Invocation, type Runtime } from "../command.ts";
import { UsageError } from "../errors.ts";
import { addApiFlags, asTyped, collect, FILTER_FIELDS, validate, watchSettings } from "../flags.ts";
import { oneLine, programOf } from "../format.ts";
import { call, idPath } from "../http.ts";
import { EXIT } from "../io.ts";
import { clean } from "../text.ts";

type ReplayResponse = z.output<typeof replayResponseSchema>;

export function registerReplay(group: Command, runtime: Runtime): void {
  const command = group
    .command("replay")
    .summary("replay one dead letter, or plan and start a bulk replay")
    .description(
      [
        "With an id: send that dead letter's stored envelope again to its queue (same job_id), or " +
          "resolve it as superseded when its job already succeeded.",
        "With filters (or --all): replay the pending dead letters they match, as one operation the API " +
          "runs at --rate. --plan first shows how many match and prints the token (--confirm) that starts " +
          "exactly that set; the API requires it for a large set or for every pending dead letter. " +
          "With --watch, exit 1 if any failed to send (they stay pending_review).",
      ].join("\n\n"),
    )
    .argument("[id]", "the dead letter to replay")
    .usage(
      [
        "<id> [--delay <seconds>] [--force-outlived --reason <why>]",
        `       ${programOf(runtime.io)} dead-letters replay <filters…> | --all  --plan [--delay <seconds>]`,
        `       ${programOf(runtime.io)} dead-letters replay <filters…> | --all  [--confirm <plan-token>] [--rate <n>] [--delay <seconds>] [--watch]`,
      ].join("\n"),
    );
  addApiFlags(command, "Replay:", ["delay_seconds", "force_outlived", "reason"], {
    reason: `with --force-outlived: why the job is known not to have been applied (recorded as discard_reason; ≤ ${API_LIMITS.maxReasonLength} chars)`,
  });
  addBulkFlags(command, "replay", API_LIMITS.defaultReplayRate);

  defineAction(command, runtime, async (invocation) => {
    const [id] = invocation.args;
    return id === undefined ? replaySet(invocation) : replayOne(invocation, id);
  });
}

async function replayOne(invocation: Invocation, id: string): Promise<number> {
  const { io, options, json } = invocation;
  const bulkFlag = bulkFlagGiven(options);
  if (bulkFlag !== undefined) {
    throw new UsageError(
      `replay <id> replays one dead letter; ${bulkFlag} is for a bulk replay (without an id)`,
    );
  }
  const body = validate(replayBodySchema, collect(options, ["delay_seconds", "force_outlived", "reason"]));
  const conn = await invocation.connect();
  const result = await call<ReplayResponse>(conn, "POST", `${idPath(id)}/replay`, { body });
  if (json) {
    io.out(oneLine(result.text));
    return EXIT.ok;
  }
  const r = result.body;
  if (r.status === "superseded") {
    io.out(`superseded ${clean(r.id)}: its job already succeeded (the fence exists); nothing was sent`);
  } else {
    const delay = body.delay_seconds > 0 ? `, delivered in ${body.delay_seconds} s` : "";
    io.out(`replayed ${clean(r.id)} (SQS message ${clean(r.message_id)}${delay})`);
    // The API's word on a body no consumer can read: it is coming back as poison.
    if (r.note !== undefined) io.out(`note: ${clean(r.note)}`);
  }
  return EXIT.ok;
}

async function replaySet(invocation: Invocation): Promise<number> {
  const { options } = invocation;
  const chosen = selection(options, "replay");
  const filter = collect(options, FILTER_FIELDS);
  const delay = asTyped(options, ["delay_seconds"]);
  if (options.plan === true) {
    const body = validate(replayPlanBodySchema, {
      filter,
      ...collect(options, ["delay_seconds", "force_outlived"]),
    });
    return planBulk(invocation, { kind: "replay", body, selection: chosen, extras: delay });
  }
  const body = validate(bulkReplayBodySchema, {
    filter,
    ...collect(options, ["token", "rate_per_second", "delay_seconds", "force_outlived", "reason"]),
  });
  return startBulk(
    invocation,
    { kind: "replay", body, selection: chosen, extras: delay },
    watchSettings(options),
  );
}
