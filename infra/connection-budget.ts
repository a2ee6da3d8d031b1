/**
 * The database connections a deployment's consumers can hold at once, checked at synth against the
 * budget the deployment declares. Every consumer and backstop-drain instance (one concurrent
 * invocation) opens its own pool, so the worst case is each function's concurrency bound times its
 * pool's size. These are the functions whose instances scale with their queues; the API, the
 * bulk-operations worker, cleanup, escalation and the migrations connect besides (docs/scaling.md),
 * so the budget leaves room for them.
 *
 * Provisioned mode scales a consumer fastest and furthest (up to 10 invocations a poller), so the
 * reference stack refuses it unless a budget is declared.
 */
import type { ConsumerDeployment } from "../functions/consumers.ts";
import { CONSUMER_DEFAULTS as CONSUMER_CONFIG_DEFAULTS } from "../shared/config/consumer-config.ts";
import { POOL_DEFAULTS } from "../shared/db/pool.ts";
import { BACKSTOP_DRAIN_DEFAULTS } from "./defaults.ts";

/** One consumer's worst case: its function's and its backstop drain's. */
export interface ConsumerConnections {
  readonly consumer: string;
  /** Its maxConcurrency: with provisioned pollers, validated to cover their reach. */
  readonly concurrency: number;
  /** Connections of one consumer instance's pool (`JOBFENCE_POOL_MAX`, deployed explicitly). */
  readonly poolMax: number;
  readonly drainConcurrency: number;
  /** The drain's pool: it passes no size, so the pool's default. */
  readonly drainPoolMax: number;
  /** concurrency × poolMax + drainConcurrency × drainPoolMax. */
  readonly total: number;
  /** Whether its event source runs in provisioned mode. */
  readonly provisioned: boolean;
}

/** The connections `deployment` can hold at once. */
export function consumerConnections(deployment: ConsumerDeployment): ConsumerConnections {
  const concurrency = deployment.maxConcurrency;
  const poolMax = CONSUMER_CONFIG_DEFAULTS.poolMax;
  const drainConcurrency = BACKSTOP_DRAIN_DEFAULTS.maxConcurrency;
  const drainPoolMax = POOL_DEFAULTS.max;
  return Object.freeze({
    consumer: deployment.definition.name,
    concurrency,
    poolMax,
    drainConcurrency,
    drainPoolMax,
    total: concurrency * poolMax + drainConcurrency * drainPoolMax,
    provisioned: deployment.provisionedPollers !== undefined,
  });
}

/**
 * Every problem with `budget` for these consumers, one line each with the arithmetic and what to
 * change; empty when fine. Without a budget only provisioned mode is refused.
 */
export function validateConnectionBudget(
  consumers: readonly ConsumerConnections[],
  budget: number | undefined,
): string[] {
  if (budget === undefined) {
    return consumers
      .filter((c) => c.provisioned)
      .map(
        (c) =>
          `consumer "${c.consumer}" uses provisioned pollers, which can run up to maxConcurrency ${c.concurrency} ` +
          `invocations at once, each holding ${c.poolMax} database connections: declare connectionBudget (the ` +
          "connections the database accepts from the consumers and their backstop drains) so the worst case is " +
          "checked against it",
      );
  }
  if (!Number.isInteger(budget) || budget < 1) {
    return [`connectionBudget must be a whole number of connections, at least 1, got ${budget}`];
  }
  const total = consumers.reduce((sum, c) => sum + c.total, 0);
  if (total <= budget) return [];
  const terms = consumers.map(
    (c) =>
      `${c.concurrency} × ${c.poolMax} (${c.consumer}) + ${c.drainConcurrency} × ${c.drainPoolMax} (its backstop drain)`,
  );
  return [
    `the consumers and their backstop drains can hold ${terms.join(" + ")} = ${total} database connections at ` +
      `once (invocations × connections per pool), over connectionBudget ${budget}: with every instance busy ` +
      "the database would refuse connections and the records would fail unrecorded; lower maxConcurrency " +
      "(with provisioned pollers, maximumPollers first), or raise connectionBudget together with what the " +
      "database allows (max_connections, the proxy's MaxConnectionsPercent)",
  ];
}
