/**
 * Bulk replay and discard, shared by both commands: a plan (how many match, a sample, the token
 * that pins the set), then the operation the API runs at its own pace, which the CLI can follow.
 * The API decides when a set needs the plan's token (a large set, or every pending dead letter);
 * the CLI explains each refusal with the command that fixes it.
 */
import type { z } from "zod";
import type { operationStartSchema, planResponseSchema } from "../shared/dead-letters/api-schemas.ts";
import { PLAN_TOKEN_TTL_SECONDS } from "../shared/dead-letters/plan-token.ts";
import type { Invocation } from "./command.ts";
import { ApiError } from "./errors.ts";
import { oneLine, plural, programOf, shellQuote, suggest } from "./format.ts";
import { type ApiResult, BASE_PATH, call } from "./http.ts";
import { EXIT } from "./io.ts";
import { summaryTable } from "./summaries.ts";
import { clean } from "./text.ts";
import { finishWatch, watchOperation } from "./watch.ts";

type Plan = z.output<typeof planResponseSchema>;

/** How long a plan's token lasts, as the hint says it. */
const PLAN_TOKEN_TTL_MINUTES = PLAN_TOKEN_TTL_SECONDS / 60;
type StartedOperation = z.output<typeof operationStartSchema>;

export type BulkKind = "replay" | "discard";

/** A bulk request as the CLI makes it. */
export interface BulkRequest {
  readonly kind: BulkKind;
  /** The validated request body. */
  readonly body: Readonly<Record<string, unknown>>;
  /**
   * The flags that chose the set, as the operator typed them (["--consumer", "x"], or ["--all"]):
   * the commands the CLI suggests (start this plan, plan this set) repeat them.
   */
  readonly selection: readonly string[];
  /** Other flags a suggested start repeats (["--delay", "30"], ["--reason", "…"]). */
  readonly extras: readonly string[];
}

/** Prints what a bulk operation would do; changes nothing. */
export async function planBulk(invocation: Invocation, request: BulkRequest): Promise<number> {
  const { io, json } = invocation;
  const conn = await invocation.connect();
  const result = await call<Plan>(conn, "POST", `${BASE_PATH}/${request.kind}/plan`, { body: request.body });
  if (json) {
    io.out(oneLine(result.text));
    return EXIT.ok;
  }
  const plan = result.body;
  const of = `(of ${plan.pending_total} pending in all)`;
  if (plan.matched === 0 || plan.token === null) {
    io.out(`${request.kind} plan: no pending dead letters match ${of}; nothing to do`);
    io.out("nothing was changed");
    return EXIT.ok;
  }
  const matches = `${plural(plan.matched, "pending dead letter")} ${plan.matched === 1 ? "matches" : "match"} ${of}`;
  if (request.kind === "replay") {
    const wouldSend = plan.would_send ?? plan.matched;
    const conflicts = plan.conflicts ?? 0;
    const superseded = plan.superseded ?? plan.matched - wouldSend - conflicts;
    io.out(
      `replay plan: ${matches}; a replay would send ${wouldSend}, ` +
        `resolve ${superseded} as superseded (their jobs already succeeded) ` +
        `and leave ${conflicts} pending as conflicts (their job ids were applied as other jobs)`,
    );
    if (plan.note !== undefined) io.out(`note: ${clean(plan.note)}`);
  } else {
    io.out(
      `discard plan: ${matches}; a discard would resolve ${plan.matched === 1 ? "it" : "all of them"} as discarded`,
    );
  }
  if (plan.sample.length > 0) {
    io.out("");
    io.out(`sample (${plan.sample.length} of ${plan.matched}):`);
    for (const line of summaryTable(plan.sample)) io.out(line);
  }
  io.out("");
  io.out(
    `start it with this plan's token (${plan.confirmation_required ? "required for this set" : "it pins the set"}; ` +
      `it expires at ${clean(plan.token_expires_at)}):`,
  );
  io.out(`  ${clean(startCommand(request, plan.token, programOf(io)))}`);
  io.out("nothing was changed");
  return EXIT.ok;
}

/** The command that starts a planned operation. */
function startCommand(request: BulkRequest, token: string, program: string): string {
  const command = suggest(
    [request.kind, ...request.selection, ...request.extras, "--confirm", token],
    program,
  );
  // A discard needs its reason; the plan did not, so the operator may still have to write one.
  return request.kind === "discard" && !request.extras.includes("--reason")
    ? `${command} --reason "<why>"`
    : command;
}

export interface StartOptions {
  readonly watch: boolean;
  readonly intervalMs: number;
}

/** Starts a bulk operation; with `watch`, follows it to its end. */
export async function startBulk(
  invocation: Invocation,
  request: BulkRequest,
  options: StartOptions,
): Promise<number> {
  const { io, json } = invocation;
  const conn = await invocation.connect();
  let started: ApiResult<StartedOperation>;
  try {
    started = await call<StartedOperation>(conn, "POST", `${BASE_PATH}/${request.kind}`, {
      body: request.body,
    });
  } catch (error) {
    if (error instanceof ApiError && error.status === 409 && error.reason === "nothing-matched") {
      // Nothing left to do is the outcome a re-run after a finished operation wants: not a failure.
      (json ? io.err : io.out)(`no pending dead letters match: nothing to ${request.kind}`);
      return EXIT.ok;
    }
    throw explain(error, request, programOf(io));
  }
  const op = started.body;
  if (json) io.out(oneLine(started.text));
  else {
    io.out(
      `started ${op.kind} operation ${clean(op.id)}: ${plural(op.planned, "dead letter")} at up to ${op.rate_per_second}/s`,
    );
    // A plan's token starts the planned rows only; what matched since stays pending, and says so.
    if (op.newer_not_included > 0) {
      io.out(
        `${plural(op.newer_not_included, "newer matching dead letter")} not included: recorded after the plan, ${op.newer_not_included === 1 ? "it stays" : "they stay"} pending; plan again to include ${op.newer_not_included === 1 ? "it" : "them"}`,
      );
    }
  }
  if (!options.watch) {
    if (!json)
      io.out(`follow it: ${programOf(io)} dead-letters operations status ${shellQuote(op.id)} --watch`);
    return EXIT.ok;
  }
  if (!json) {
    io.err(
      `watching; Ctrl-C stops watching, not the operation (${programOf(io)} dead-letters operations cancel ${shellQuote(op.id)} does)`,
    );
  }
  const last = await watchOperation(conn, io, op.id, { json, intervalMs: options.intervalMs });
  return finishWatch(io, last, json);
}

/** A refused start with what to do about it. */
function explain(error: unknown, request: BulkRequest, program: string): unknown {
  if (!(error instanceof ApiError)) return error;
  const plan = suggest([request.kind, ...request.selection, "--plan"], program);
  if (error.status === 428) {
    return error.withHint(
      `  hint: plan it first — ${clean(plan)} — then start it with the --confirm <plan-token> it prints`,
    );
  }
  if (error.status === 409 && (error.reason === "plan-stale" || error.reason === "plan-expired")) {
    const why =
      error.reason === "plan-stale" ? "the matching dead letters changed since the plan" : "the plan expired";
    return error.withHint(`  hint: ${why}; plan again — ${clean(plan)} — and start it with the new token`);
  }
  if (error.status === 400 && refusesField(error, "token")) {
    return error.withHint(
      `  hint: a plan's token works only with the API that issued it, within ${PLAN_TOKEN_TTL_MINUTES} minutes and not after a restart of the local stack; plan again — ${clean(plan)} — and start it with the new token`,
    );
  }
  return error;
}

/** Whether a 400 problem names `field` among the request's invalid fields. */
function refusesField(error: ApiError, field: string): boolean {
  const errors = error.problem?.errors;
  return Array.isArray(errors) && errors.some((e) => (e as { field?: unknown })?.field === field);
}
