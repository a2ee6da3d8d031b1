/**
 * Test wiring for the repository's own consumer tests: a database of the file's own, the SQS
 * emulator, the EventBridge sink, and consumers built by the real factory against them, with the
 * pool logged in as the least-privileged consumer role so every test also proves the grants
 * suffice. The wiring itself is the testing kit's (testing/): this bed only adds the
 * repository's database, several consumers and queues per bed, and award-points fixtures; and a
 * fake email provider, which the process's EMAIL_PROVIDER_URL names while the bed is open, so
 * notify-user's step sends its emails there (as the local stack and the deployment configure it).
 */
import type { SQSClient } from "@aws-sdk/client-sqs";
import type { SQSRecord } from "aws-lambda";
import type pg from "pg";
import type { z } from "zod";
import { CONSUMERS } from "../../functions/consumers.ts";
import { EMAIL_PROVIDER_URL } from "../../functions/notify-user/email.ts";
import type { EventBridgeSink } from "../../local/eventbridge-sink.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import type { SqsEmulator } from "../../local/sqs-emulator.ts";
import type { ConsumerConfigInput } from "../../shared/config/consumer-config.ts";
import type {
  CommitMode,
  ConsumerDefinition,
  ConsumerRuntime,
  HostedConsumer,
} from "../../shared/consumer.ts";
import { ensureConsumerRole } from "../../shared/db/queries/provision-login.ts";
import type { FollowUpSchemas } from "../../shared/outbox/follow-up.ts";
import { buildTestConsumer } from "../../testing/build-consumer.ts";
import { type FakeProvider, startFakeProvider } from "../../testing/fake-provider.ts";
import { FollowUpInbox, type ReceivedFollowUp } from "../../testing/follow-ups.ts";
import { createTestQueue } from "../../testing/queue.ts";
import { startTestServices, TEST_OPS_BUS } from "../../testing/services.ts";
import { createTestDatabase, type TestDatabase } from "./database.ts";
import type { TestQueue } from "./sqs.ts";

/** The bus name tests configure; the sink accepts any. */
export const OPS_BUS = TEST_OPS_BUS;

/** Everything a consumer test needs; `close()` tears it all down. */
export interface ConsumerTestBed {
  readonly db: TestDatabase;
  readonly emulator: SqsEmulator;
  readonly sqs: SQSClient;
  readonly sink: EventBridgeSink;
  /** The email provider notify-user sends through: EMAIL_PROVIDER_URL while the bed is open. */
  readonly emailProvider: FakeProvider;
  /** Pools created by {@link ConsumerTestBed.consumer}, closed by `close()`. */
  readonly pools: pg.Pool[];
  /**
   * A consumer built by the real factory, connected in its own group role (`consumerRoleName`;
   * award-points' exists in every test database, another consumer's needs {@link consumerRole}
   * first).
   */
  consumer<S extends z.ZodType, F extends FollowUpSchemas = Record<never, never>, R = undefined>(
    definition: ConsumerDefinition<S, F, R>,
    runtime?: ConsumerRuntime & {
      queueUrl?: string;
      lockTimeoutMs?: number;
      /** Configuration beside the bed's database and bus (retention, timings, …). */
      configure?: Partial<ConsumerConfigInput>;
    },
  ): HostedConsumer;
  /** Ensures consumer `name`'s group role in the bed's database (as migrating its set would). */
  consumerRole(name: string): Promise<string>;
  /** Creates a queue on the emulator ({@link createTestQueue}). */
  queue(name: string, attributes?: Record<string, string>): Promise<TestQueue>;
  /**
   * What arrived so far in the bed's queue for follow-ups to `target`: every registered consumer
   * some consumer sends to has one, and each consumer built here sends its follow-ups there unless
   * its configuration names other queues.
   */
  followUps(target: string): Promise<ReceivedFollowUp[]>;
  /** The queue URL of each follow-up target: what a consumer built here gets as `outboxQueues`. */
  readonly followUpQueues: Readonly<Record<string, string>>;
  close(): Promise<void>;
}

/** Options of {@link consumerTestBed}. */
export interface ConsumerTestBedOptions {
  /** Applied to every consumer built, unless its definition chooses. @default the definition's */
  readonly commitMode?: CommitMode;
}

export async function consumerTestBed(options: ConsumerTestBedOptions = {}): Promise<ConsumerTestBed> {
  const [db, services, emailProvider] = await Promise.all([
    createTestDatabase(),
    startTestServices(),
    startFakeProvider(),
  ]);
  const { emulator, sink, sqs } = services;
  const emailProviderBefore = process.env[EMAIL_PROVIDER_URL];
  process.env[EMAIL_PROVIDER_URL] = emailProvider.url;
  const pools: pg.Pool[] = [];
  const targets = new Set(CONSUMERS.flatMap((d) => Object.keys(d.definition.sends ?? {})));
  const inbox = await FollowUpInbox.create(sqs, emulator.endpoint, [...targets]);
  const followUpQueues = inbox.queueUrls;
  return {
    db,
    emulator,
    sqs,
    sink,
    emailProvider,
    pools,
    consumerRole: (name) => db.withClient((client) => ensureConsumerRole(client, name)),
    consumer(definition, runtime = {}) {
      const { queueUrl, lockTimeoutMs, configure, ...rest } = runtime;
      const { handler, pool } = buildTestConsumer(
        definition,
        { databaseUrl: db.url, services },
        {
          runtime: rest,
          configure: {
            outboxQueues: Object.fromEntries(
              Object.keys(definition.sends ?? {})
                .filter((target) => Object.hasOwn(followUpQueues, target))
                .map((target) => [target, followUpQueues[target] as string]),
            ),
            ...configure,
            ...(queueUrl ? { queueUrl } : {}),
          },
          ...(lockTimeoutMs === undefined ? {} : { lockTimeoutMs }),
          ...(options.commitMode ? { commitMode: options.commitMode } : {}),
        },
      );
      pools.push(pool);
      return handler;
    },
    queue(name, attributes = {}) {
      return createTestQueue(sqs, emulator.endpoint, name, attributes);
    },
    followUps: (target) => inbox.of(target),
    followUpQueues,
    async close() {
      await Promise.all(pools.map((p) => p.end()));
      await services.stop();
      await emailProvider.close();
      if (emailProviderBefore === undefined) delete process.env[EMAIL_PROVIDER_URL];
      else process.env[EMAIL_PROVIDER_URL] = emailProviderBefore;
      await db.drop();
    },
  };
}

/** An award-points envelope. */
export function award(
  jobId: string,
  points = 10,
  userId = "u-1",
  tenantId = "t_42",
): Record<string, unknown> {
  return {
    job_id: jobId,
    tenant_id: tenantId,
    correlation_id: `corr-${jobId}`,
    payload: { user_id: userId, points },
  };
}

let counter = 0;
/** A record as Lambda would deliver it, for tests that call the handler without a queue. */
export function sqsRecord(
  body: string,
  options: { messageId?: string; receiveCount?: number; groupId?: string; queueArn?: string } = {},
): SQSRecord {
  counter++;
  // A message group is a FIFO queue's (a standard queue's group, as SQS fair queues set, orders nothing).
  const queueArn =
    options.queueArn ??
    `arn:aws:sqs:eu-west-1:000000000000:award-points${options.groupId === undefined ? "" : ".fifo"}`;
  return {
    messageId: options.messageId ?? `m-${process.pid}-${counter}`,
    receiptHandle: `rh-${counter}`,
    body,
    attributes: {
      ApproximateReceiveCount: String(options.receiveCount ?? 1),
      SentTimestamp: String(Date.now()),
      SenderId: "test",
      ApproximateFirstReceiveTimestamp: String(Date.now()),
      ...(options.groupId ? { MessageGroupId: options.groupId } : {}),
    },
    messageAttributes: {},
    md5OfBody: "",
    eventSource: "aws:sqs",
    eventSourceARN: queueArn,
    awsRegion: "eu-west-1",
  };
}

/** Invokes a handler with records and returns the ids it reported as failures. */
export async function invoke(handler: HostedConsumer, records: SQSRecord[]): Promise<string[]> {
  const response = await handler({ Records: records }, lambdaContext(handler.consumer));
  return response.batchItemFailures.map((f) => f.itemIdentifier);
}

/** Row counts of every table in the given schemas (AC8). */
export async function rowCounts(db: TestDatabase, schemas: string[]): Promise<Record<string, number>> {
  return db.withClient(async (c) => {
    const { rows } = await c.query<{ t: string }>(
      "SELECT schemaname || '.' || tablename AS t FROM pg_tables WHERE schemaname = ANY($1) ORDER BY 1",
      [schemas],
    );
    const counts: Record<string, number> = {};
    for (const { t } of rows) {
      const result = await c.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${t}`);
      counts[t] = result.rows[0]?.n ?? 0;
    }
    return counts;
  });
}

/** Ledger entries and fences of one job. */
export async function effectsOf(
  db: TestDatabase,
  jobId: string,
): Promise<{ ledger: number; fences: number; deadLetters: number }> {
  return db.withClient(async (c) => {
    const { rows } = await c.query(
      `SELECT (SELECT count(*)::int FROM award_points.ledger WHERE job_id = $1) AS ledger,
              (SELECT count(*)::int FROM core.processed_jobs WHERE job_id = $1) AS fences,
              (SELECT count(*)::int FROM core.dead_letters WHERE job_id = $1) AS "deadLetters"`,
      [jobId],
    );
    return rows[0];
  });
}
