/**
 * The database connections a deployment's consumers can hold at once, checked at synth against the
 * budget the deployment declares. Every consumer and backstop-drain instance (one concurrent
 * invocation) opens its own pool, so the worst case is each function's concurrency bound times its
 * pool's size. These are the functions whose instances scale with their queues, and a sending
 * consumer's outbox relay, which logs in as the consumer (one run at a time, one connection); the
 * API, the bulk-operations worker, cleanup, escalation and the migrations connect besides
 * (docs/scaling.md), so the budget leaves room for them.
 *
 * Provisioned mode scales a consumer fastest and furthest (up to 10 invocations a poller), so the
 * reference stack refuses it unless a budget is declared.
 *
 * On Lambda Managed Instances an execution environment runs many invocations at once, and its
 * worker threads' pools are sized to share the environment's concurrency (a record holds one
 * connection at a time: shared/invocation/concurrency.ts), so an environment holds at most its
 * PerExecutionEnvironmentMaxConcurrency connections, and the consumer at most that times its
 * execution environments. Idle connections outlive the invocations that opened them, so the event
 * source's maxConcurrency does not bound this; the environments do. Such a consumer needs a
 * declared budget too.
 */
import type { ConsumerDeploymentSettings } from "../functions/consumer-deployment.ts";
import { CONSUMER_DEFAULTS as CONSUMER_CONFIG_DEFAULTS } from "../shared/config/consumer-config.ts";
import { POOL_DEFAULTS } from "../shared/db/pool.ts";
import { BACKSTOP_DRAIN_DEFAULTS, OUTBOX_RELAY_DEFAULTS } from "./defaults.ts";

/** How a consumer runs on Lambda Managed Instances, as far as its connections go. */
export interface ManagedInstancesConnections {
  /** Concurrent invocations per execution environment (PerExecutionEnvironmentMaxConcurrency). */
  readonly perExecutionEnvironmentMaxConcurrency: number;
  /** The most execution environments the function scales to. */
  readonly maxExecutionEnvironments: number;
}

/** One consumer's worst case: its function's, its backstop drain's and its outbox relay's. */
export interface ConsumerConnections {
  readonly consumer: string;
  /**
   * Its instances at once: its maxConcurrency (with provisioned pollers, validated to cover their
   * reach); on Lambda Managed Instances, its execution environments.
   */
  readonly concurrency: number;
  /**
   * Connections of one instance: its pool (`JOBFENCE_POOL_MAX`, deployed explicitly); on Lambda
   * Managed Instances, an environment's concurrency, which its workers' pools share.
   */
  readonly poolMax: number;
  readonly drainConcurrency: number;
  /** The drain's pool: it passes no size, so the pool's default. */
  readonly drainPoolMax: number;
  /** Runs of its scheduled outbox relay at once: 1 when its definition sends follow-ups, else 0. */
  readonly relayConcurrency: number;
  /** The relay's pool: one connection. */
  readonly relayPoolMax: number;
  /** concurrency × poolMax + drainConcurrency × drainPoolMax + relayConcurrency × relayPoolMax. */
  readonly total: number;
  /** Whether its event source runs in provisioned mode. */
  readonly provisioned: boolean;
  /** Whether its function runs on Lambda Managed Instances. */
  readonly managedInstances: boolean;
}

/** The connections `deployment` can hold at once, on Lambda Managed Instances when `managed` is given. */
export function consumerConnections(
  deployment: ConsumerDeploymentSettings,
  managed?: ManagedInstancesConnections,
): ConsumerConnections {
  const concurrency = managed ? managed.maxExecutionEnvironments : deployment.maxConcurrency;
  const poolMax = managed ? managed.perExecutionEnvironmentMaxConcurrency : CONSUMER_CONFIG_DEFAULTS.poolMax;
  const drainConcurrency = BACKSTOP_DRAIN_DEFAULTS.maxConcurrency;
  const drainPoolMax = POOL_DEFAULTS.max;
  // Only a consumer that sends follow-ups has a relay (JobConsumer deploys none otherwise).
  const sends = Object.keys(deployment.definition.sends ?? {}).length > 0;
  const relayConcurrency = sends ? OUTBOX_RELAY_DEFAULTS.concurrency : 0;
  const relayPoolMax = OUTBOX_RELAY_DEFAULTS.poolMax;
  return Object.freeze({
    consumer: deployment.definition.name,
    concurrency,
    poolMax,
    drainConcurrency,
    drainPoolMax,
    relayConcurrency,
    relayPoolMax,
    total: concurrency * poolMax + drainConcurrency * drainPoolMax + relayConcurrency * relayPoolMax,
    provisioned: deployment.provisionedPollers !== undefined,
    managedInstances: managed !== undefined,
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
    const declare =
      ": declare connectionBudget (the connections the database accepts from the consumers, their backstop " +
      "drains and outbox relays) so the worst case is checked against it";
    return consumers
      .filter((c) => c.provisioned || c.managedInstances)
      .map((c) =>
        c.managedInstances
          ? `consumer "${c.consumer}" runs on Lambda Managed Instances, up to ${c.concurrency} execution ` +
            `environments each holding up to ${c.poolMax} database connections (one per concurrent invocation)${declare}`
          : `consumer "${c.consumer}" uses provisioned pollers, which can run up to maxConcurrency ${c.concurrency} ` +
            `invocations at once, each holding ${c.poolMax} database connections${declare}`,
      );
  }
  if (!Number.isInteger(budget) || budget < 1) {
    return [`connectionBudget must be a whole number of connections, at least 1, got ${budget}`];
  }
  const total = consumers.reduce((sum, c) => sum + c.total, 0);
  if (total <= budget) return [];
  const terms = consumers.map(
    (c) =>
      `${c.concurrency} × ${c.poolMax} (${c.consumer}${c.managedInstances ? ": execution environments × their concurrency" : ""}) + ` +
      `${c.drainConcurrency} × ${c.drainPoolMax} (its backstop drain)` +
      (c.relayConcurrency > 0 ? ` + ${c.relayConcurrency} × ${c.relayPoolMax} (its outbox relay)` : ""),
  );
  return [
    `the consumers, their backstop drains and outbox relays can hold ${terms.join(" + ")} = ${total} database connections at ` +
      `once (invocations × connections per pool), over connectionBudget ${budget}: with every instance busy ` +
      "the database would refuse connections and the records would fail unrecorded; lower maxConcurrency " +
      "(with provisioned pollers, maximumPollers first), or raise connectionBudget together with what the " +
      "database allows (max_connections, the proxy's MaxConnectionsPercent)" +
      (consumers.some((c) => c.managedInstances)
        ? "; on Lambda Managed Instances lower maxExecutionEnvironments or perExecutionEnvironmentMaxConcurrency"
        : ""),
  ];
}
