/**
 * The consumer test kit: one consumer, alone, under the real harness. It starts the SQS emulator and
 * the EventBridge sink, creates the consumer's own queue, builds the consumer with the real
 * `createConsumer` connected in the consumer's own least-privileged role, and gives a test the
 * few calls it needs: make a job, deliver messages, and read back fences, dead letters and the
 * consumer's own tables.
 */
import pg from "pg";
import type { z } from "zod";
import { localSqsClient } from "../local/aws-clients.ts";
import type { EventBridgeSink, ReceivedEvent } from "../local/eventbridge-sink.ts";
import type { ConsumerConfigInput } from "../shared/config/consumer-config.ts";
import type { CommitMode, ConsumerDefinition, ConsumerRuntime, HostedConsumer } from "../shared/consumer.ts";
import { consumerSchemaText } from "../shared/db/consumer-catalog.ts";
import { runMigrations } from "../shared/db/migrate.ts";
import type { MigrationSet } from "../shared/db/migrations.ts";
import { registerFollowUpTargets } from "../shared/db/queries/follow-up-targets.ts";
import { ensureConsumerRole, registerFenceTtl } from "../shared/db/queries/provision-login.ts";
import { declaredSchemas } from "../shared/doctor/declared-data.ts";
import type { FollowUpSchemas } from "../shared/outbox/follow-up.ts";
import type { RetryPolicy } from "../shared/retry/policy.ts";
import { buildTestConsumer, type ConsumerChain } from "./build-consumer.ts";
import { type Delivery, OutcomeRecorder, QueueDriver, type TestMessage } from "./delivery.ts";
import { type JobIdentity, type TestEnvelope, testEnvelope } from "./envelope.ts";
import { WorkFaults } from "./faults.ts";
import { FollowUpInbox, type ReceivedFollowUp } from "./follow-ups.ts";
import { createTestQueue, type TestQueue } from "./queue.ts";
import {
  ConsumerReaders,
  type DeadLetterFilter,
  type DeadLetterRow,
  type FenceRow,
  type StepRow,
} from "./readers.ts";
import { startTestServices, type TestServices } from "./services.ts";
import { VisibilityWatch } from "./visibility.ts";

/** Options of {@link consumerTestKit}. */
export interface ConsumerTestKitOptions<S extends z.ZodType = z.ZodType> {
  /**
   * A superuser (migrator) connection string to the test's database. The kit reads and asserts as
   * this login, and the consumer logs in with it and switches to its own group role.
   *
   * The database must hold the core schema and the consumer's own migration set, applied before
   * or by {@link ConsumerTestKitOptions.migrations}. Give each test file a database of its own:
   * the kit does not clean up rows between tests (job ids are unique by default, so tests in one
   * file do not collide).
   */
  readonly databaseUrl: string;
  /**
   * Migration sets to apply first, in order, for a database that starts empty: the core set
   * (`coreMigrationSet()`) and the consumer's own. Already applied migrations are skipped.
   * @default none: the database is already migrated
   */
  readonly migrations?: readonly MigrationSet[];
  /** Whether the consumer's queue is FIFO. @default false */
  readonly fifo?: boolean;
  /**
   * Configuration beside the database, bus and queue the kit sets: timings, retention, the
   * redrive count (`maxReceiveCount`), the lock timeout, …
   */
  readonly configure?: Partial<ConsumerConfigInput>;
  /**
   * The policy the definition's retry override applies to. A test of retries usually wants few
   * attempts (`{ maxAttempts: 2, baseSeconds: 1, capSeconds: 1 }`); the backoff itself is never
   * waited out ({@link ConsumerTestKit.redeliver}).
   * @default DEFAULT_RETRY_POLICY
   */
  readonly retryPolicy?: RetryPolicy;
  /** How a batch commits, when the definition does not say. @default the definition's, else "per-record" */
  readonly commitMode?: CommitMode;
  /** The rest of the runtime (a fixed jitter source, a clock, a logger, metrics). */
  readonly runtime?: Pick<ConsumerRuntime, "random" | "now" | "logger" | "metrics">;
  /** Records per invocation, at most (1–10), as the event source's batch size. @default 10 */
  readonly batchSize?: number;
  /** A FIFO message's group. @default the envelope's `job_id`; `raw` for a body that has none */
  readonly groupOf?: (message: TestMessage) => string;
  /** How long a delivery waits for its messages to be received. @default 5000 */
  readonly receiveTimeoutMs?: number;
  /**
   * The consumer's own Lambda handler over the consumer the kit prepares, when the deployment
   * does not use `createConsumer`: a Middy chain of jobfence's middlewares and the user's.
   *
   *   chain: (consumer) => middy(sqsRecords(consumer, middy(runWork(consumer)).use(…)))
   *
   * @default createConsumer
   */
  readonly chain?: ConsumerChain<S>;
}

/** A consumer under test. */
export interface ConsumerTestKit<S extends z.ZodType> {
  /** The consumer's name. */
  readonly consumer: string;
  /** Its group role, the one its connections run as. */
  readonly role: string;
  /** The handler, as `createConsumer` (or the options' `chain`) built it. */
  readonly handler: HostedConsumer;
  /** Its queue on the emulator. */
  readonly queue: TestQueue;
  /** The emulator, the sink and their clients. */
  readonly services: TestServices;
  /** The alerts published so far (DeadLetterRecorded, …), in order. */
  readonly alerts: readonly ReceivedEvent[];
  /** The ops bus sink: `setMode` makes it fail, to test that a failed alert loses nothing. */
  readonly sink: EventBridgeSink;

  /**
   * An envelope for this consumer, its payload typed as the schema's input. A new job id on every
   * call unless `identity.jobId` is given: pass an earlier job's id for a conflict.
   */
  job(payload: z.input<S>, identity?: JobIdentity): TestEnvelope<z.input<S>>;
  /**
   * An envelope whose payload the type system does not check: for a payload the schema should
   * refuse (poison).
   */
  uncheckedJob(payload: unknown, identity?: JobIdentity): TestEnvelope<unknown>;
  /**
   * Makes the work of `envelope`'s job throw `error` (before the consumer's own work, on the same
   * transaction) on its next `times` runs, every run by default; returns the envelope. A
   * `PermanentJobError` is dead-lettered `hard` at once; anything else is retried.
   */
  failing<E extends TestEnvelope>(envelope: E, error: unknown, options?: { times?: number }): E;

  /**
   * Sends the messages to the consumer's queue and delivers them as Lambda's event source would:
   * received as real records in batches, the handler invoked, the acked ones deleted. Resolves
   * once every message has been handled once, with what became of each. One delivery at a time:
   * two at once would receive each other's messages.
   */
  deliver(...messages: TestMessage[]): Promise<Delivery>;
  /**
   * Delivers again, at once, every message left in the queue (retried, held, returned,
   * interrupted): the next attempt of a retry, without waiting for its backoff. Empty when none is
   * left. A message the harness returned is visible already and is simply received again (so is
   * it by the next `deliver`, among its `others`).
   */
  redeliver(): Promise<Delivery>;

  /**
   * The follow-ups the consumer's work sent to `target` (one of its definition's `sends`) that
   * have arrived in the target's queue (a queue of the kit's), in arrival order.
   */
  followUps(target: string): Promise<ReceivedFollowUp[]>;

  /** The consumer's fence of a job, or undefined when it was never applied. */
  fence(jobId: string): Promise<FenceRow | undefined>;
  /** The steps a job recorded (its calls outside the database), in order, each with its provider key. */
  steps(jobId: string): Promise<StepRow[]>;
  /** The consumer's dead letters, oldest first. */
  deadLetters(filter?: DeadLetterFilter): Promise<DeadLetterRow[]>;
  /** Runs SQL as the migrator: for asserting the effects in the consumer's own tables. */
  query<R extends object = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<R[]>;
  /**
   * The description of the consumer's own schema(s) in the test database, as committed text: for
   * a drift check against the consumer's `functions/<name>/schema.txt` (the path is relative to
   * the test file), `expect(await kit.schema()).toMatchFileSnapshot("../../functions/<name>/schema.txt")`
   * from test/consumers/.
   */
  schema(): Promise<string>;

  /** Ends the pools and stops the emulator and the sink. The database is the caller's. */
  close(): Promise<void>;
}

/**
 * Starts a kit for `definition`. The consumer runs exactly as deployed, but for the clients
 * (the emulator and the sink) and, when asked, the retry policy and configuration: its work runs
 * in its own group role, so a missing grant fails the test as it would fail in production.
 */
export async function consumerTestKit<
  S extends z.ZodType,
  F extends FollowUpSchemas = Record<never, never>,
  R = undefined,
>(definition: ConsumerDefinition<S, F, R>, options: ConsumerTestKitOptions<S>): Promise<ConsumerTestKit<S>> {
  const migrator = new pg.Pool({ connectionString: options.databaseUrl, max: 2 });
  // pg's Pool.end() resolves before its connections have closed: a test that stops its database
  // right after close() ends them from the server side, which an idle connection reports as an
  // error on the pool. Queries still reject as they should; an idle connection's end is not news.
  migrator.on("error", () => {});
  const cleanup: (() => Promise<unknown>)[] = [() => migrator.end()];
  // Last started, first stopped; a second call finds nothing left to do.
  const unwind = async () => {
    for (const step of cleanup.splice(0).reverse()) await step().catch(() => {});
  };
  try {
    if (options.migrations && options.migrations.length > 0) {
      await runMigrations({ connectionString: options.databaseUrl, sets: options.migrations });
    }
    // The consumer's set ensures its role when it is migrated; a consumer with no tables of its
    // own has no set, and its role is made here the same way.
    const role = await ensureConsumerRole(migrator, definition.name);
    // Its follow-ups' targets are consumers of the database too (an outbox row names a registered
    // consumer), as they are wherever the deployment migrated them, even when only this set is given.
    for (const target of Object.keys(definition.sends ?? {})) await ensureConsumerRole(migrator, target);
    // And the deployment declares them as its targets (the outbox takes a follow-up to no other).
    await registerFollowUpTargets(migrator, definition.name, Object.keys(definition.sends ?? {}));

    const services = await startTestServices();
    cleanup.push(() => services.stop());
    const fifo = options.fifo ?? false;
    const configure = options.configure ?? {};
    const functionTimeoutSeconds = Number(configure.functionTimeoutSeconds ?? 30);
    const queue = await createTestQueue(
      services.sqs,
      services.emulator.endpoint,
      `${definition.name}${fifo ? ".fifo" : ""}`,
      {
        // As deployed: six times the function timeout, so a record still running is never
        // received twice at once by accident.
        VisibilityTimeout: String(6 * functionTimeoutSeconds),
        ...(fifo ? { FifoQueue: "true" } : {}),
      },
    );

    // A queue per target the consumer sends follow-ups to, as the deployment gives it one.
    const inbox = await FollowUpInbox.create(
      services.sqs,
      services.emulator.endpoint,
      Object.keys(definition.sends ?? {}),
    );
    const faults = new WorkFaults();
    const recorder = new OutcomeRecorder();
    // The consumer's SQS client is its own, watched: a record the harness hands back unrun is
    // told apart by the visibility change that returned it.
    const consumerSqs = localSqsClient(services.emulator.endpoint);
    cleanup.push(async () => consumerSqs.destroy());
    const visibility = new VisibilityWatch();
    visibility.watch(consumerSqs);
    const { handler, pool } = buildTestConsumer(
      faults.wrap(definition),
      { databaseUrl: options.databaseUrl, services: { sqs: consumerSqs, eventBridge: services.eventBridge } },
      {
        configure: { outboxQueues: inbox.queueUrls, ...configure, queueUrl: queue.url, fifo },
        runtime: {
          ...options.runtime,
          ...(options.retryPolicy ? { retryPolicy: options.retryPolicy } : {}),
          onOutcome: recorder.observer,
        },
        ...(configure.lockTimeoutMs === undefined ? {} : { lockTimeoutMs: Number(configure.lockTimeoutMs) }),
        ...(options.commitMode ? { commitMode: options.commitMode } : {}),
        ...(options.chain ? { chain: options.chain } : {}),
      },
    );
    cleanup.push(() => pool.end());
    // As the deployment registers it: the database judges a copy's age by this consumer's TTL.
    await registerFenceTtl(migrator, definition.name, handler.config.fenceTtlSeconds);

    const driver = new QueueDriver({
      sqs: services.sqs,
      queue,
      handler,
      recorder,
      visibility,
      fifo,
      groupOf: options.groupOf ?? defaultGroupOf,
      batchSize: options.batchSize ?? 10,
      receiveTimeoutMs: options.receiveTimeoutMs ?? 5000,
    });
    const readers = new ConsumerReaders(migrator, definition.name);

    return {
      consumer: definition.name,
      role,
      handler,
      queue,
      services,
      alerts: services.sink.events,
      sink: services.sink,
      job: (payload, identity) => testEnvelope(definition.name, payload, identity),
      uncheckedJob: (payload, identity) => testEnvelope(definition.name, payload, identity),
      failing(envelope, error, failOptions = {}) {
        faults.plan(envelope.job_id, error, failOptions.times);
        return envelope;
      },
      deliver: (...messages) => driver.deliver(messages),
      redeliver: () => driver.redeliver(),
      followUps: (target) => inbox.of(target),
      fence: (jobId) => readers.fence(jobId),
      steps: (jobId) => readers.steps(jobId),
      deadLetters: (filter) => readers.deadLetters(filter),
      query: (sql, params) => readers.query(sql, params),
      async schema() {
        // One connection: the read sets the session's search path for its queries.
        const client = await migrator.connect();
        try {
          // The service's schemas it declares are the service's, not described as the consumer's own.
          const shared = definition.data === undefined ? [] : declaredSchemas(definition.data);
          return await consumerSchemaText(client, definition.name, shared);
        } finally {
          client.release();
        }
      },
      close: unwind,
    };
  } catch (error) {
    await unwind();
    throw error;
  }
}

/** A FIFO group per job: a job's deliveries stay in order, different jobs do not wait on each other. */
function defaultGroupOf(message: TestMessage): string {
  if (typeof message === "object" && message !== null) {
    const jobId = (message as { job_id?: unknown }).job_id;
    if (typeof jobId === "string" && jobId.length > 0) return jobId.slice(0, 128);
  }
  return "raw";
}
