/**
 * The operations bench/api.ts times, in the order it times them: the reads (bench/api/reads.ts:
 * the list under every filter, stats, the groups endpoint), then the bulk operations (plans of a
 * group-sized set, of everything pending, a start), the operations list, get by id, and the
 * single-row replay and discard. Each is a sequence of events, the n-th call's event from `event(n)`,
 * and the events EXPLAINed afterwards.
 */
import type { APIGatewayProxyEventV2 } from "aws-lambda";
import { at } from "../lib/support.ts";
import { apiEvent, BASE, invoke } from "./handler.ts";
import { FAMILY, makers, type Operation, type OperationInputs } from "./operation.ts";
import { readOperations } from "./reads.ts";

/** Every operation, in the order bench/api.ts times them. */
export function buildOperations(inputs: OperationInputs): Operation[] {
  const make = makers(inputs);
  const { timed, planEvent } = make;
  const { api, tokens } = inputs.under;
  const { samples } = inputs;
  const pending = samples.pendingGroupOrder;
  const pendingGroupOf = (n: number) => at(pending, n % pending.length);
  /**
   * A start's filter: the group, and a bound every row passes, distinct per start. One operation
   * per kind and filter may run, and each timed start leaves its operation running.
   */
  const startFilter = (group: string, n: number) => ({
    group,
    created_before: new Date(Date.UTC(9000, 0, 1) + n * 1000).toISOString(),
  });
  const planToken = async (filter: { group: string }): Promise<string> => {
    const { group } = filter;
    const { response } = await invoke(api, planEvent("replay", filter));
    const body = JSON.parse(response.body ?? "{}") as { token?: string | null };
    if (response.statusCode !== 200 || !body.token) {
      throw new Error(`replay plan of group ${group}: ${response.statusCode} ${response.body ?? ""}`);
    }
    return body.token;
  };
  const startEvent = (filter: { group: string }, token: string) =>
    apiEvent("POST", `${BASE}/replay`, tokens.replay, { body: { filter, token } });
  /** Plan tokens for each timed start (by iteration), from plans made just before. */
  const startTokens = new Map<number, string>();
  const wholeSet = {
    target: false,
    warmup: inputs.wholeSetWarmup,
    iterations: inputs.wholeSetIterations,
  };
  const discardBody = { body: { reason: "benchmark: discarded as noise" } };
  return [
    ...readOperations(inputs, make),
    // Bulk operations (issue 15): plans of a group-sized set, then of everything pending.
    timed(
      "replay_plan_group",
      `replay/plan: one group (each of ${pending.length} pending)`,
      FAMILY.plan,
      (n) => planEvent("replay", { group: pendingGroupOf(n).group }),
      pending.length,
    ),
    timed(
      "discard_plan_group",
      `discard/plan: one group (each of ${pending.length} pending)`,
      FAMILY.plan,
      (n) => planEvent("discard", { group: pendingGroupOf(n).group }),
      pending.length,
    ),
    timed(
      "replay_plan_class_consumer",
      "replay/plan: error_class + consumer",
      FAMILY.plan,
      (n) => planEvent("replay", at(samples.consumerClassOrder, n % samples.consumerClassOrder.length)),
      samples.consumerClassOrder.length,
    ),
    timed(
      "replay_plan_all",
      "replay/plan: every pending (a count)",
      FAMILY.planAll,
      () => planEvent("replay", {}),
      1,
      wholeSet,
    ),
    timed(
      "discard_plan_all",
      "discard/plan: every pending (a count)",
      FAMILY.planAll,
      () => planEvent("discard", {}),
      1,
      wholeSet,
    ),
    timed(
      "replay_start_group",
      "replay: start operation (one group, token)",
      FAMILY.start,
      (n) => {
        const token = startTokens.get(n);
        if (token === undefined) throw new Error(`no plan token for start ${n}`);
        return startEvent(startFilter(pendingGroupOf(n).group, n), token);
      },
      0,
      {
        status: 202,
        // A plan per start, made just before (a token starts one operation; it is valid for 15
        // minutes). Starting changes no dead letter, so each set is still the one planned.
        prepare: async () => {
          for (let n = 0; n < inputs.warmup + inputs.iterations; n++)
            startTokens.set(n, await planToken(startFilter(pendingGroupOf(n).group, n)));
        },
        // Planned again: the single replays and discards since have changed the sets.
        explain: async () => {
          const events: APIGatewayProxyEventV2[] = [];
          for (const [i, g] of pending.slice(0, 10).entries()) {
            const filter = startFilter(g.group, 1_000_000 + i);
            events.push(startEvent(filter, await planToken(filter)));
          }
          return events;
        },
      },
    ),
    timed(
      "operations_list",
      "operations: list (newest 20)",
      FAMILY.reads,
      () => apiEvent("GET", `${BASE}/operations`, tokens.read),
      1,
    ),
    timed(
      "get_by_id",
      "get by id",
      FAMILY.reads,
      (n) => apiEvent("GET", `${BASE}/${at(samples.rows, n % samples.rows.length).id}`, tokens.read),
      5,
      { show: false },
    ),
    timed(
      "replay_single",
      "replay (single; SQS send stubbed)",
      FAMILY.writes,
      (n) => apiEvent("POST", `${BASE}/${at(samples.replayIds, n)}/replay`, tokens.replay),
      0,
      {
        show: false,
        explain: async () => [apiEvent("POST", `${BASE}/${samples.explainReplayId}/replay`, tokens.replay)],
      },
    ),
    timed(
      "discard",
      "discard",
      FAMILY.writes,
      (n) => apiEvent("POST", `${BASE}/${at(samples.discardIds, n)}/discard`, tokens.discard, discardBody),
      0,
      {
        show: false,
        explain: async () => [
          apiEvent("POST", `${BASE}/${samples.explainDiscardId}/discard`, tokens.discard, discardBody),
        ],
      },
    ),
  ];
}
