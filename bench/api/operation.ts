/**
 * What an operation of bench/api.ts is, the families the verdict groups them into, and the makers
 * that build one with the inputs' defaults. bench/api/reads.ts and bench/api/operations.ts build
 * the operations from them.
 */
import type { APIGatewayProxyEventV2 } from "aws-lambda";
import { type ApiUnderTest, apiEvent, BASE } from "./handler.ts";
import type { Samples } from "./samples.ts";
import type { Seeded } from "./seed.ts";

/** The target for every operation held to one: p95 under 50 ms. */
export const TARGET_P95_MS = 50;
/** The budget of docs/design.md §10: p95 under 1 s. */
export const BUDGET_P95_MS = 1000;

/** One timed operation: the events of its calls, and what the verdict holds it to. */
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

/** What {@link makers} returns. */
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
