/**
 * End to end: the doctor CLI against the local stack as users run it. `npm start` with nothing
 * given starts its own embedded PostgreSQL and SQS emulator (a cluster of its own, so no other
 * test's roles are in it); `npm run doctor` with nothing but the stack's directory (and the stack's
 * JOBFENCE_* environment) finds nothing, then names a grant and a queue attribute changed by hand
 * and exits 1, and finds nothing again once they are undone.
 */
import { spawn } from "node:child_process";
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GetQueueAttributesCommand, SetQueueAttributesCommand, type SQSClient } from "@aws-sdk/client-sqs";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { localSqsClient } from "../../local/aws-clients.ts";
import {
  awardQueue,
  REPO_ROOT,
  type StackProcess,
  type StackServices,
  stackEnv,
  startStack,
  tempLocalDir,
} from "./support.ts";

const LONG = 120_000;

let localDir: { path: string; remove(): Promise<void> };
let services: StackServices;
let stack: StackProcess | undefined;
let sql: pg.Client;
let sqs: SQSClient;

beforeAll(async () => {
  localDir = await tempLocalDir();
  // The stack's embedded PostgreSQL runs as the OS user postgres, who must reach its data directory.
  await chmod(localDir.path, 0o755);
  services = { localDir: localDir.path };
  stack = await startStack(services, LONG);
  sql = new pg.Client({ connectionString: stack.info.databaseUrl });
  await sql.connect();
  sqs = localSqsClient(stack.info.sqsEndpoint);
}, LONG);

afterAll(async () => {
  await sql?.end().catch(() => {});
  sqs?.destroy();
  if (stack) await stack.stop(20_000);
  await localDir?.remove();
}, LONG);

/** `npm run doctor -- …args` with the stack's environment; its exit code and output. */
function doctor(
  args: readonly string[] = [],
  env: NodeJS.ProcessEnv = stackEnv(services),
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn("npm", ["run", "--silent", "doctor", "--", ...args], { cwd: REPO_ROOT, env });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk;
    });
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk;
    });
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

describe("npm run doctor against the local stack", () => {
  it("finds nothing in a stack just started, and exits 0", { timeout: LONG }, async () => {
    const result = await doctor();
    expect(result.stdout, result.stderr).toMatch(
      /as postgres; the local stack's queues at http:\/\/127\.0\.0\.1:\d+/,
    );
    expect(result.stdout).toMatch(/\nno findings\n$/);
    expect(result.code).toBe(0);
  });

  it("names a grant made by hand and exits 1; exits 0 again once it is revoked", {
    timeout: LONG,
  }, async () => {
    await sql.query("GRANT SELECT ON award_points.ledger TO jobfence_ops");
    try {
      const result = await doctor();
      expect(result.code, result.stdout + result.stderr).toBe(1);
      expect(result.stdout).toContain("table award_points.ledger [shared-role-outside-core]");
      expect(result.stdout).toContain("→ REVOKE SELECT ON award_points.ledger FROM jobfence_ops;");
      // The consumer's schema no longer matches its committed schema.txt either.
      expect(result.stdout).toContain("consumer award-points table privileges [consumer-schema]");
      expect(result.stdout).toMatch(/\n2 findings\n$/);
    } finally {
      await sql.query("REVOKE SELECT ON award_points.ledger FROM jobfence_ops");
    }
    expect((await doctor()).code).toBe(0);
  });

  it("names a queue changed by hand and exits 1; --no-queues checks the database only", {
    timeout: LONG,
  }, async () => {
    const { url } = awardQueue(running().info);
    const { Attributes } = await sqs.send(
      new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ["VisibilityTimeout"] }),
    );
    const configured = Attributes?.VisibilityTimeout as string;
    await sqs.send(new SetQueueAttributesCommand({ QueueUrl: url, Attributes: { VisibilityTimeout: "30" } }));
    try {
      const result = await doctor();
      expect(result.code, result.stdout + result.stderr).toBe(1);
      expect(result.stdout).toContain("queue award-points [queue-visibility]");
      expect(result.stdout).toContain("VisibilityTimeout is 30 s");
      const databaseOnly = await doctor(["--no-queues"]);
      expect(databaseOnly.stdout).toContain("queues not checked");
      expect(databaseOnly.code).toBe(0);
    } finally {
      await sqs.send(
        new SetQueueAttributesCommand({ QueueUrl: url, Attributes: { VisibilityTimeout: configured } }),
      );
    }
    expect((await doctor()).code).toBe(0);
  });

  it("without a local stack or a database to check, says so and exits 2", { timeout: LONG }, async () => {
    const empty = await mkdtemp(join(tmpdir(), "jobfence-doctor-"));
    try {
      const result = await doctor([], stackEnv({ localDir: empty }));
      expect(result.code).toBe(2);
      expect(result.stderr).toContain("no database: pass --database-url <url>");
    } finally {
      await rm(empty, { recursive: true, force: true });
    }
  });
});

function running(): StackProcess {
  if (!stack) throw new Error("no stack is running");
  return stack;
}
