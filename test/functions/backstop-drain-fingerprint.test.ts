/**
 * The package's backstop drain (functions/backstop-drain/handler.ts) knows no consumer definition:
 * it fingerprints a job by its whole payload as received. That is exactly the fingerprint a
 * consumer whose definition has no custom `fingerprint` writes on its fence, whatever its payload
 * schema makes of the payload (unknown keys stripped, defaults filled in), so replay and the daily
 * escalation compare the drain's dead letter with the fence correctly. A definition with a custom
 * `fingerprint` is why JobConsumer refuses such a consumer without a drain entry of the user's own
 * (test/infra/drain-entry.test.ts): only a drain given the definition computes its fingerprint.
 * Against a real PostgreSQL, as the consumer and the drain write them.
 */
import { randomBytes } from "node:crypto";
import type { Context, SQSBatchResponse, SQSEvent } from "aws-lambda";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { z } from "zod";
import { lambdaContext } from "../../local/lambda-context.ts";
import { createBackstopDrain } from "../../shared/backstop/drain.ts";
import { createPool } from "../../shared/db/pool.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import type { ConsumerDefinition } from "../../shared/index.ts";
import {
  type ConsumerTestBed,
  consumerTestBed,
  invoke,
  OPS_BUS,
  sqsRecord,
} from "../support/consumer-harness.ts";

const suffix = randomBytes(3).toString("hex");
/** A payload schema that changes what it parses: an unknown key is stripped, a default filled in. */
const payload = z.object({ user_id: z.string(), points: z.number().int().default(1) });
const plain = {
  name: `fp-plain-${suffix}`,
  payload,
  work: async () => {},
} satisfies ConsumerDefinition<typeof payload>;
/** The same, with a custom fingerprint: only the user counts. */
const narrowed = {
  name: `fp-narrowed-${suffix}`,
  payload,
  fingerprint: (p: z.output<typeof payload>) => p.user_id,
  work: async () => {},
} satisfies ConsumerDefinition<typeof payload>;

const SOURCE_QUEUE_URL = "https://sqs.eu-west-1.amazonaws.com/123456789012/fp-source";
type Drain = ((event: SQSEvent, context: Context) => Promise<SQSBatchResponse>) & {
  readonly pool: { end(): Promise<void> };
};

let bed: ConsumerTestBed;
const drains: Drain[] = [];
beforeAll(async () => {
  bed = await consumerTestBed();
  await bed.consumerRole(plain.name);
  await bed.consumerRole(narrowed.name);
});
afterAll(async () => {
  vi.unstubAllEnvs();
  await Promise.all(drains.map((d) => d.pool.end()));
  await bed?.close();
});

/** The body of a job whose payload carries a key the schema strips and leaves out one it defaults. */
const body = (jobId: string) =>
  JSON.stringify({
    job_id: jobId,
    tenant_id: "t_42",
    correlation_id: `corr-${jobId}`,
    payload: { user_id: "u-7", note: "not in the schema" },
  });

/** The consumer runs the job; returns its fence's fingerprint. */
async function fenceFingerprint(
  definition: ConsumerDefinition<typeof payload>,
  jobId: string,
): Promise<string> {
  const handler = bed.consumer(definition);
  expect(await invoke(handler, [sqsRecord(body(jobId))])).toEqual([]);
  const { rows } = await bed.db.withClient((c) =>
    c.query<{ fp: string }>(
      `SELECT encode(uuid_send(p.fingerprint), 'hex') AS fp
         FROM core.processed_jobs AS p JOIN core.consumer_roles AS c ON c.id = p.consumer_id
        WHERE c.consumer = $1 AND p.job_id = $2`,
      [definition.name, jobId],
    ),
  );
  expect(rows).toHaveLength(1);
  return (rows[0] as { fp: string }).fp;
}

/** The same message drained from the backstop; returns its dead letter's job fingerprint. */
async function drainedFingerprint(drain: Drain, consumer: string, jobId: string): Promise<string> {
  const response = await drain({ Records: [sqsRecord(body(jobId))] }, lambdaContext(`${consumer}-backstop`));
  expect(response.batchItemFailures).toEqual([]);
  const { rows } = await bed.db.withClient((c) =>
    c.query<{ fp: string }>(
      "SELECT encode(job_fingerprint, 'hex') AS fp FROM core.dead_letters WHERE consumer = $1 AND job_id = $2",
      [consumer, jobId],
    ),
  );
  expect(rows).toHaveLength(1);
  return (rows[0] as { fp: string }).fp;
}

/** The package's drain entry for `consumer`, configured from its environment as deployed. */
async function packageDrain(consumer: string): Promise<Drain> {
  vi.resetModules();
  vi.stubEnv("DATABASE_URL", bed.db.url);
  vi.stubEnv("JOBFENCE_DB_ROLE", consumerRoleName(consumer));
  vi.stubEnv("JOBFENCE_CONSUMER", consumer);
  vi.stubEnv("JOBFENCE_SOURCE_QUEUE_URL", SOURCE_QUEUE_URL);
  vi.stubEnv("JOBFENCE_SOURCE_MAX_RECEIVE_COUNT", "19");
  vi.stubEnv("JOBFENCE_OPS_BUS_NAME", OPS_BUS);
  vi.stubEnv("AWS_ENDPOINT_URL_EVENTBRIDGE", bed.sink.endpoint);
  vi.stubEnv("AWS_REGION", "eu-west-1");
  vi.stubEnv("AWS_ACCESS_KEY_ID", "local");
  vi.stubEnv("AWS_SECRET_ACCESS_KEY", "local");
  const { handler } = (await import("../../functions/backstop-drain/handler.ts")) as { handler: Drain };
  drains.push(handler);
  return handler;
}

describe("the package's backstop drain, with no definition", () => {
  it("fingerprints a job as its consumer does when the definition has no custom fingerprint", async () => {
    const fence = await fenceFingerprint(plain, "fp-plain-1");
    const drain = await packageDrain(plain.name);
    expect(await drainedFingerprint(drain, plain.name, "fp-plain-1")).toBe(fence);
  });

  it("cannot fingerprint as a consumer with a custom fingerprint does: that drain needs the definition", async () => {
    const fence = await fenceFingerprint(narrowed, "fp-narrowed-1");
    const generic = await packageDrain(narrowed.name);
    expect(await drainedFingerprint(generic, narrowed.name, "fp-narrowed-1")).not.toBe(fence);
    // A drain entry of the user's own, as JobConsumer's drainEntry deploys it, passes the definition.
    const own = createBackstopDrain(
      {
        consumer: narrowed.name,
        sourceQueueUrl: SOURCE_QUEUE_URL,
        sourceMaxReceiveCount: 19,
        databaseUrl: bed.db.url,
        opsBusName: OPS_BUS,
      },
      {
        definition: narrowed,
        pool: createPool({ connectionString: bed.db.url, role: consumerRoleName(narrowed.name) }),
      },
    );
    drains.push(own);
    const second = await fenceFingerprint(narrowed, "fp-narrowed-2");
    expect(await drainedFingerprint(own, narrowed.name, "fp-narrowed-2")).toBe(second);
  });
});
