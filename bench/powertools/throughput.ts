/**
 * Effects per second, round trips per job to each service, handler wall time per record and CPU
 * per job of jobfence (per-record, batch 10) and of the Powertools consumer (DynamoDB store, Redis
 * store), on one network: a pool of award-points' role (max = concurrency) counting its round trips,
 * shared by every variant; `concurrency` workers each playing one Lambda container, taking SQS
 * batches of 10 from one list; a warm-up round, then `reps` rounds, each on fresh jobs with the
 * variants' order rotated; after every run each job's effect is checked to be applied exactly once.
 */
import { performance } from "node:perf_hooks";
import type { SQSBatchResponse, SQSRecord } from "aws-lambda";
import pg from "pg";
import { lambdaContext } from "../../local/lambda-context.ts";
import { countingPool } from "../lib/counting-pool.ts";
import { batchesOf, benchConsumer, makeJobs } from "../lib/harness-driver.ts";
import { assertExactlyOnce } from "./effects.ts";
import { type PersistenceClient, powertoolsContainer } from "./powertools-variant.ts";
import { dynamoClient, IDEMPOTENCY_TABLE, type RequestCount, redisCacheClient } from "./stores.ts";
import { BATCH_SIZE, LABELS } from "./systems.ts";

/** Where one network's services answer (directly or through latency proxies). */
export interface Network {
  readonly name: string;
  readonly pgUrl: string;
  readonly dynamoEndpoint: string;
  /** Absent when no Redis answered: the Redis variant is skipped. */
  readonly redisUrl?: string;
}

/** What one round of one variant measured, per job (rate: effects/s). */
export interface Sample {
  readonly rate: number;
  readonly postgres: number;
  readonly dynamodb: number;
  readonly redis: number;
  /** Invocation handler wall time ÷ records: what Lambda bills per record. */
  readonly msPerRecord: number;
  /** This process's CPU per job, µs (the client: harness or Powertools, pg, SDKs). */
  readonly clientCpuUs: number;
  /** The store server's CPU per job, µs (NaN for jobfence: no store). */
  readonly storeCpuUs: number;
}

/** One variant under test on one network. */
interface System {
  readonly label: string;
  /** One invocation in container `worker`. */
  invoke(worker: number, records: SQSRecord[]): Promise<SQSBatchResponse>;
  /** The store server's CPU so far, ms (jobfence: none). */
  storeCpuMs?(): Promise<number>;
}

/** The Lambda function timeout of the throughput runs (the in-progress expiry of Powertools). */
const FUNCTION_TIMEOUT_MS = 30_000;

/** What the network's run needs besides the network. */
export interface ThroughputSetup {
  readonly databaseUrl: string;
  readonly concurrency: number;
  readonly jobs: number;
  readonly reps: number;
  readonly keyPrefix: string;
  readonly dynaliteCpuMs: () => Promise<number>;
  readonly redisCpuMs?: () => Promise<number>;
  readonly log: (line: string) => void;
}

/** Every variant's samples on `network`, by label. */
export async function measureNetwork(
  network: Network,
  s: ThroughputSetup,
): Promise<Record<string, Sample[]>> {
  const { pool, counts } = countingPool(network.pgUrl, s.concurrency);
  const dynamoCount: RequestCount = { requests: 0 };
  const redisCount: RequestCount = { requests: 0 };
  const closers: Array<() => void> = [];
  const admin = new pg.Client({ connectionString: s.databaseUrl });
  await admin.connect();
  try {
    const jobfence = (label: string, mode: "per-record" | "batch"): System => {
      const handler = benchConsumer(pool, mode, network.pgUrl);
      return {
        label,
        invoke: (_worker, records) => handler({ Records: records }, lambdaContext(handler.consumer)),
      };
    };
    const powertools = (
      label: string,
      stores: PersistenceClient[],
      storeCpuMs: () => Promise<number>,
    ): System => {
      const containers = stores.map((store) => powertoolsContainer({ pool, store, keyPrefix: s.keyPrefix }));
      return {
        label,
        invoke: (worker, records) =>
          (containers[worker] ?? fail(worker)).invoke(
            records,
            lambdaContext("award-points", FUNCTION_TIMEOUT_MS),
          ),
        storeCpuMs,
      };
    };
    const workers = Array.from({ length: s.concurrency }, (_, i) => i);
    const dynamoClients = workers.map(() => dynamoClient(network.dynamoEndpoint, dynamoCount));
    closers.push(() => {
      for (const client of dynamoClients) client.destroy();
    });
    const systems: System[] = [
      jobfence(LABELS.perRecord, "per-record"),
      jobfence(LABELS.batch, "batch"),
      powertools(
        LABELS.dynamodb,
        dynamoClients.map((client) => ({ kind: "dynamodb", client, tableName: IDEMPOTENCY_TABLE })),
        s.dynaliteCpuMs,
      ),
    ];
    if (network.redisUrl && s.redisCpuMs) {
      const url = network.redisUrl;
      const connections = await Promise.all(workers.map(() => redisCacheClient(url, redisCount)));
      closers.push(() => {
        for (const connection of connections) connection.close();
      });
      systems.push(
        powertools(
          LABELS.redis,
          connections.map(({ client }) => ({ kind: "redis", client })),
          s.redisCpuMs,
        ),
      );
    }

    const samples: Record<string, Sample[]> = Object.fromEntries(systems.map((v) => [v.label, []]));
    for (let round = 0; round <= s.reps; round++) {
      const order = systems.map((_, i) => systems[(i + round) % systems.length] as System);
      const line: string[] = [];
      for (const system of order) {
        const jobs = makeJobs(s.jobs);
        const batches = batchesOf(jobs, BATCH_SIZE);
        const before = { pg: counts.roundTrips, ddb: dynamoCount.requests, redis: redisCount.requests };
        const storeBefore = (await system.storeCpuMs?.()) ?? Number.NaN;
        const cpuBefore = process.cpuUsage();
        let handlerMs = 0;
        let next = 0;
        const started = performance.now();
        await Promise.all(
          workers.map(async (worker) => {
            for (let i = next++; i < batches.length; i = next++) {
              const records = batches[i] as SQSRecord[];
              const t0 = performance.now();
              const response = await system.invoke(worker, records);
              handlerMs += performance.now() - t0;
              if (response.batchItemFailures.length > 0)
                throw new Error(`${system.label}: ${response.batchItemFailures.length} records failed`);
            }
          }),
        );
        const elapsed = performance.now() - started;
        const cpu = process.cpuUsage(cpuBefore);
        const storeAfter = (await system.storeCpuMs?.()) ?? Number.NaN;
        await assertExactlyOnce(
          admin,
          jobs.map((j) => j.jobId),
          `${system.label} on ${network.name}`,
        );
        const n = jobs.length;
        const rate = (n / elapsed) * 1000;
        line.push(`${system.label} ${Math.round(rate)}/s`);
        if (round === 0) continue; // warm-up
        samples[system.label]?.push({
          rate,
          postgres: (counts.roundTrips - before.pg) / n,
          dynamodb: (dynamoCount.requests - before.ddb) / n,
          redis: (redisCount.requests - before.redis) / n,
          msPerRecord: handlerMs / n,
          clientCpuUs: (cpu.user + cpu.system) / n,
          storeCpuUs: ((storeAfter - storeBefore) * 1000) / n,
        });
      }
      s.log(`${round === 0 ? "warm-up" : `round ${round}`}: ${line.join(", ")}`);
    }
    return samples;
  } finally {
    for (const close of closers) close();
    await admin.end();
    await pool.end();
  }
}

function fail(worker: number): never {
  throw new Error(`no container for worker ${worker}`);
}
