/**
 * The consumer author's path, end to end, with no hand edit: in a scratch copy of the repository,
 * `npm run new-consumer -- record-payment` writes a consumer that passes the typecheck, the lint,
 * its own generated test and the conformance test (which synthesizes the stack and runs its
 * bundle); `npm start` then runs it, and `npm run send` delivers a job that is applied once.
 */
import { execFile } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";
import { REPO_ROOT, type StackProcess, startStack, tempLocalDir } from "./support.ts";

const run = promisify(execFile);
const NAME = "record-payment";
let copy: string;
let localDir: Awaited<ReturnType<typeof tempLocalDir>>;
let stack: StackProcess | undefined;
let db: TestDatabase;

/** The environment of a command in the copy: no vitest variables of this run, no JOBFENCE_* of its own. */
function childEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const inherited = Object.fromEntries(
    Object.entries(process.env).filter(
      ([name]) => !name.startsWith("VITEST") && !name.startsWith("JOBFENCE_") && name !== "NODE_OPTIONS",
    ),
  );
  return { ...inherited, ...extra };
}

/** Runs a command in the copy; its output is in the error when it fails. */
async function inCopy(command: string, args: string[], env: Record<string, string> = {}): Promise<string> {
  try {
    const { stdout } = await run(command, args, {
      cwd: copy,
      env: childEnv(env),
      timeout: 300_000,
      maxBuffer: 64 << 20,
    });
    return stdout;
  } catch (error) {
    const e = error as { stdout?: string; stderr?: string; message: string };
    throw new Error(
      `${command} ${args.join(" ")} failed: ${e.message}\n${e.stdout ?? ""}\n${e.stderr ?? ""}`,
    );
  }
}

beforeAll(async () => {
  // The files git would commit (tracked, and new ones not ignored), and the installed packages.
  copy = mkdtempSync(join(tmpdir(), "jobfence-scaffold-"));
  const { stdout } = await run("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard"], {
    cwd: REPO_ROOT,
    maxBuffer: 64 << 20,
  });
  for (const file of stdout.split("\0").filter(Boolean)) {
    if (!existsSync(join(REPO_ROOT, file))) continue; // deleted, not yet committed
    mkdirSync(dirname(join(copy, file)), { recursive: true });
    cpSync(join(REPO_ROOT, file), join(copy, file));
  }
  symlinkSync(join(REPO_ROOT, "node_modules"), join(copy, "node_modules"));
  localDir = await tempLocalDir();
  // The run's template knows only the registered consumers: the stack migrates the new one's set.
  db = await createTestDatabase();
}, 120_000);

afterAll(async () => {
  await stack?.stop();
  await localDir?.remove();
  await db?.drop();
  if (copy) rmSync(copy, { recursive: true, force: true });
});

it("a scaffolded consumer typechecks, lints, passes its own and the conformance test, and runs locally", {
  timeout: 600_000,
}, async () => {
  const scaffolded = await inCopy("npm", ["run", "--silent", "new-consumer", "--", NAME]);
  expect(scaffolded).toContain(`registered ${NAME} in functions/consumers.ts`);
  expect(readFileSync(join(copy, "functions/consumers.ts"), "utf8")).toContain(
    `import { recordPaymentConsumer } from "./${NAME}/consumer.ts";`,
  );

  // Two more, whose imports the linter orders by number (v2 before v10), whichever comes first.
  for (const more of ["payout-v10", "payout-v2"])
    await inCopy("npm", ["run", "--silent", "new-consumer", "--", more]);

  await inCopy("npm", ["run", "--silent", "typecheck"]);
  await inCopy("npm", ["run", "--silent", "lint"]);
  // One worker: the suite around this test has timing-sensitive files of its own.
  const tested = await inCopy("npx", [
    "vitest",
    "run",
    "--maxWorkers=1",
    `test/consumers/${NAME}.test.ts`,
    "test/consumers/payout-v2.test.ts",
    "test/consumers/conformance.test.ts",
  ]);
  expect(tested).toMatch(/Test Files\s+.*3 passed/);
  expect(tested).toContain(`${NAME}: the bundle applies the registered example from the emulator, once`);

  stack = await startStack({ localDir: localDir.path, cwd: copy, databaseUrl: db.url }, 120_000);
  expect(stack.info.queues[NAME]?.url).toBeTruthy();
  const sent = await inCopy(
    "npm",
    [
      "run",
      "--silent",
      "send",
      "--",
      NAME,
      JSON.stringify({ reference: "inv-1", amount: 1250 }),
      "--job-id",
      "scaffold-round-trip-1",
    ],
    { JOBFENCE_LOCAL_DIR: localDir.path },
  );
  expect(sent).toContain("scaffold-round-trip-1");

  const sql = new pg.Client({ connectionString: stack.info.databaseUrl });
  await sql.connect();
  try {
    await expect
      .poll(
        async () =>
          (
            await sql.query(
              `SELECT e.reference, e.amount::int, (SELECT count(*)::int FROM core.processed_jobs p
                 WHERE p.job_id = e.job_id AND p.consumer_id = core.consumer_id($2)) AS fences
               FROM record_payment.entries e WHERE e.job_id = $1`,
              ["scaffold-round-trip-1", NAME],
            )
          ).rows,
        { timeout: 30_000, interval: 250 },
      )
      .toEqual([{ reference: "inv-1", amount: 1250, fences: 1 }]);
  } finally {
    await sql.end();
  }
});
