/**
 * Building a consumer under test: the real `createConsumer`, wired to the test services and
 * connected in the consumer's own group role. The role is the point: the work then runs with
 * exactly the privileges a deployed consumer has, so a test that passes also proves its
 * migration's grants suffice (a missing GRANT fails the test as it would fail production).
 */
import type { Context, SQSBatchResponse, SQSEvent } from "aws-lambda";
import type pg from "pg";
import type { z } from "zod";
import type { ConsumerConfigInput } from "../shared/config/consumer-config.ts";
import {
  type CommitMode,
  type ConsumerDefinition,
  type ConsumerRuntime,
  consumerParts,
  createConsumer,
  type HostedConsumer,
  type PreparedConsumer,
  prepareConsumer,
} from "../shared/consumer.ts";
import { createPool } from "../shared/db/pool.ts";
import { consumerRoleName } from "../shared/db/queries/provision-login.ts";
import type { FollowUpSchemas } from "../shared/outbox/follow-up.ts";
import { TEST_OPS_BUS, type TestServices } from "./services.ts";

/** Where a consumer under test connects to. */
export interface TestConsumerTarget {
  /**
   * A superuser (migrator) connection string. The pool logs in with it and switches to the
   * consumer's group role at connection start (SET ROLE), so nothing runs with the login's rights.
   */
  readonly databaseUrl: string;
  readonly services: Pick<TestServices, "sqs" | "eventBridge">;
}

/**
 * A consumer's own Lambda handler, built over the consumer jobfence prepared: a user's Middy chain
 * (`sqsRecords(consumer, middy(runWork(consumer)).use(…))`) with whatever wraps it.
 */
export type ConsumerChain<S extends z.ZodType> = (
  consumer: PreparedConsumer<S>,
) => (event: SQSEvent, context: Context) => Promise<SQSBatchResponse>;

/** How to build it, beside the definition. */
export interface TestConsumerOptions<S extends z.ZodType = z.ZodType> {
  /**
   * The runtime, as `createConsumer` takes it; its clients default to the services'. A `pool`
   * given here is used as it is (its role is the caller's business). A `config` given here is the
   * whole configuration, used as it is: for tests of what the factory refuses.
   * @default {@link configure} with the target's database and {@link TEST_OPS_BUS}
   */
  readonly runtime?: ConsumerRuntime;
  /** Configuration beside the database and bus (retention, timings, the queue URL, …). */
  readonly configure?: Partial<ConsumerConfigInput>;
  /** How long a fence insert waits behind another delivery of the same job. @default 5000 */
  readonly lockTimeoutMs?: number;
  /** Connections of the pool built here. @default 4 */
  readonly poolMax?: number;
  /** Applied when the definition does not choose. @default the definition's, else "per-record" */
  readonly commitMode?: CommitMode;
  /**
   * The handler the deployment builds, when it is not `createConsumer`'s: given the consumer
   * prepared with the runtime above, it returns the Lambda handler (a user's own Middy chain).
   * @default createConsumer
   */
  readonly chain?: ConsumerChain<S>;
}

/** The handler, and the pool it uses (the caller ends it). */
export interface TestConsumer {
  readonly handler: HostedConsumer;
  readonly pool: pg.Pool;
}

/** Builds `definition` with the real factory against `target`. */
export function buildTestConsumer<
  S extends z.ZodType,
  F extends FollowUpSchemas = Record<never, never>,
  R = undefined,
>(
  definition: ConsumerDefinition<S, F, R>,
  target: TestConsumerTarget,
  options: TestConsumerOptions<S> = {},
): TestConsumer {
  const { runtime = {}, configure, lockTimeoutMs = 5000, poolMax = 4, commitMode, chain } = options;
  const pool =
    runtime.pool ??
    createPool({
      connectionString: target.databaseUrl,
      role: consumerRoleName(definition.name),
      max: poolMax,
      lockTimeoutMs,
    });
  const withMode =
    commitMode && definition.commitMode === undefined ? { ...definition, commitMode } : definition;
  try {
    const wired: ConsumerRuntime = {
      sqs: target.services.sqs,
      eventBridge: target.services.eventBridge,
      ...runtime,
      config: runtime.config ?? { ...configure, databaseUrl: target.databaseUrl, opsBusName: TEST_OPS_BUS },
      pool,
    };
    if (chain === undefined) return { handler: createConsumer(withMode, wired), pool };
    const prepared = prepareConsumer(withMode, wired);
    return { handler: Object.assign(chain(prepared), consumerParts(prepared)), pool };
  } catch (error) {
    // A refused configuration must not leave the pool built for it behind.
    if (!runtime.pool) void pool.end();
    throw error;
  }
}
