/**
 * The reads bench/api.ts times, in order: the list under each filter (status, consumer, queue,
 * error kind, tenant, ids, a one-day window, a deep page), stats, the groups endpoint, the list by
 * failure group (every group in turn, the incidents, with status and consumer), by error class, and
 * by message (a common, a rare and an old-burst word). Filters cycle through their values.
 */
import { at } from "../lib/support.ts";
import { apiEvent, BASE } from "./handler.ts";
import { FAMILY, type Makers, type Operation, type OperationInputs } from "./operation.ts";
import {
  CONSUMERS,
  ERROR_KINDS,
  MESSAGE_BURST,
  MESSAGE_COMMON,
  MESSAGE_RARE,
  QUEUES,
  STATUSES,
  TENANTS,
} from "./world.ts";

export function readOperations(inputs: OperationInputs, make: Makers): Operation[] {
  const { list, groups, timed } = make;
  const { samples, deep } = inputs;
  const { incidentGroups } = inputs.seeded;
  const { groupOrder, classOrder, consumerClassOrder, tenantOrder } = samples;
  const groupOf = (n: number) => at(groupOrder, n % groupOrder.length);
  const incidentOf = (n: number) => at(incidentGroups, n % incidentGroups.length);
  const cycle =
    <T>(items: readonly T[]) =>
    (n: number) =>
      at(items, n % items.length);
  const consumerOf = cycle(CONSUMERS);
  const classOf = cycle(classOrder);
  return [
    list("list_first_page", "list: first page (no filter)", () => ({}), 1),
    list("list_status", "list: status", (n) => ({ status: cycle(STATUSES)(n) }), 4),
    list("list_consumer", "list: consumer", (n) => ({ consumer: consumerOf(n) }), CONSUMERS.length),
    list("list_queue", "list: queue", (n) => ({ queue: cycle(QUEUES)(n) }), QUEUES.length),
    list(
      "list_error_kind",
      "list: error_kind",
      (n) => ({ error_kind: cycle(ERROR_KINDS)(n) }),
      ERROR_KINDS.length,
    ),
    list("list_tenant_id", "list: tenant_id", (n) => ({ tenant_id: cycle(tenantOrder)(n) }), TENANTS.length),
    list("list_job_id", "list: job_id", (n) => ({ job_id: cycle(samples.rows)(n).job_id }), 5),
    list(
      "list_correlation_id",
      "list: correlation_id",
      (n) => ({ correlation_id: cycle(samples.rows)(n).correlation_id }),
      5,
    ),
    list("list_created_window", "list: created_after/before (1 day)", (n) => cycle(samples.windows)(n), 5),
    list("list_deep_page", `list: deep page (after ${deep.depth} pages)`, () => deep.query, 1),
    // Failure groups (issue 15): stats, the groups endpoint, the list by group, class and message.
    timed(
      "stats",
      "stats (with groups)",
      FAMILY.statsGroups,
      () => apiEvent("GET", `${BASE}/stats`, inputs.under.tokens.read),
      1,
    ),
    groups("groups_top", "groups: biggest pending (limit 50)", () => ({}), 1),
    groups("groups_consumer", "groups: consumer", (n) => ({ consumer: consumerOf(n) }), CONSUMERS.length),
    groups(
      "groups_error_class",
      "groups: error_class",
      (n) => ({ error_class: classOf(n) }),
      classOrder.length,
    ),
    groups(
      "groups_all",
      "groups: include_resolved, limit 500",
      () => ({ include_resolved: "true", limit: "500" }),
      1,
    ),
    list(
      "list_group",
      `list: group (each of ${groupOrder.length})`,
      (n) => ({ group: groupOf(n).group }),
      groupOrder.length,
    ),
    list(
      "list_group_incident",
      "list: group, incident bursts (3)",
      (n) => ({ group: incidentOf(n).group }),
      incidentGroups.length,
    ),
    list(
      "list_group_pending",
      "list: group + status pending_review",
      (n) => ({ group: groupOf(n).group, status: "pending_review" }),
      groupOrder.length,
    ),
    list(
      "list_group_consumer",
      "list: group + consumer",
      (n) => ({ group: groupOf(n).group, consumer: groupOf(n).consumer }),
      groupOrder.length,
    ),
    list(
      "list_error_class",
      `list: error_class (each of ${classOrder.length})`,
      (n) => ({ error_class: classOf(n) }),
      classOrder.length,
    ),
    list(
      "list_error_class_consumer_pending",
      "list: error_class + consumer + pending",
      (n) => ({ ...cycle(consumerClassOrder)(n), status: "pending_review" }),
      consumerClassOrder.length,
    ),
    list(
      "list_message_common",
      `list: message "${MESSAGE_COMMON}" (common)`,
      () => ({ message: MESSAGE_COMMON }),
      1,
    ),
    list("list_message_rare", `list: message "${MESSAGE_RARE}" (rare)`, () => ({ message: MESSAGE_RARE }), 1),
    list(
      "list_message_burst",
      `list: message "${MESSAGE_BURST}" (one old burst)`,
      () => ({ message: MESSAGE_BURST }),
      1,
    ),
    list(
      "list_message_consumer_pending",
      `list: message "${MESSAGE_COMMON}" + consumer + pending`,
      (n) => ({ message: MESSAGE_COMMON, consumer: consumerOf(n), status: "pending_review" }),
      CONSUMERS.length,
    ),
  ];
}
