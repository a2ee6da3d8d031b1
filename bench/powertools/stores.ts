/**
 * Powertools' idempotency stores, as the benchmark runs them, and what they cost:
 *
 * - DynamoDB: dynalite (an in-memory DynamoDB emulator from npm) in a child process of its own, so
 *   its CPU is not this process's event loop (a real DynamoDB is another machine), on a free port;
 *   a table as Powertools documents it (`id` string partition key); SDK clients with the endpoint,
 *   dummy credentials and a region, each counting the HTTP requests it sends (a middleware in the
 *   deserialize step, so each retry attempt counts). dynalite does not implement
 *   ReturnValuesOnConditionCheckFailure, so a duplicate costs Powertools one GetItem more than on
 *   DynamoDB (only redeliveries meet an existing record: the throughput runs have none).
 * - Redis: the server REDIS_URL names, or 127.0.0.1:6379, when it answers a PING; each connection
 *   wrapped as Powertools' `CacheClient` (get, set, del), counting the commands it sends. The keys
 *   carry a prefix of this run and are deleted at the end.
 *
 * Both servers' CPU time can be read (dynalite's from /proc, Redis's from INFO): on a machine whose
 * few cores the client, PostgreSQL and the store share, a store that is busy is CPU the others lack.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import type { CacheClient } from "@aws-lambda-powertools/idempotency/cache/types";
import { CreateTableCommand, DynamoDBClient } from "@aws-sdk/client-dynamodb";
import { createClient } from "@redis/client";

/** Where a store answers, as a child process can be told it. */
export type StoreAddress =
  | { readonly kind: "dynamodb"; readonly endpoint: string; readonly tableName: string }
  | { readonly kind: "redis"; readonly url: string };

/** Requests (DynamoDB) or commands (Redis) sent, a running total. */
export interface RequestCount {
  requests: number;
}

/** The idempotency table's name in the emulator. */
export const IDEMPOTENCY_TABLE = "idempotency";

const REGION = "eu-west-1";

/** A running dynalite. */
export interface Dynalite {
  readonly host: string;
  readonly port: number;
  readonly endpoint: string;
  /** CPU time the emulator's process has used so far, ms (NaN where /proc is not there). */
  cpuMs(): Promise<number>;
  stop(): Promise<void>;
}

/**
 * Starts dynalite in memory in a child process (`process.execPath -e`: no file of its own) on a port
 * the OS picks, and creates the idempotency table. The child exits when its stdin closes, so it
 * does not outlive this process even if this one is killed.
 */
export async function startDynalite(): Promise<Dynalite> {
  const entry = createRequire(import.meta.url).resolve("dynalite");
  const script = `
    const server = require(${JSON.stringify(entry)})({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
    process.stdin.on("end", () => process.exit(0)).resume();
    server.listen(0, "127.0.0.1", () => process.stdout.write(server.address().port + "\\n"));`;
  const child = spawn(process.execPath, ["-e", script], { stdio: ["pipe", "pipe", "inherit"] });
  const port = await new Promise<number>((resolve, reject) => {
    child.once("error", reject);
    child.once("exit", (code) => reject(new Error(`dynalite exited (${code}) before listening`)));
    child.stdout?.once("data", (chunk: Buffer) => resolve(Number(chunk.toString().trim())));
  });
  const host = "127.0.0.1";
  const endpoint = `http://${host}:${port}`;
  const client = dynamoClient(endpoint, { requests: 0 });
  await client.send(
    new CreateTableCommand({
      TableName: IDEMPOTENCY_TABLE,
      KeySchema: [{ AttributeName: "id", KeyType: "HASH" }],
      AttributeDefinitions: [{ AttributeName: "id", AttributeType: "S" }],
      BillingMode: "PAY_PER_REQUEST",
    }),
  );
  client.destroy();
  return { host, port, endpoint, cpuMs: () => processCpuMs(child), stop: () => stopChild(child) };
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.stdin?.end();
  await exited;
}

/** utime + stime of a child from /proc/<pid>/stat, in ms (clock ticks of 10 ms on Linux). */
async function processCpuMs(child: ChildProcess): Promise<number> {
  try {
    const stat = await readFile(`/proc/${child.pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return Number.NaN;
  }
}

/** A DynamoDB client for `endpoint` that adds each HTTP request it sends to `count`. */
export function dynamoClient(endpoint: string, count: RequestCount): DynamoDBClient {
  const client = new DynamoDBClient({
    endpoint,
    region: REGION,
    credentials: { accessKeyId: "bench", secretAccessKey: "bench" },
  });
  client.middlewareStack.add(
    (next) => (args) => {
      count.requests += 1;
      return next(args);
    },
    { step: "deserialize", name: "benchRequestCount" },
  );
  return client;
}

/** Where Redis should answer: REDIS_URL, or the default port on this machine. */
export const REDIS_URL = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";

/** Undefined when Redis at `url` answers a PING within a second; otherwise why not. */
export async function redisAbsence(url: string): Promise<string | undefined> {
  const client = createClient({ url, socket: { connectTimeout: 1000, reconnectStrategy: false } });
  client.on("error", () => {});
  try {
    await client.connect();
    await client.ping();
    return undefined;
  } catch (error) {
    return `no Redis answered at ${url} (${(error as Error).message || (error as Error).name})`;
  } finally {
    if (client.isOpen) client.destroy();
  }
}

/** One Redis connection as Powertools' CacheClient, counting its commands; `close` ends it. */
export async function redisCacheClient(
  url: string,
  count: RequestCount,
): Promise<{ client: CacheClient; close(): void }> {
  const redis = createClient({ url });
  redis.on("error", (error: Error) => console.error(`redis: ${error.message}`));
  await redis.connect();
  const client: CacheClient = {
    get: (key) => {
      count.requests += 1;
      return redis.get(key);
    },
    set: (key, value, options) => {
      count.requests += 1;
      return redis.set(key as string, value as string, options as { EX: number; NX?: true });
    },
    del: (keys) => {
      count.requests += 1;
      return redis.del(keys);
    },
  };
  return { client, close: () => redis.destroy() };
}

/** A connection to Redis that is not counted: its server's CPU, and the run's keys at the end. */
export async function redisObserver(url: string): Promise<{
  cpuMs(): Promise<number>;
  deleteKeys(prefix: string): Promise<number>;
  close(): void;
}> {
  const redis = createClient({ url });
  redis.on("error", () => {});
  await redis.connect();
  return {
    async cpuMs() {
      const info = await redis.info("cpu");
      const seconds = (name: string) => Number(info.match(new RegExp(`^${name}:([\\d.]+)`, "m"))?.[1]);
      return (seconds("used_cpu_user") + seconds("used_cpu_sys")) * 1000;
    },
    async deleteKeys(prefix) {
      let deleted = 0;
      for await (const keys of redis.scanIterator({ MATCH: `${prefix}*`, COUNT: 1000 })) {
        if (keys.length > 0) deleted += await redis.del(keys);
      }
      return deleted;
    },
    close: () => redis.destroy(),
  };
}
