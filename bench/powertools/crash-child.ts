/**
 * The crash matrix's victim (bench/powertools/crash-matrix.ts): one Lambda container of jobfence
 * (the award-points consumer, per-record or batch) or of the Powertools consumer (DynamoDB or
 * Redis store) that runs one invocation of the batch it is given and kills itself with SIGKILL at
 * its point: jobfence's fault hook at `fence:after-work` (P1) or `fence:after-commit` (P2), the
 * Powertools record handler after its statement (P1) or its COMMIT (P2), for the nth record; or,
 * for P3, once the handler has returned its batch response. The kill is synchronous at the point:
 * nothing runs after it (no ROLLBACK, no completion record, no ack), which is what a container
 * dying mid-invocation looks like to PostgreSQL and the store. Before the invocation the container
 * has done its init, as a warm one has: a database connection and one store request; it then says
 * it is ready and invokes when the parent says "go" (one child invokes at a time).
 *
 * Only what the system needs is loaded (a dynamic import per system): many children start at once.
 *
 * Configured and killed as bench/lib/crash-protocol.ts says; exits 3 if the invocation ended without
 * reaching the point, so the parent can tell "never crashed" from "crashed".
 */
import { lambdaContext } from "../../local/lambda-context.ts";
import { createPool } from "../../shared/db/pool.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { crashConfig, die, neverReached, readyThenGo } from "../lib/crash-protocol.ts";
import type { PersistenceClient } from "./powertools-variant.ts";
import { type CrashChildConfig, LABELS, type Point } from "./systems.ts";

const config = crashConfig<CrashChildConfig>();

const pool = createPool({
  connectionString: config.databaseUrl,
  role: consumerRoleName("award-points"),
  max: 2,
});

/** jobfence: the award-points consumer with the fault hook at its points. */
async function jobfence(): Promise<{ invoke: () => Promise<unknown>; warmUp: () => Promise<unknown> }> {
  const { installFaultHook } = await import("../../shared/fault-points.ts");
  const { benchConsumer } = await import("../lib/harness-driver.ts");
  const points: Partial<Record<Point, string>> = { P1: "fence:after-work", P2: "fence:after-commit" };
  let hits = 0;
  installFaultHook((reached) => {
    if (reached !== points[config.point]) return;
    hits++;
    if (hits === config.nth) die(reached);
  });
  const mode = config.system === LABELS.batch ? "batch" : "per-record";
  const handler = benchConsumer(pool, mode, config.databaseUrl);
  return {
    invoke: () => handler({ Records: config.records }, lambdaContext(handler.consumer)),
    warmUp: async () => {},
  };
}

/** Powertools: a container whose record handler dies at its points; warmed up with one store request. */
async function powertools(): Promise<{ invoke: () => Promise<unknown>; warmUp: () => Promise<unknown> }> {
  const { powertoolsContainer } = await import("./powertools-variant.ts");
  const stores = await import("./stores.ts");
  const address = config.store;
  if (!address) throw new Error(`${config.system} needs its store's address`);
  const uncounted = { requests: 0 };
  const warmUpKey = `${config.keyPrefix}#warm-up`;
  let store: PersistenceClient;
  let warmUp: () => Promise<unknown>;
  if (address.kind === "dynamodb") {
    const { GetItemCommand } = await import("@aws-sdk/client-dynamodb");
    const client = stores.dynamoClient(address.endpoint, uncounted);
    store = { kind: "dynamodb", client, tableName: address.tableName };
    warmUp = () =>
      client.send(new GetItemCommand({ TableName: address.tableName, Key: { id: { S: warmUpKey } } }));
  } else {
    const { client } = await stores.redisCacheClient(address.url, uncounted);
    store = { kind: "redis", client };
    warmUp = () => client.get(warmUpKey);
  }
  const points: Partial<Record<Point, string>> = { P1: "after-effect", P2: "after-commit" };
  const container = powertoolsContainer({
    pool,
    store,
    keyPrefix: config.keyPrefix,
    fault: (reached, index) => {
      if (reached === points[config.point] && index === config.nth) die(`${reached} of record ${index}`);
    },
  });
  return {
    invoke: () => container.invoke(config.records, lambdaContext("award-points", config.timeoutMs)),
    warmUp,
  };
}

const system =
  config.system === LABELS.perRecord || config.system === LABELS.batch
    ? await jobfence()
    : await powertools();
await pool.query("SELECT 1");
await system.warmUp();
await readyThenGo();
// A failed invocation is still one the handler returned from (P3 kills after it either way).
await system
  .invoke()
  .catch((error: unknown) => console.error(`invocation failed: ${(error as Error).message}`));
if (config.point === "P3") die("after the handler returned");
neverReached();
