/**
 * The world the interleaving properties run in: one test database and SQS emulator per file, and
 * every actor the properties race, built from the real code with its pools and clients from an
 * {@link Interleaver} (so each statement and send is a scheduled step): award-points deliveries
 * (several "containers", each a handler of its own), replay, discard and bulk chunks as jobfence_ops,
 * the TTL cleanup as jobfence_cleanup, the backstop drain, the scheduled outbox relay, and a
 * downstream consumer of award-points' follow-ups. Plus what runs between the runs, unscheduled:
 * the setup of a job's history, the settling of what a run left in the queues, and the reading of
 * each job's fate for the invariants.
 */
import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics } from "@aws-lambda-powertools/metrics";
import type { SQSRecord } from "aws-lambda";
import pg from "pg";
import { z } from "zod";
import { awardPointsConsumer, type awardPointsPayload } from "../../../functions/award-points/consumer.ts";
import { localEventBridgeClient } from "../../../local/aws-clients.ts";
import { deliver, receiveRecords } from "../../../local/event-source.ts";
import { lambdaContext } from "../../../local/lambda-context.ts";
import { createBackstopDrain } from "../../../shared/backstop/drain.ts";
import type { ConsumerDefinition, HostedConsumer } from "../../../shared/consumer.ts";
import { consumerRoleName } from "../../../shared/db/queries/provision-login.ts";
import type { BulkFilter } from "../../../shared/dead-letters/api-schemas.ts";
import { planOperation, startOperation } from "../../../shared/dead-letters/bulk-operations.ts";
import { runChunk } from "../../../shared/dead-letters/bulk-worker.ts";
import { discardDeadLetter, replayDeadLetter } from "../../../shared/dead-letters/replay.ts";
import { PermanentJobError } from "../../../shared/errors/job.ts";
import { runFenceCleanup } from "../../../shared/fence/cleanup.ts";
import { sweepOutbox } from "../../../shared/outbox/sweep.ts";
import { buildTestConsumer } from "../../../testing/build-consumer.ts";
import { TEST_OPS_BUS } from "../../../testing/services.ts";
import { TEST_SEAL_KEY } from "../../support/api-harness.ts";
import { type ConsumerTestBed, consumerTestBed, sqsRecord } from "../../support/consumer-harness.ts";
import { messagesIn, type TestQueue } from "../../support/sqs.ts";
import { Interleaver } from "./interleavings.ts";

/** How a job's work fails, while it is set for the job. */
export type WorkFailure = "permanent" | "transient";

/** The downstream consumer's effect table: no uniqueness, so a follow-up applied twice shows twice. */
const EFFECTS_TABLE = "interleave_effects.notifications";

/** One job's state after a run, read as the migrator. */
export interface JobFate {
  /** award-points ledger rows (the effect) of the job id. */
  readonly effects: number;
  /** Fences of the job id, with their consumer's name and fingerprint (hex; null before fingerprints). */
  readonly fences: { consumer: string; fingerprint: string | null }[];
  /** Dead letters of the job id. */
  readonly deadLetters: {
    id: string;
    consumer: string;
    status: string;
    error_kind: string;
    body_fingerprint: string;
    fence_seen: boolean | null;
  }[];
}

/** The file's world; `close()` ends it. */
export interface World {
  readonly bed: ConsumerTestBed;
  readonly il: Interleaver;
  /** award-points' queue. */
  readonly queue: TestQueue;
  /** The queue award-points' follow-ups go to, and the downstream consumer's. */
  readonly followUpQueue: TestQueue;
  /** Jobs whose work fails, and how (award-points). */
  readonly failing: Map<string, WorkFailure>;
  /** A fresh job id. */
  jobId(tag: string): string;
  /** award-points as `actor` (a container of its own: its pool and clients are the actor's). */
  consumer(actor: string): HostedConsumer;
  /** The downstream consumer (named notify-user) as `actor`. */
  downstream(actor: string): HostedConsumer;
  /** Invokes `actor`'s award-points handler with `records`, as Lambda would; returns the failures. */
  invoke(actor: string, records: SQSRecord[]): Promise<string[]>;
  /** Receives what award-points' queue holds and delivers it to `actor`'s handler, as the event source does. */
  deliverFromQueue(actor: string): Promise<number>;
  /** The same for the downstream consumer and the follow-up queue. */
  deliverFollowUps(actor: string): Promise<number>;
  replay(actor: string, id: string): Promise<unknown>;
  /** The ids of `jobId`'s pending dead letters, oldest first, as the operator `actor` reads them (jobfence_ops). */
  pendingDeadLetters(actor: string, jobId: string): Promise<string[]>;
  discard(actor: string, id: string): Promise<unknown>;
  /**
   * Plans and starts a bulk operation (unscheduled outside a run, as actor `bulk-start` in one) on
   * `jobId`'s pending dead letters, or on those `filter` matches.
   */
  startBulk(kind: "replay" | "discard", jobId: string | BulkFilter): Promise<string>;
  /** One chunk of the bulk worker as `actor`. */
  bulkChunk(actor: string): Promise<unknown>;
  cleanup(actor: string): Promise<unknown>;
  /** The backstop drain as `actor`, recording `record` (a message that reached the backstop). */
  drain(actor: string, record: SQSRecord): Promise<unknown>;
  /** award-points' scheduled outbox relay as `actor`. */
  sweep(actor: string): Promise<unknown>;
  /** Runs as the migrator (setup and reads). */
  sql<R extends Record<string, unknown>>(text: string, params?: unknown[]): Promise<R[]>;
  /**
   * Unscheduled, after a run: delivers what the queues still hold, runs what bulk operations are
   * left and the scheduled relay (its rows made due), until nothing is left.
   */
  settle(): Promise<void>;
  fate(jobId: string): Promise<JobFate>;
  /** Effects of the downstream consumer per follow-up of `parentJobId`. */
  downstreamEffects(parentJobId: string): Promise<number>;
  close(): Promise<void>;
}

/** An award-points envelope of `jobId`; `variant` changes the payload (another job under the id). */
export function envelope(jobId: string, variant = 0): string {
  return JSON.stringify({
    job_id: jobId,
    tenant_id: "t-il",
    correlation_id: `corr-${jobId}`,
    payload: { user_id: `u-${jobId}`, points: 10 + variant },
  });
}

/** A body award-points reads as poison but files under `jobId` (its payload fails the schema). */
export function poisonEnvelope(jobId: string): string {
  return JSON.stringify({
    job_id: jobId,
    tenant_id: "t-il",
    correlation_id: `corr-${jobId}`,
    payload: { user_id: `u-${jobId}`, points: -1 },
  });
}

/** A record of `body` as Lambda delivers it. */
export function record(body: string, options: { messageId?: string; receiveCount?: number } = {}): SQSRecord {
  return sqsRecord(body, options);
}

let runCounter = 0;

/** Builds the world: a database and emulator, the test effect table and the dead-letter audit. */
export async function createWorld(name: string): Promise<World> {
  const bed = await consumerTestBed();
  const il = await Interleaver.create(bed.db.url);
  const queue = await bed.queue(`${name}-award-points`, { VisibilityTimeout: "5" });
  const followUpQueue = await bed.queue(`${name}-notify-user`, { VisibilityTimeout: "5" });
  const failing = new Map<string, WorkFailure>();
  await bed.consumerRole("notify-user");
  const logger = new Logger({ serviceName: "interleave", logLevel: "SILENT" });
  const metrics = new Metrics({ namespace: "jobfence", serviceName: "interleave" });
  await bed.db.withClient((c) =>
    c.query(`
      CREATE SCHEMA interleave_effects;
      CREATE TABLE ${EFFECTS_TABLE} (job_id text NOT NULL, correlation_id text NOT NULL);
      GRANT USAGE ON SCHEMA interleave_effects TO jobfence_consumer;
      GRANT INSERT ON ${EFFECTS_TABLE} TO jobfence_consumer;
      -- Whether each dead letter's write found its job's fence. It holds the fence it finds
      -- (core.hold_fence) until it commits, so this trigger's later look sees what it found.
      CREATE TABLE interleave_effects.dead_letter_audit (id uuid PRIMARY KEY, fence_seen boolean NOT NULL);
      CREATE FUNCTION interleave_effects.audit_dead_letter() RETURNS trigger
      LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
      BEGIN
        INSERT INTO interleave_effects.dead_letter_audit (id, fence_seen)
        SELECT NEW.id, EXISTS (SELECT 1 FROM core.processed_jobs AS p JOIN core.consumer_roles AS c ON c.id = p.consumer_id
                                WHERE p.job_id = NEW.job_id AND c.consumer = NEW.consumer);
        RETURN NEW;
      END $$;
      CREATE TRIGGER interleave_audit AFTER INSERT ON core.dead_letters
        FOR EACH ROW EXECUTE FUNCTION interleave_effects.audit_dead_letter();`),
  );

  const awardDefinition = {
    ...awardPointsConsumer,
    retry: {
      maxAttempts: 1,
      rationale: "a failure is the last attempt: the races are about what it becomes",
    },
    work: async (job, tx) => {
      const failure = failing.get(job.jobId);
      if (failure === "permanent") throw new PermanentJobError("refused (interleavings)");
      if (failure === "transient") throw new Error("failed (interleavings)");
      await awardPointsConsumer.work(job, tx);
    },
  } satisfies ConsumerDefinition<typeof awardPointsPayload, typeof awardPointsConsumer.sends>;
  const downstreamPayload = z.object({ user_id: z.string(), kind: z.string(), points: z.number() });
  const downstreamDefinition = {
    name: "notify-user",
    payload: downstreamPayload,
    work: async (job, tx) => {
      await tx.query(`INSERT INTO ${EFFECTS_TABLE} (job_id, correlation_id) VALUES ($1, $2)`, [
        job.jobId,
        job.correlationId,
      ]);
    },
  } satisfies ConsumerDefinition<typeof downstreamPayload>;

  const eventBridge = localEventBridgeClient(bed.sink.endpoint);
  const handlers = new Map<string, HostedConsumer>();
  const build = (
    actor: string,
    // biome-ignore lint/suspicious/noExplicitAny: either definition
    definition: ConsumerDefinition<any, any>,
    queueUrl: string,
  ): HostedConsumer => {
    const key = `${definition.name}/${actor}`;
    const built = handlers.get(key);
    if (built) return built;
    const pool = il.pool(actor, { connectionString: bed.db.url, role: consumerRoleName(definition.name) });
    const { handler } = buildTestConsumer(
      definition,
      {
        databaseUrl: bed.db.url,
        services: { sqs: il.sqs(actor, bed.sqs), eventBridge: il.eventBridge(actor, eventBridge) },
      },
      {
        runtime: { pool },
        configure: {
          queueUrl,
          outboxQueues: definition.sends ? { "notify-user": followUpQueue.url } : {},
        },
      },
    );
    handlers.set(key, handler);
    return handler;
  };

  const pools = new Map<string, ReturnType<Interleaver["pool"]>>();
  const poolOf = (actor: string, role: string) => {
    const key = `${role}/${actor}`;
    let pool = pools.get(key);
    if (!pool) {
      pool = il.pool(actor, { connectionString: bed.db.url, role });
      pools.set(key, pool);
    }
    return pool;
  };
  const ops = (actor: string) => ({ pool: poolOf(actor, "jobfence_ops"), sqs: il.sqs(actor, bed.sqs) });
  const drains = new Map<string, ReturnType<typeof createBackstopDrain>>();

  const deliverTo = async (handler: HostedConsumer, actor: string, from: TestQueue) => {
    const source = { sqs: il.sqs(actor, bed.sqs), queueUrl: from.url, queueArn: from.arn };
    const records = await receiveRecords(source);
    if (records.length === 0) return 0;
    await deliver(source, records, handler, lambdaContext(handler.consumer));
    return records.length;
  };

  const sweep = (actor: string) =>
    sweepOutbox({
      pool: poolOf(actor, consumerRoleName("award-points")),
      sqs: il.sqs(actor, bed.sqs),
      eventBridge: il.eventBridge(actor, eventBridge),
      opsBusName: TEST_OPS_BUS,
      consumer: "award-points",
      queues: { "notify-user": followUpQueue.url },
      metrics,
      logger,
    });

  // One migrator connection for every read and setup step: a connection per query costs more than the run.
  const admin = new pg.Client({ connectionString: bed.db.url });
  await admin.connect();
  const sql = async <R extends Record<string, unknown>>(text: string, params: unknown[] = []) =>
    (await admin.query<R>(text, params)).rows;

  const world: World = {
    bed,
    il,
    queue,
    followUpQueue,
    failing,
    jobId: (tag) => `${name}-${tag}-${process.pid}-${++runCounter}`,
    consumer: (actor) => build(actor, awardDefinition, queue.url),
    downstream: (actor) => build(actor, downstreamDefinition, followUpQueue.url),
    async invoke(actor, records) {
      const handler = world.consumer(actor);
      const response = await handler({ Records: records }, lambdaContext(handler.consumer));
      return response.batchItemFailures.map((f) => f.itemIdentifier);
    },
    deliverFromQueue: (actor) => deliverTo(world.consumer(actor), actor, queue),
    deliverFollowUps: (actor) => deliverTo(world.downstream(actor), actor, followUpQueue),
    replay: (actor, id) => replayDeadLetter(ops(actor), id, `interleave:${actor}`),
    discard: (actor, id) =>
      discardDeadLetter(ops(actor).pool, id, "discarded in an interleaving", `interleave:${actor}`),
    async pendingDeadLetters(actor, jobId) {
      const { rows } = await ops(actor).pool.query<{ id: string }>(
        "SELECT id FROM core.dead_letters WHERE job_id = $1 AND status = 'pending_review' ORDER BY created_at, id",
        [jobId],
      );
      return rows.map((r) => r.id);
    },
    async startBulk(kind, jobId) {
      const deps = { pool: ops("bulk-start").pool, sealKey: TEST_SEAL_KEY };
      const filter = typeof jobId === "string" ? { job_id: jobId } : jobId;
      const plan = await planOperation(deps, kind, filter);
      if (plan.token === null)
        throw new Error(`no pending dead letter of ${JSON.stringify(filter)} to ${kind}`);
      const started = await startOperation(
        deps,
        kind === "replay"
          ? { kind, filter, token: plan.token, rate_per_second: 1000, delay_seconds: 0 }
          : {
              kind,
              filter,
              token: plan.token,
              rate_per_second: 1000,
              reason: "discarded in an interleaving",
            },
        "interleave",
      );
      return started.id;
    },
    bulkChunk: (actor) => runChunk({ ...ops(actor), logger }),
    cleanup: (actor) =>
      runFenceCleanup({
        db: poolOf(actor, "jobfence_cleanup"),
        budgetMs: 30_000,
        batchSize: 100,
        pauseMs: 0,
      }),
    drain(actor, rec) {
      let drain = drains.get(actor);
      if (!drain) {
        drain = createBackstopDrain(
          {
            consumer: "award-points",
            sourceQueueUrl: queue.url,
            sourceMaxReceiveCount: 19,
            databaseUrl: bed.db.url,
            opsBusName: TEST_OPS_BUS,
          },
          {
            pool: poolOf(actor, consumerRoleName("award-points")),
            eventBridge: il.eventBridge(actor, eventBridge),
            definition: awardPointsConsumer,
            logger,
          },
        );
        drains.set(actor, drain);
      }
      return drain({ Records: [rec] }, lambdaContext("award-points-backstop"));
    },
    sweep,
    sql,
    async settle() {
      const name = (q: TestQueue) => q.url.slice(q.url.lastIndexOf("/") + 1);
      for (let round = 0; round < 50; round++) {
        const [left] = await sql<{ outbox: number; operations: number }>(
          `SELECT (SELECT count(*)::int FROM core.outbox) AS outbox,
                  (SELECT count(*)::int FROM core.bulk_operations WHERE status = 'running') AS operations`,
        );
        const queued = messagesIn(bed.emulator, name(queue)) + messagesIn(bed.emulator, name(followUpQueue));
        if (queued === 0 && !left?.outbox && !left?.operations) return;
        for (let chunk = 0; left?.operations && chunk < 20; chunk++)
          if ((await runChunk({ ...ops("settle"), logger })).kind === "idle") break;
        if (left?.outbox) {
          await sql("UPDATE core.outbox SET next_attempt_at = now()");
          await sweep("settle");
        }
        const delivered = (await world.deliverFromQueue("settle")) + (await world.deliverFollowUps("settle"));
        // Messages in flight (received by an actor that left them) come back after the visibility timeout.
        if (delivered === 0 && queued > 0) await new Promise((resolve) => setTimeout(resolve, 250));
      }
      throw new Error("the queues, outbox and bulk operations did not settle");
    },
    async fate(jobId) {
      const [effects] = await sql<{ n: number }>(
        "SELECT count(*)::int AS n FROM award_points.ledger WHERE job_id = $1",
        [jobId],
      );
      const fences = await sql<{ consumer: string; fingerprint: string | null }>(
        `SELECT c.consumer, encode(uuid_send(p.fingerprint), 'hex') AS fingerprint
           FROM core.processed_jobs AS p JOIN core.consumer_roles AS c ON c.id = p.consumer_id
          WHERE p.job_id = $1`,
        [jobId],
      );
      const deadLetters = await sql<JobFate["deadLetters"][number]>(
        `SELECT d.id, d.consumer, d.status, d.error_kind, encode(d.body_fingerprint, 'hex') AS body_fingerprint,
                a.fence_seen
           FROM core.dead_letters AS d LEFT JOIN interleave_effects.dead_letter_audit AS a ON a.id = d.id
          WHERE d.job_id = $1 ORDER BY d.created_at, d.id`,
        [jobId],
      );
      return { effects: Number(effects?.n ?? 0), fences, deadLetters };
    },
    async downstreamEffects(parentJobId) {
      const [row] = await sql<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${EFFECTS_TABLE} WHERE correlation_id = $1`,
        [`corr-${parentJobId}`],
      );
      return Number(row?.n ?? 0);
    },
    async close() {
      await admin.end();
      await il.close();
      eventBridge.destroy();
      await bed.close();
    },
  };
  return world;
}
