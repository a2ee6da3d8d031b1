/**
 * The external-steps crash matrix's victim (bench/external-steps/matrix.ts): one Lambda container
 * of a variant (./consumers.ts) that runs one invocation of the batch it is given and SIGKILLs
 * itself at its point (./systems.ts KILL_AT) for the job it is told: a harness fault point, or one
 * of the work's own points around its call. Before the invocation it has done its init, as a warm
 * container has (a database connection, one request to Powertools' store), then it waits for the
 * parent's "go" (bench/lib/crash-protocol.ts). Exits 3 if the invocation ended without reaching
 * the point.
 */
import { GetItemCommand } from "@aws-sdk/client-dynamodb";
import { lambdaContext } from "../../local/lambda-context.ts";
import { createPool } from "../../shared/db/pool.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { installFaultHook } from "../../shared/fault-points.ts";
import { crashConfig, die, neverReached, readyThenGo } from "../lib/crash-protocol.ts";
import { dynamoClient } from "../powertools/stores.ts";
import { externalContainer } from "./consumers.ts";
import { type ExternalChildConfig, KILL_AT } from "./systems.ts";

const config = crashConfig<ExternalChildConfig>();
const kill = KILL_AT[config.variant][config.point];

if ("hook" in kill) {
  installFaultHook((point, context) => {
    if (point === kill.hook && context.jobIds?.includes(config.killJobId)) die(point);
  });
}
const pool = createPool({
  connectionString: config.databaseUrl,
  role: consumerRoleName("award-points"),
  max: 2,
});
const dynamo = dynamoClient(config.dynamodb.endpoint, { requests: 0 });
const container = externalContainer(config.variant, {
  pool,
  databaseUrl: config.databaseUrl,
  providerUrl: config.providerUrl,
  dynamodb: { client: dynamo, tableName: config.dynamodb.tableName },
  keyPrefix: config.keyPrefix,
  functionTimeoutSeconds: config.timeoutMs / 1000,
  ...("work" in kill
    ? {
        fault: (point, jobId) => {
          if (point === kill.work && jobId === config.killJobId) die(point);
        },
      }
    : {}),
});

await pool.query("SELECT 1");
await dynamo.send(
  new GetItemCommand({
    TableName: config.dynamodb.tableName,
    Key: { id: { S: `${config.keyPrefix}#warm-up` } },
  }),
);
await readyThenGo();
const answer = await container.invoke(config.records, lambdaContext("award-points", config.timeoutMs)).then(
  (response) => `it answered ${JSON.stringify(response)}`,
  (error: unknown) => `it failed: ${(error as Error).message}`,
);
neverReached(answer);
