/**
 * `dead-letters discard`: resolve dead letters as discarded, never to be replayed, with a reason
 * that is recorded: one by id, or the pending dead letters a filter matches (--plan, then start).
 */
import type { Command } from "commander";
import type { z } from "zod";
import {
  API_LIMITS,
  bulkDiscardBodySchema,
  discardBodySchema,
  discardPlanBodySchema,
  type discardResponseSchema,
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

type DiscardResponse = z.output<typeof discardResponseSchema>;

/** A refused reason reads as what is missing, whichever rule of the schema it broke. */
const REASON_LEAD = { reason: "discard needs --reason" } as const;

export function registerDiscard(group: Command, runtime: Runtime): void {
  const command = group
    .command("discard")
    .summary("discard one dead letter, or plan and start a bulk discard")
    .description(
      [
        "Resolve pending dead letters as discarded: they will never be replayed. The reason is recorded.",
        "With an id: that dead letter. With filters (or --all): the pending dead letters they match, as " +
          "one operation the API runs at --rate; --plan first shows how many match and prints the token " +
          "(--confirm) that starts exactly that set.",
      ].join("\n\n"),
    )
    .argument("[id]", "the dead letter to discard")
    .usage(
      [
        '<id> --reason "<why>"',
        `       ${programOf(runtime.io)} dead-letters discard <filters…> | --all  --plan`,
        `       ${programOf(runtime.io)} dead-letters discard <filters…> | --all  --reason "<why>" [--confirm <plan-token>] [--rate <n>] [--watch]`,
      ].join("\n"),
    );
  addApiFlags(command, "Discard:", ["reason"], {
    reason: `required: why (recorded as discard_reason; ≤ ${API_LIMITS.maxReasonLength} chars)`,
  });
  addBulkFlags(command, "discard", API_LIMITS.defaultDiscardRate);

  defineAction(command, runtime, async (invocation) => {
    const [id] = invocation.args;
    return id === undefined ? discardSet(invocation) : discardOne(invocation, id);
  });
}

/** Refuses a discard without --reason before anything else is checked: it is never optional. */
function requireReason(reason: unknown, what: string): void {
  if (reason === undefined) {
    throw new UsageError(`discard needs --reason: say why ${what} will never be replayed`);
  }
}

async function discardOne(invocation: Invocation, id: string): Promise<number> {
  const { io, options, json } = invocation;
  const bulkFlag = bulkFlagGiven(options);
  if (bulkFlag !== undefined) {
    throw new UsageError(
      `discard <id> discards one dead letter; ${bulkFlag} is for a bulk discard (without an id)`,
    );
  }
  requireReason(options.reason, "this dead letter");
  const body = validate(discardBodySchema, collect(options, ["reason"]), REASON_LEAD);
  const conn = await invocation.connect();
  const result = await call<DiscardResponse>(conn, "POST", `${idPath(id)}/discard`, { body });
  if (json) {
    io.out(oneLine(result.text));
    return EXIT.ok;
  }
  io.out(`discarded ${clean(result.body.id)}: ${clean(result.body.reason)}`);
  return EXIT.ok;
}

async function discardSet(invocation: Invocation): Promise<number> {
  const { options } = invocation;
  const plan = options.plan === true;
  // A plan changes nothing and needs no reason; a reason given with it is checked and repeated.
  if (!plan) requireReason(options.reason, "these dead letters");
  const chosen = selection(options, "discard");
  const filter = collect(options, FILTER_FIELDS);
  const reason = asTyped(options, ["reason"]);
  if (plan) {
    if (options.reason !== undefined) validate(discardBodySchema, collect(options, ["reason"]), REASON_LEAD);
    const body = validate(discardPlanBodySchema, { filter });
    return planBulk(invocation, { kind: "discard", body, selection: chosen, extras: reason });
  }
  const body = validate(
    bulkDiscardBodySchema,
    { filter, ...collect(options, ["reason", "token", "rate_per_second"]) },
    REASON_LEAD,
  );
  return startBulk(
    invocation,
    { kind: "discard", body, selection: chosen, extras: reason },
    watchSettings(options),
  );
}
