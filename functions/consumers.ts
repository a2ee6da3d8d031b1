/**
 * The consumer registry: every consumer of the deployment, declared once, and how each is wired to
 * its queues. The CDK app, the local stack, the migrate function (its migration sets) and the
 * backstop drains all derive from this list, so what runs locally is what deploys. A consumer's
 * folder `functions/<name>/` holds the rest (functions/registry.ts checks it): its definition, its
 * migrations and its generated entry point. `npm run new-consumer -- <name>` adds one.
 */
import { TTL_DEFAULTS } from "../shared/index.ts";
import { awardPointsConsumer } from "./award-points/consumer.ts";
import type { ConsumerDeploymentSettings } from "./consumer-deployment.ts";
import { notifyUserConsumer } from "./notify-user/consumer.ts";

/** How a consumer of the registry is deployed: its settings, and the example the conformance test sends. */
export interface ConsumerDeployment extends ConsumerDeploymentSettings {
  /**
   * A payload the consumer accepts and applies: the conformance test sends it through the bundled
   * entry point, for tenant {@link EXAMPLE_TENANT}. Checked against the definition's schema.
   */
  readonly example: unknown;
  /**
   * SQL the conformance test runs as the migrator before it sends {@link example}, for a consumer
   * whose work needs rows to exist (an open invoice to pay, say); the example's tenant is
   * {@link EXAMPLE_TENANT}. @default none: the example applies on a freshly migrated database
   */
  readonly exampleSeed?: string;
}

/** What is derived from a consumer's settings, defined with them (./consumer-deployment.ts). */
export {
  BACKSTOP_RETENTION_SECONDS,
  deployedDeliveryTimings,
  expectedQueues,
  queueNames,
  resolveDeliveryTimings,
  VISIBILITY_TO_TIMEOUT_RATIO,
} from "./consumer-deployment.ts";

/** The tenant of the example job the conformance test sends each consumer. */
export const EXAMPLE_TENANT = "t_example";

// new-consumer: `npm run new-consumer` adds its import above and its entry at the end of this list.
export const CONSUMERS: readonly ConsumerDeployment[] = [
  {
    definition: awardPointsConsumer,
    example: { user_id: "u-1", points: 10 },
    fifo: false,
    functionTimeoutSeconds: 30,
    queueRetentionSeconds: TTL_DEFAULTS.queueRetentionSeconds,
    batchSize: 10,
    maxConcurrency: 4,
  },
  {
    definition: notifyUserConsumer,
    example: { user_id: "u-1", kind: "points-awarded", points: 10 },
    fifo: false,
    functionTimeoutSeconds: 30,
    queueRetentionSeconds: TTL_DEFAULTS.queueRetentionSeconds,
    batchSize: 10,
    maxConcurrency: 2,
  },
];

/**
 * The follow-up targets each consumer of the registry declares (its definition's `sends`), by
 * sender; a consumer that sends nothing declares none. The deployment registers them in the database
 * (core.register_follow_up_targets), where the outbox's row policy checks every follow-up against them.
 */
export function declaredFollowUpTargets(
  deployments: readonly ConsumerDeployment[] = CONSUMERS,
): Record<string, string[]> {
  return Object.fromEntries(
    deployments.map((d) => [d.definition.name, Object.keys(d.definition.sends ?? {}).sort()]),
  );
}
