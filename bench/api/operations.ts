/**
 * The operations bench/api.ts times, in the order it times them: the reads (bench/api/reads.ts:
 * the list under every filter, stats, the groups endpoint), then the bulk operations (plans of a
 * group-sized set, of everything pending, a start), the operations list, get by id, and the
 * single-row replay and discard. Each is a sequence of events, the n-th call's event from `event(n)`,
 * and the events EXPLAINed afterwards.
 */
import type { APIGatewayProxyEventV2 } from "aws-lambda";
import { at } from "../lib/support.ts";
import { type ApiUnderTest, apiEvent, BASE, invoke } from "./handler.ts";
import { readOperations } from "./reads.ts";
import type { Samples } from "./samples.ts";
import type { Seeded } from "./seed.ts";

/** The target for every operation held to one: p95 under 50 ms. */
export const TARGET_P95_MS = 50;
/** The budget of docs/design.md §10: p95 under 1 s. */
export const BUDGET_P95_MS = 1000;

export interface Operation {
  readonly key: string;
  readonly name: string;
  /** The endpoints it belongs to: the verdict holds each family's worst p95 to the target. */
  readonly family: string;
  /** Held to the p95 target; false: reported only (a plan over every pending dead letter). */
  readonly target: boolean;
  /** Whether its plans are printed whole ("plans shown"): the list, groups, stats and plan reads. */
  readonly show: boolean;
  /** The status a call answers. */
  readonly status: number;
  readonly warmup: number;
  readonly iterations: number;
  /** Runs before the operation's calls: what its events need (plan tokens). */
  readonly prepare?: () => Promise<void>;
  /** The event of the n-th call (warm-up calls first). */
  readonly event: (n: number) => APIGatewayProxyEventV2;
  /** Events whose statements are EXPLAINed (variants of the same shape). */
  readonly explain?: () => Promise<APIGatewayProxyEventV2[]>;
}

/** What the operations are built from. */
export interface OperationInputs {
  readonly warmup: number;
  readonly iterations: number;
  /** Calls of a plan over every pending dead letter: few, each counts the whole pending set. */
  readonly wholeSetWarmup: number;
  readonly wholeSetIterations: number;
  readonly under: ApiUnderTest;
  readonly seeded: Seeded;
  readonly samples: Samples;
  /** How many pages the keyset walk followed, and the query of the page after them. */
  readonly deep: { readonly depth: number; readonly query: Record<string, string> };
}

/** Operation makers with the inputs' defaults (warm-up, iterations, status 200, held to the target). */
export function makers(inputs: OperationInputs) {
  const { tokens } = inputs.under;
  const timed = (
    key: string,
    name: string,
    family: string,
    event: (n: number) => APIGatewayProxyEventV2,
    explainCount: number,
    extra: Partial<Operation> = {},
  ): Operation => ({
    key,
    name,
    family,
    target: true,
    show: true,
    status: 200,
    warmup: inputs.warmup,
    iterations: inputs.iterations,
    event,
    explain: async () => Array.from({ length: explainCount }, (_, n) => event(n)),
    ...extra,
  });
  const listEvent = (query: Record<string, string>) => apiEvent("GET", BASE, tokens.read, { query });
  return {
    timed,
    listEvent,
    list: (key: string, name: string, queryOf: (n: number) => Record<string, string>, explainCount: number) =>
      timed(key, name, FAMILY.list, (n) => listEvent(queryOf(n)), explainCount),
    groups: (
      key: string,
      name: string,
      queryOf: (n: number) => Record<string, string>,
      explainCount: number,
    ) =>
      timed(
        key,
        name,
        FAMILY.statsGroups,
        (n) => apiEvent("GET", `${BASE}/groups`, tokens.read, { query: queryOf(n) }),
        explainCount,
      ),
    planEvent: (kind: "replay" | "discard", filter: Record<string, string>) =>
      apiEvent("POST", `${BASE}/${kind}/plan`, kind === "replay" ? tokens.replay : tokens.discard, {
        body: { filter },
      }),
  };
}

export type Makers = ReturnType<typeof makers>;

/** The families the verdict groups operations into. */
export const FAMILY = {
  list: "list, every filter and the keyset walk",
  statsGroups: "stats and groups",
  plan: "bulk plan of a group-sized set",
  planAll: "bulk plan of every pending dead letter",
  start: "bulk start of one group",
  reads: "operations list and get by id",
  writes: "replay and discard of one dead letter",
} as const;

export function buildOperations(inputs: OperationInputs): Operation[] {
  const make = makers(inputs);
  const { timed, planEvent } = make;
  const { api, tokens } = inputs.under;
  const { samples } = inputs;
  const pending = samples.pendingGroupOrder;
  const pendingGroupOf = (n: number) => at(pending, n % pending.length);
  const planToken = async (group: string): Promise<string> => {
    const { response } = await invoke(api, planEvent("replay", { group }));
    const body = JSON.parse(response.body ?? "{}") as { token?: string | null };
    if (response.statusCode !== 200 || !body.token) {
      throw new Error(`replay plan of group ${group}: ${response.statusCode} ${response.body ?? ""}`);
    }
    return body.token;
  };
  const startEvent = (group: string, token: string) =>
    apiEvent("POST", `${BASE}/replay`, tokens.replay, { body: { filter: { group }, token } });
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
        return startEvent(pendingGroupOf(n).group, token);
      },
      0,
      {
        status: 202,
        // A plan per start, made just before (a token starts one operation; it is valid for 15
        // minutes). Starting changes no dead letter, so each set is still the one planned.
        prepare: async () => {
          for (let n = 0; n < inputs.warmup + inputs.iterations; n++)
            startTokens.set(n, await planToken(pendingGroupOf(n).group));
        },
        // Planned again: the single replays and discards since have changed the sets.
        explain: async () => {
          const events: APIGatewayProxyEventV2[] = [];
          for (const g of pending.slice(0, 10)) events.push(startEvent(g.group, await planToken(g.group)));
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
