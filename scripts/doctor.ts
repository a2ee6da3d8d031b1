/**
 * `npm run doctor`: checks a jobfence database (roles, grants, memberships, definer functions,
 * row-level security and policies, ownership, migrations, each consumer's own schema against its
 * committed schema.txt and its privileges elsewhere against its definition's `data`) and the consumers' queues (retention,
 * visibility timeout, redrive) against what the migrations and functions/consumers.ts intend. It
 * prints each finding with what to do, and exits 1 when there is any.
 *
 * With no options it checks the running local stack, as `.local/stack.json` (or the one in
 * JOBFENCE_LOCAL_DIR) describes it, against the local stack's configuration (the same JOBFENCE_*
 * environment as `npm start`). `--database-url` and `--sqs-endpoint` (an emulator) or `--region`
 * (AWS, checked against what the CDK stack deploys) point it elsewhere.
 *
 * Exit codes: 0 no findings; 1 findings; 2 usage error, or a database or SQS that did not answer.
 */
import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import type { SQSClient } from "@aws-sdk/client-sqs";
import { Command, CommanderError } from "commander";
import pg from "pg";
import { CONSUMERS, deployedDeliveryTimings, expectedQueues } from "../functions/consumers.ts";
import { deploymentConsumerSchemas, deploymentDeclarations } from "../functions/doctor/reference.ts";
import { deploymentMigrationSets } from "../functions/migrate/sets.ts";
import { localSqsClient } from "../local/aws-clients.ts";
import { stackFilePath } from "../local/local-dir.ts";
import {
  type LocalStackConfig,
  localDeliveryTimings,
  localStackConfigFromEnv,
} from "../local/stack-config.ts";
import { createSqsClient } from "../shared/aws/clients.ts";
import { withoutPassword } from "../shared/db/connection-text.ts";
import type { ExpectedConsumerQueues } from "../shared/doctor/check-queues.ts";
import { runDoctor } from "../shared/doctor/doctor.ts";
import { type DoctorReport, formatFinding } from "../shared/doctor/findings.ts";
import { ConfigurationError } from "../shared/errors/configuration.ts";

const REPO_ROOT = fileURLToPath(new URL("..", import.meta.url));
const EXIT = { ok: 0, findings: 1, usage: 2 } as const;

/** A problem with the invocation or its targets: printed, exit 2. */
class UsageError extends Error {
  override readonly name = "UsageError";
}

interface Flags {
  readonly databaseUrl?: string;
  readonly sqsEndpoint?: string;
  readonly region?: string;
  readonly queues: boolean;
  readonly json?: boolean;
}

/** What `.local/stack.json` holds that the doctor uses. */
interface StackFile {
  readonly databaseUrl?: unknown;
  readonly sqsEndpoint?: unknown;
  readonly region?: unknown;
}

async function readStack(path: string): Promise<StackFile | undefined> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    if ((error as { code?: unknown }).code === "ENOENT") return undefined;
    throw new UsageError(`cannot read ${path}: ${(error as Error).message}`);
  }
  try {
    return JSON.parse(text) as StackFile;
  } catch (error) {
    throw new UsageError(`${path} is not valid JSON: ${(error as Error).message}`);
  }
}

function text(value: unknown): string | undefined {
  return typeof value === "string" && value !== "" ? value : undefined;
}

/** Where the queues are, and what they are checked against. */
interface QueueTarget {
  readonly sqs: SQSClient;
  readonly describe: string;
  readonly expected: readonly ExpectedConsumerQueues[];
}

function localExpectations(config: LocalStackConfig): ExpectedConsumerQueues[] {
  return CONSUMERS.map((d) => expectedQueues(d, localDeliveryTimings(config, d)));
}

async function main(argv: readonly string[]): Promise<number> {
  const program = new Command("npm run doctor --")
    .description(
      "Check a jobfence database and its consumers' queues against what the migrations and functions/consumers.ts intend.",
    )
    .option("--database-url <url>", "the database to check (else the local stack's, from .local/stack.json)")
    .option("--sqs-endpoint <url>", "an SQS emulator's endpoint (else the local stack's)")
    .option(
      "--region <region>",
      "check the queues in AWS, in this region (credentials from the AWS SDK's chain)",
    )
    .option("--no-queues", "check the database only")
    .option("--json", "print the report as JSON")
    .helpOption("-h, --help", "show help")
    .exitOverride()
    .addHelpText(
      "after",
      "\nExit codes: 0 no findings; 1 findings; 2 usage error, or a database or SQS that did not answer.",
    );
  try {
    program.parse([...argv], { from: "user" });
  } catch (error) {
    if (error instanceof CommanderError) return error.exitCode === 0 ? EXIT.ok : EXIT.usage;
    throw error;
  }
  const flags = program.opts<Flags>();
  const config = localStackConfigFromEnv(process.env, REPO_ROOT);
  const stackFile = stackFilePath(config.localDir);
  let stack: Promise<StackFile | undefined> | undefined;
  const loadStack = () => {
    stack ??= readStack(stackFile);
    return stack;
  };
  const noStack = async () =>
    (await loadStack()) === undefined
      ? `(no local stack: ${stackFile} does not exist; \`npm start\` writes it)`
      : `(${stackFile} does not say)`;

  const databaseUrl = flags.databaseUrl ?? text((await loadStack())?.databaseUrl);
  if (databaseUrl === undefined)
    throw new UsageError(`no database: pass --database-url <url> ${await noStack()}`);

  let queues: QueueTarget | undefined;
  if (flags.queues) {
    if (flags.sqsEndpoint !== undefined && flags.region !== undefined) {
      throw new UsageError("pass --sqs-endpoint (an emulator) or --region (AWS), not both");
    }
    if (flags.sqsEndpoint !== undefined) {
      queues = {
        sqs: localSqsClient(flags.sqsEndpoint),
        describe: `queues at ${flags.sqsEndpoint}, against the local stack's configuration`,
        expected: localExpectations(config),
      };
    } else if (flags.region !== undefined) {
      queues = {
        sqs: createSqsClient({ region: flags.region }),
        describe: `queues in AWS ${flags.region}, against what the CDK stack deploys`,
        expected: CONSUMERS.map((d) => expectedQueues(d, deployedDeliveryTimings(d))),
      };
    } else {
      const local = await loadStack();
      const endpoint = text(local?.sqsEndpoint);
      if (endpoint === undefined) {
        throw new UsageError(
          `no queues to check: pass --sqs-endpoint <url> or --region <region>, or --no-queues ${await noStack()}`,
        );
      }
      queues = {
        sqs: localSqsClient(endpoint),
        describe: `the local stack's queues at ${endpoint}`,
        expected: localExpectations(config),
      };
    }
  }

  const client = new pg.Client({ connectionString: databaseUrl, application_name: "jobfence:doctor" });
  try {
    await client.connect();
  } catch (error) {
    client.end().catch(() => {});
    throw new UsageError(`cannot connect to ${withoutPassword(databaseUrl)}: ${(error as Error).message}`);
  }
  let report: DoctorReport;
  try {
    report = await runDoctor({
      db: client,
      sets: deploymentMigrationSets(),
      consumerSchemas: deploymentConsumerSchemas(),
      declarations: deploymentDeclarations(),
      ...(queues ? { queues: { sqs: queues.sqs, expected: queues.expected } } : {}),
    });
  } catch (error) {
    // The database went away mid-check, or SQS did not answer (or refused the credentials).
    throw new UsageError(
      `the check could not finish: ${error instanceof Error ? error.message : String(error)}`,
      {
        cause: error,
      },
    );
  } finally {
    await client.end().catch(() => {});
    queues?.sqs.destroy();
  }

  if (flags.json) {
    process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  } else {
    const out = (line: string) => process.stdout.write(`${line}\n`);
    out(
      `checked ${withoutPassword(databaseUrl)} as ${report.readAs}; ${queues?.describe ?? "queues not checked"}`,
    );
    for (const finding of report.findings) out(`\n${formatFinding(finding)}`);
    for (const skipped of report.skipped) out(`\nnot checked [${skipped.check}]: ${skipped.reason}`);
    out(
      report.findings.length === 0
        ? "\nno findings"
        : `\n${report.findings.length} finding${report.findings.length === 1 ? "" : "s"}`,
    );
  }
  return report.findings.length === 0 ? EXIT.ok : EXIT.findings;
}

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (error) {
  if (error instanceof UsageError || error instanceof ConfigurationError) {
    process.stderr.write(`doctor: ${error.message}\n`);
  } else {
    process.stderr.write(
      `doctor: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
  }
  process.exitCode = EXIT.usage;
}
