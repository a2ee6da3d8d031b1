/**
 * The same consumer as a platform team writes it today with Powertools for AWS Lambda: the batch
 * utility (`processPartialResponse`, `BatchProcessor(EventType.SQS)`) reporting partial failures,
 * and each record's handler made idempotent with `makeIdempotent` over a persistence layer
 * (DynamoDB or Redis), the effect itself in PostgreSQL as the user would write it: a pooled
 * connection, `BEGIN; awardPoints(…); COMMIT`.
 *
 * The idempotency configuration, as its documentation recommends for an SQS batch:
 * - the key is the job id in the body (`powertools_json(body).job_id`), not the whole record: a
 *   redelivery carries another receipt handle and receive count, so hashing the record would make
 *   every delivery a new key; `throwOnNoIdempotencyKey`, so a job without one fails instead of
 *   running unguarded;
 * - payload validation ON over what jobfence's fingerprint covers, the tenant and the payload
 *   (`powertools_json(body).[tenant_id, payload]`): a reused job id with another payload is refused.
 *   With the Redis store (CachePersistenceLayer of 2.35.0) this also refuses every redelivery of a
 *   completed job: completing a record rewrites it without its validation hash, so the hash of the
 *   redelivered payload never matches (powertools-lambda-typescript#5705, fixed after 2.35.0);
 *   the crash matrix counts those records as never acked;
 * - the Lambda context registered each invocation, so an in-progress record expires when the
 *   invocation's remaining time runs out (a crashed invocation's jobs can run again after that);
 * - everything else at its default (records kept 1 h, no local cache: a cache in one container
 *   does not see another's work).
 *
 * Records one after another (`processInParallel: false`; the batch utility's default is all ten at
 * once): a Lambda consumer holds one database connection, as jobfence's harness does, and ten
 * parallel records would need ten connections per invocation or queue for one; either way the
 * comparison would no longer be at the same database concurrency.
 *
 * One {@link powertoolsContainer} is one Lambda container: its own processor, configuration and
 * persistence layer (the batch processor and the config keep per-invocation state, so two
 * invocations at once in one process must not share them).
 */
import { BatchProcessor, EventType, processPartialResponse } from "@aws-lambda-powertools/batch";
import { IdempotencyConfig, makeIdempotent } from "@aws-lambda-powertools/idempotency";
import { CachePersistenceLayer } from "@aws-lambda-powertools/idempotency/cache";
import type { CacheClient } from "@aws-lambda-powertools/idempotency/cache/types";
import { DynamoDBPersistenceLayer } from "@aws-lambda-powertools/idempotency/dynamodb";
import type { BasePersistenceLayer } from "@aws-lambda-powertools/idempotency/persistence";
import type { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import type { Context, SQSBatchResponse, SQSRecord } from "aws-lambda";
import type pg from "pg";
import { awardPoints } from "../../functions/award-points/award.ts";

/** Where the crash matrix may stop a record's handler: its statement answered, or its COMMIT. */
export type PowertoolsPoint = "after-effect" | "after-commit";

/**
 * Called at each point with the record's position in the invocation (1-based); never installed
 * outside the crash matrix, where it kills the process.
 */
export type PowertoolsFault = (point: PowertoolsPoint, recordIndex: number) => void;

/** The persistence layer a container uses, with the client it is given. */
export type PersistenceClient =
  | { readonly kind: "dynamodb"; readonly client: DynamoDBClient; readonly tableName: string }
  | { readonly kind: "redis"; readonly client: CacheClient };

export function persistenceLayer(store: PersistenceClient): BasePersistenceLayer {
  return store.kind === "dynamodb"
    ? new DynamoDBPersistenceLayer({ tableName: store.tableName, awsSdkV3Client: store.client })
    : new CachePersistenceLayer({ client: store.client });
}

/** The body the benchmarks send (bench/lib/harness-driver.ts recordOf). */
interface AwardBody {
  job_id: string;
  tenant_id: string;
  payload: { user_id: string; points: number };
}

/** One Lambda container of the Powertools consumer. */
export interface PowertoolsContainer {
  /** One invocation: the batch response the function returns to Lambda. */
  invoke(records: SQSRecord[], context: Context): Promise<SQSBatchResponse>;
}

export function powertoolsContainer(options: {
  readonly pool: pg.Pool;
  readonly store: PersistenceClient;
  /** The idempotency keys' prefix (Powertools' default is the function's name). */
  readonly keyPrefix: string;
  readonly fault?: PowertoolsFault;
}): PowertoolsContainer {
  const { pool, fault } = options;
  let position = 0;
  const config = new IdempotencyConfig({
    eventKeyJmesPath: "powertools_json(body).job_id",
    payloadValidationJmesPath: "powertools_json(body).[tenant_id, payload]",
    throwOnNoIdempotencyKey: true,
  });
  const awardOnce = makeIdempotent(
    async (record: SQSRecord, _context: Context): Promise<void> => {
      const index = ++position;
      const body = JSON.parse(record.body) as AwardBody;
      const client = await pool.connect();
      try {
        await client.query("BEGIN");
        await awardPoints(client, {
          jobId: body.job_id,
          tenantId: body.tenant_id,
          userId: body.payload.user_id,
          points: body.payload.points,
        });
        fault?.("after-effect", index);
        await client.query("COMMIT");
        client.release();
      } catch (error) {
        await client.query("ROLLBACK").catch(() => {});
        client.release();
        throw error;
      }
      fault?.("after-commit", index);
    },
    { persistenceStore: persistenceLayer(options.store), config, keyPrefix: options.keyPrefix },
  );
  const processor = new BatchProcessor(EventType.SQS);
  return {
    async invoke(records, context) {
      position = 0;
      config.registerLambdaContext(context);
      return processPartialResponse({ Records: records }, awardOnce, processor, {
        context,
        processInParallel: false,
      });
    },
  };
}
