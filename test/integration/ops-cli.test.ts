/**
 * The ops CLI (local/ops-cli.ts) against the real API on a real HTTP server: every command, its
 * human and --json output, the state it leaves in the database, its errors and exit codes; and
 * scripts/ops.ts spawned as a child process to prove the entry point.
 */
import { spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { LOCAL_ACCOUNT } from "../../local/aws-clients.ts";
import { type OpsIo, runOps } from "../../local/ops-cli.ts";
import { PermanentJobError } from "../../shared/errors.ts";
import { type ApiTestBed, apiTestBed } from "../support/api-harness.ts";
import { award, invoke, sqsRecord } from "../support/consumer-harness.ts";

const ROOT = join(import.meta.dirname, "..", "..");
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

let bed: ApiTestBed;
let queueUrl: string;
let tmp: string;
beforeAll(async () => {
  bed = await apiTestBed();
  queueUrl = (await bed.queue("ops-cli")).url;
  tmp = await mkdtemp(join(tmpdir(), "jobfence-ops-"));
});
afterAll(async () => {
  await bed?.close();
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

interface Run {
  readonly code: number;
  readonly out: string;
  readonly err: string;
  readonly lines: string[];
}

/**
 * Runs the CLI in-process. By default it talks to the test API with the admin token and sees no
 * environment and no local stack.
 */
async function ops(
  args: string[],
  options: { token?: string; connection?: boolean; env?: Record<string, string>; stackFile?: string } = {},
): Promise<Run> {
  const out: string[] = [];
  const err: string[] = [];
  const io: OpsIo = {
    out: (line) => out.push(line),
    err: (line) => err.push(line),
    env: options.env ?? {},
    stackFile: options.stackFile ?? join(tmp, "absent-stack.json"),
  };
  const connection =
    options.connection === false ? [] : ["--api", bed.apiUrl, "--token", options.token ?? bed.tokens.admin];
  const code = await runOps([...args, ...connection], io);
  return { code, out: out.join("\n"), err: err.join("\n"), lines: out };
}

/**
 * Dead letters of consumer `name`: one `hard` per job id (the work throws PermanentJobError) and
 * `poison` unparseable bodies. Their queue is `queue` (a real emulator queue unless told otherwise).
 */
async function deadLetters(
  name: string,
  hardJobs: readonly string[],
  poison = 0,
  queue = queueUrl,
): Promise<void> {
  const consumer = bed.consumer(
    {
      ...awardPointsConsumer,
      name,
      work: async (job) => {
        throw new PermanentJobError(`refused ${job.jobId}`);
      },
    },
    { queueUrl: queue },
  );
  const records = [
    ...hardJobs.map((jobId) => sqsRecord(JSON.stringify(award(jobId)))),
    ...Array.from({ length: poison }, (_, i) =>
      sqsRecord(`not json ${i}`, { messageId: `${name}-poison-${i}` }),
    ),
  ];
  expect(await invoke(consumer, records)).toEqual([]);
}

async function rowsOf(consumer: string): Promise<
  Array<{
    id: string;
    job_id: string;
    status: string;
    discard_reason: string | null;
    resolved_by: string | null;
  }>
> {
  return bed.db.withClient(async (c) => {
    const { rows } = await c.query(
      `SELECT id, job_id, status, discard_reason, resolved_by FROM core.dead_letters
        WHERE consumer = $1 ORDER BY created_at, id`,
      [consumer],
    );
    return rows;
  });
}

async function idOf(consumer: string, jobId: string): Promise<string> {
  const row = (await rowsOf(consumer)).find((r) => r.job_id === jobId);
  if (!row) throw new Error(`no dead letter ${consumer}/${jobId}`);
  return row.id;
}

/** A port nothing listens on. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === "string") throw new Error("no port");
  return address.port;
}

describe("dead-letters list", () => {
  it("prints an aligned table of the matching rows, filters, pages, and --json parses", async () => {
    await deadLetters("ops-list", ["ops-list-1", "ops-list-2", `ops-list-${"x".repeat(80)}`], 1);

    const run = await ops(["dead-letters", "list", "--consumer", "ops-list"]);
    expect(run.err).toBe("");
    expect(run.code).toBe(0);
    const [header, ...rest] = run.lines;
    expect(header?.split(/\s{2,}/)).toEqual([
      "id",
      "created_at",
      "consumer",
      "error_kind",
      "status",
      "attempts",
      "job_id",
    ]);
    const rows = rest.filter((l) => UUID.test(l.slice(0, 36)));
    expect(rows).toHaveLength(4);
    for (const row of rows) {
      // Columns line up under the header.
      expect(row.indexOf("ops-list")).toBe(header?.indexOf("consumer"));
      expect(row).toContain("pending_review");
    }
    expect(run.out).toMatch(/ops-list-1$/m);
    expect(run.out).toMatch(/\bpoison\b.*ops-list-poison-0$/m);
    // A long job id is cut, not wrapped.
    expect(run.out).toContain(`ops-list-${"x".repeat(30)}…`);
    expect(run.out).not.toContain("x".repeat(60));
    expect(run.out).toMatch(/^4 dead letters$/m);

    const poisonOnly = await ops([
      "dead-letters",
      "list",
      "--consumer",
      "ops-list",
      "--error-kind",
      "poison",
    ]);
    expect(poisonOnly.lines.filter((l) => UUID.test(l.slice(0, 36)))).toHaveLength(1);

    const json = await ops(["dead-letters", "list", "--consumer", "ops-list", "--json"]);
    expect(json.code).toBe(0);
    const body = JSON.parse(json.out);
    expect(body.next_cursor).toBeNull();
    expect(body.items.map((i: { job_id: string }) => i.job_id).sort()).toEqual(
      (await rowsOf("ops-list")).map((r) => r.job_id).sort(),
    );

    const firstPage = await ops(["dead-letters", "list", "--consumer", "ops-list", "--limit", "3"]);
    expect(firstPage.lines.filter((l) => UUID.test(l.slice(0, 36)))).toHaveLength(3);
    const cursor = /add --cursor (\S+)/.exec(firstPage.out)?.[1];
    expect(cursor).toBeDefined();
    const secondPage = await ops([
      "dead-letters",
      "list",
      "--consumer",
      "ops-list",
      "--limit",
      "3",
      "--cursor",
      cursor ?? "",
    ]);
    expect(secondPage.lines.filter((l) => UUID.test(l.slice(0, 36)))).toHaveLength(1);

    const allPages = await ops([
      "dead-letters",
      "list",
      "--consumer",
      "ops-list",
      "--limit",
      "1",
      "--all-pages",
    ]);
    expect(allPages.lines.filter((l) => UUID.test(l.slice(0, 36)))).toHaveLength(4);
    const allJson = await ops([
      "dead-letters",
      "list",
      "--consumer",
      "ops-list",
      "--limit",
      "3",
      "--all-pages",
      "--json",
    ]);
    const pages = allJson.lines.map((l) => JSON.parse(l));
    expect(pages.map((p) => p.items.length)).toEqual([3, 1]);

    const none = await ops(["dead-letters", "list", "--consumer", "ops-nobody"]);
    expect(none).toMatchObject({ code: 0, out: "no dead letters match" });
  });

  it("refuses bad flag values as usage errors (exit 2) before calling the API", async () => {
    for (const args of [
      ["--status", "lost"],
      ["--error-kind", "soft"],
      ["--limit", "0"],
      ["--limit", "501"],
      ["--after", "yesterday"],
      ["--bogus"],
      ["extra"],
    ]) {
      const run = await ops(["dead-letters", "list", ...args]);
      expect(run.code, args.join(" ")).toBe(2);
      expect(run.err).toMatch(/^error: /);
      expect(run.err).toContain("Usage:");
      expect(run.out).toBe("");
    }
  });

  it("escapes control characters from dead letters in human output", async () => {
    await deadLetters("ops-escape", ["ops-escape-\u001b[31mred\u001b[0m"]);
    const run = await ops(["dead-letters", "list", "--consumer", "ops-escape"]);
    expect(run.code).toBe(0);
    expect(run.out).not.toContain("\u001b");
    expect(run.out).toContain("ops-escape-\\u001b[31mred\\u001b[0m");
  });
});

describe("dead-letters show", () => {
  it("prints the fields, the last error and the payload pretty-printed", async () => {
    await deadLetters("ops-show", ["ops-show-1"], 1);
    const id = await idOf("ops-show", "ops-show-1");
    const run = await ops(["dead-letters", "show", id]);
    expect(run.err).toBe("");
    expect(run.code).toBe(0);
    expect(run.out).toMatch(new RegExp(`^id\\s+${id}$`, "m"));
    expect(run.out).toMatch(/^status\s+pending_review$/m);
    expect(run.out).toMatch(/^job_id\s+ops-show-1$/m);
    expect(run.out).toMatch(/^error_kind\s+hard$/m);
    expect(run.out).toMatch(/^last_error\s+PermanentJobError: refused ops-show-1$/m);
    expect(run.out).toMatch(/^resolved_at\s+-$/m);
    expect(run.out).toMatch(/^payload:$/m);
    expect(run.out).toMatch(/^ {6}"user_id": "u-1",?$/m);
    expect(run.out).toMatch(/^ {6}"points": 10,?$/m);
    expect(run.out).toMatch(/^ {4}"job_id": "ops-show-1",?$/m);
    // The attempts that led to it: here one run, refused by the business rule.
    expect(run.out).toMatch(/^attempts:$/m);
    expect(run.out).toMatch(
      /^ {2}1 {2}\S+Z {2}receive 1 {2}failure {2}PermanentJobError: refused ops-show-1$/m,
    );

    const json = await ops(["dead-letters", "show", id, "--json"]);
    expect(JSON.parse(json.out)).toMatchObject({ id, payload: award("ops-show-1") });

    const poisonId = await idOf("ops-show", "ops-show-poison-0");
    const poison = await ops(["dead-letters", "show", poisonId]);
    expect(poison.out).toMatch(/^error_kind\s+poison$/m);
    // Not JSON: the body is shown as received (escaped), never wrapped in a made-up object.
    expect(poison.out).toContain("body (text, not stored as JSON):");
    expect(poison.out).toContain('"not json 0"');
    expect(poison.out).not.toContain('"raw"');
  });

  it("prints the problem for an unknown id (404) and an invalid one (400), exit 1", async () => {
    const unknown = await ops(["dead-letters", "show", "00000000-0000-4000-8000-000000000000"]);
    expect(unknown.code).toBe(1);
    expect(unknown.out).toBe("");
    expect(unknown.err).toContain("error: 404 No such resource");
    expect(unknown.err).toContain("no dead letter has id 00000000-0000-4000-8000-000000000000");

    const invalid = await ops(["dead-letters", "show", "not-a-uuid"]);
    expect(invalid.code).toBe(1);
    expect(invalid.err).toContain("error: 400 The request is not valid");
    expect(invalid.err).toMatch(/^ {2}- path parameter id: /m);

    const missing = await ops(["dead-letters", "show"]);
    expect(missing.code).toBe(2);
    expect(missing.err).toContain("show needs the dead letter's id");
  });
});

describe("dead-letters stats", () => {
  it("prints counts by consumer, status and error kind, and the oldest pending", async () => {
    await deadLetters("ops-stats", ["ops-stats-1", "ops-stats-2"], 1);
    const run = await ops(["dead-letters", "stats"]);
    expect(run.err).toBe("");
    expect(run.code).toBe(0);
    expect(run.lines[0]?.split(/\s{2,}/)).toEqual(["consumer", "status", "error_kind", "count"]);
    expect(run.out).toMatch(/^ops-stats\s+pending_review\s+hard\s+2$/m);
    expect(run.out).toMatch(/^ops-stats\s+pending_review\s+poison\s+1$/m);
    expect(run.out).toMatch(/^total \d+ dead letters \(\d+ pending_review/m);
    const oldest = await idOf("ops-stats", "ops-stats-1");
    expect(run.out).toMatch(/^oldest pending per consumer:$/m);
    expect(run.out).toMatch(new RegExp(`^ops-stats\\s+${oldest}\\s+\\S+Z\\s+\\d+[smhd]`, "m"));

    const json = JSON.parse((await ops(["dead-letters", "stats", "--json"])).out);
    expect(json.counts).toEqual(
      expect.arrayContaining([
        { consumer: "ops-stats", status: "pending_review", error_kind: "hard", count: 2 },
        { consumer: "ops-stats", status: "pending_review", error_kind: "poison", count: 1 },
      ]),
    );
  });
});

describe("dead-letters replay <id> and discard", () => {
  it("replays one dead letter; a second replay is a 409 problem", async () => {
    await deadLetters("ops-replay", ["ops-replay-1"]);
    const id = await idOf("ops-replay", "ops-replay-1");
    const run = await ops(["dead-letters", "replay", id]);
    expect(run.err).toBe("");
    expect(run.code).toBe(0);
    expect(run.out).toMatch(new RegExp(`^replayed ${id} \\(SQS message \\S+\\)$`));
    expect(await rowsOf("ops-replay")).toMatchObject([
      { id, status: "replayed", resolved_by: "local-admin" },
    ]);

    const again = await ops(["dead-letters", "replay", id]);
    expect(again.code).toBe(1);
    expect(again.err).toContain("error: 409 The dead letter's state does not allow this operation");
    expect(again.err).toMatch(/^ {2}current_status: replayed$/m);

    const mixed = await ops(["dead-letters", "replay", id, "--consumer", "ops-replay"]);
    expect(mixed.code).toBe(2);
    expect(mixed.err).toContain("--consumer is for a bulk replay");
  });

  it("refuses a replay with the read-only token: prints the 403 problem, exit 1", async () => {
    await deadLetters("ops-forbidden", ["ops-forbidden-1"]);
    const id = await idOf("ops-forbidden", "ops-forbidden-1");
    const run = await ops(["dead-letters", "replay", id], { token: bed.tokens.read });
    expect(run.code).toBe(1);
    expect(run.out).toBe("");
    expect(run.err).toMatch(/^error: 403 The token lacks the permission this operation requires$/m);
    expect(run.err).toContain("core.dead_letters.replay");
    expect(await rowsOf("ops-forbidden")).toMatchObject([{ status: "pending_review" }]);

    const unauthenticated = await ops(["dead-letters", "stats"], { token: "not-a-jwt" });
    expect(unauthenticated.code).toBe(1);
    expect(unauthenticated.err).toMatch(/^error: 401 /m);
    expect(unauthenticated.err).toContain("hint: the token is missing, expired or not for this API");
  });

  it("discard needs --reason (exit 2 with the usage); with one it discards", async () => {
    await deadLetters("ops-discard", [], 1);
    const id = await idOf("ops-discard", "ops-discard-poison-0");

    for (const reason of [[], ["--reason", "   "]]) {
      const refused = await ops(["dead-letters", "discard", id, ...reason]);
      expect(refused.code).toBe(2);
      expect(refused.err).toContain("error: discard needs --reason");
      expect(refused.err).toContain('discard <id> --reason "<why>"');
    }
    expect(await rowsOf("ops-discard")).toMatchObject([{ status: "pending_review" }]);

    const run = await ops(["dead-letters", "discard", id, "--reason", "garbage from a test producer"]);
    expect(run.err).toBe("");
    expect(run.code).toBe(0);
    expect(run.out).toBe(`discarded ${id}: garbage from a test producer`);
    expect(await rowsOf("ops-discard")).toMatchObject([
      { id, status: "discarded", discard_reason: "garbage from a test producer", resolved_by: "local-admin" },
    ]);
  });
});

describe("dead-letters replay (bulk)", () => {
  const jobs = ["ops-bulk-1", "ops-bulk-2", "ops-bulk-3", "ops-bulk-4", "ops-bulk-5"];

  it("--dry-run prints the match count and changes nothing", async () => {
    await deadLetters("ops-bulk", jobs);
    await deadLetters("ops-bulk-other", ["ops-bulk-other-1"]);
    const run = await ops(["dead-letters", "replay", "--consumer", "ops-bulk", "--dry-run"]);
    expect(run.err).toBe("");
    expect(run.code).toBe(0);
    expect(run.lines[0]).toMatch(
      /^dry run: 5 pending dead letters match; a replay would send 5, resolve 0 as superseded .* and leave 0 pending as conflicts /,
    );
    expect(run.out).toContain("sample (the oldest 5 of 5):");
    for (const job of jobs) expect(run.out).toContain(job);
    expect(run.out).toMatch(/^nothing was changed$/m);
    expect((await rowsOf("ops-bulk")).map((r) => r.status)).toEqual(Array(5).fill("pending_review"));

    const json = await ops(["dead-letters", "replay", "--consumer", "ops-bulk", "--dry-run", "--json"]);
    expect(JSON.parse(json.out)).toMatchObject({ dry_run: true, matched: 5, would_send: 5 });
  });

  it("with --batch 2 over 5 matches: 3 calls with progress, all 5 replayed, others untouched", async () => {
    const run = await ops(["dead-letters", "replay", "--consumer", "ops-bulk", "--batch", "2"]);
    expect(run.err).toBe("");
    expect(run.code).toBe(0);
    expect(run.lines).toEqual([
      "batch 1: 2 handled (2 replayed, 0 superseded, 0 conflicts, 0 failed) — 2 so far",
      "batch 2: 2 handled (2 replayed, 0 superseded, 0 conflicts, 0 failed) — 4 so far",
      "batch 3: 1 handled (1 replayed, 0 superseded, 0 conflicts, 0 failed) — 5 so far",
      "done: 5 handled in 3 calls — 5 replayed, 0 superseded, 0 conflicts, 0 failed",
    ]);
    expect((await rowsOf("ops-bulk")).map((r) => r.status)).toEqual(Array(5).fill("replayed"));
    expect(await rowsOf("ops-bulk-other")).toMatchObject([{ status: "pending_review" }]);

    const nothingLeft = await ops(["dead-letters", "replay", "--consumer", "ops-bulk"]);
    expect(nothingLeft.code).toBe(0);
    expect(nothingLeft.out).toContain("done: no pending dead letters matched");
  });

  it("--json prints one response per call, one per line", async () => {
    await deadLetters("ops-bulk-json", ["ops-bulk-json-1", "ops-bulk-json-2", "ops-bulk-json-3"]);
    const run = await ops([
      "dead-letters",
      "replay",
      "--consumer",
      "ops-bulk-json",
      "--batch",
      "2",
      "--json",
    ]);
    expect(run.code).toBe(0);
    const calls = run.lines.map((l) => JSON.parse(l));
    expect(calls.map((c) => [c.matched, c.outcomes.length, c.next_cursor === null])).toEqual([
      [2, 2, false],
      [1, 1, true],
    ]);
  });

  it("reports failures per dead letter and exits 1; they stay pending", async () => {
    const missingQueue = `${bed.emulator.endpoint}/${LOCAL_ACCOUNT}/ops-cli-no-such-queue`;
    await deadLetters("ops-bulk-fail", ["ops-bulk-fail-1", "ops-bulk-fail-2"], 0, missingQueue);
    const run = await ops(["dead-letters", "replay", "--consumer", "ops-bulk-fail"]);
    expect(run.code).toBe(1);
    expect(run.lines).toEqual([
      "batch 1: 2 handled (0 replayed, 0 superseded, 0 conflicts, 2 failed) — 2 so far",
      "done: 2 handled in 1 call — 0 replayed, 0 superseded, 0 conflicts, 2 failed",
    ]);
    for (const row of await rowsOf("ops-bulk-fail")) expect(run.err).toContain(`failed ${row.id}: `);
    expect(run.err).toContain("2 dead letters failed to send and stay pending_review");
    expect((await rowsOf("ops-bulk-fail")).map((r) => r.status)).toEqual([
      "pending_review",
      "pending_review",
    ]);
  });

  it("refuses a bulk replay without a filter unless --all (usage, exit 2)", async () => {
    const run = await ops(["dead-letters", "replay"]);
    expect(run.code).toBe(2);
    expect(run.err).toContain("a bulk replay needs a filter");
    const status = await ops(["dead-letters", "replay", "--status", "replayed", "--consumer", "x"]);
    expect(status.code).toBe(2);
    const all = await ops(["dead-letters", "replay", "--all", "--dry-run", "--json"]);
    expect(all.code).toBe(0);
    expect(JSON.parse(all.out)).toMatchObject({ dry_run: true });
  });
});

describe("connection", () => {
  it("takes the URL and token from the environment", async () => {
    const run = await ops(["dead-letters", "stats", "--json"], {
      connection: false,
      env: { JOBFENCE_API_URL: bed.apiUrl, JOBFENCE_TOKEN: bed.tokens.read },
    });
    expect(run.code).toBe(0);
    expect(JSON.parse(run.out)).toHaveProperty("counts");
  });

  it("falls back to the local stack's apiUrl and admin token, and says so", async () => {
    const stackFile = join(tmp, "stack.json");
    await writeFile(stackFile, JSON.stringify({ apiUrl: bed.apiUrl, tokens: { admin: bed.tokens.admin } }));
    const run = await ops(["dead-letters", "stats", "--json"], { connection: false, stackFile });
    expect(run.code).toBe(0);
    expect(run.err).toBe(`using the local stack's admin token from ${stackFile}`);
    expect(JSON.parse(run.out)).toHaveProperty("counts");

    // The stack's token is not offered to another API.
    const elsewhere = await ops(["dead-letters", "stats"], {
      connection: false,
      stackFile,
      env: { JOBFENCE_API_URL: "https://ops.example.invalid" },
    });
    expect(elsewhere.code).toBe(2);
    expect(elsewhere.err).toContain("no token");
  });

  it("explains a missing API URL: no stack file, or one without apiUrl (exit 2)", async () => {
    const absent = await ops(["dead-letters", "stats"], { connection: false });
    expect(absent.code).toBe(2);
    expect(absent.err).toContain("no API URL: pass --api <url> or set JOBFENCE_API_URL");
    expect(absent.err).toContain("does not exist; `npm start` writes it");

    const stackFile = join(tmp, "db-only-stack.json");
    await writeFile(stackFile, JSON.stringify({ databaseUrl: "postgres://x" }));
    const dbOnly = await ops(["dead-letters", "stats"], { connection: false, stackFile });
    expect(dbOnly.code).toBe(2);
    expect(dbOnly.err).toContain("has no apiUrl");
  });

  it("reports an unreachable API clearly (exit 1)", async () => {
    const url = `http://127.0.0.1:${await closedPort()}`;
    const run = await ops(["dead-letters", "stats", "--api", url, "--token", "t"], { connection: false });
    expect(run.code).toBe(1);
    expect(run.err).toMatch(new RegExp(`^error: cannot reach the API at ${url}: .*ECONNREFUSED`));
  });

  it("prints help on --help (exit 0) and usage on a bad command (exit 2)", async () => {
    const top = await ops(["--help"], { connection: false });
    expect(top.code).toBe(0);
    expect(top.out).toContain("Usage: npm run ops -- dead-letters <command>");
    const discardHelp = await ops(["dead-letters", "discard", "--help"], { connection: false });
    expect(discardHelp.code).toBe(0);
    expect(discardHelp.out).toContain("--reason <text>");
    const unknown = await ops(["dead-letters", "resurrect"], { connection: false });
    expect(unknown.code).toBe(2);
    expect(unknown.err).toContain("unknown dead-letters command: resurrect");
  });
});

describe("scripts/ops.ts", () => {
  async function spawnOps(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
    const child = spawn(process.execPath, ["scripts/ops.ts", ...args], {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? "" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString("utf8");
    });
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString("utf8");
    });
    const code = await new Promise<number | null>((resolve, reject) => {
      child.on("error", reject);
      child.on("close", resolve);
    });
    return { code, stdout, stderr };
  }

  it("runs as a child process: stats --json exits 0 with the response on stdout", async () => {
    const run = await spawnOps([
      "dead-letters",
      "stats",
      "--api",
      bed.apiUrl,
      "--token",
      bed.tokens.read,
      "--json",
    ]);
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toMatchObject({ counts: expect.any(Array) });
  });

  it("sets the exit code: 1 for a refused call, 2 for a usage error", async () => {
    const forbidden = await spawnOps([
      "dead-letters",
      "stats",
      "--api",
      bed.apiUrl,
      "--token",
      bed.tokens.none,
    ]);
    expect(forbidden.code).toBe(1);
    expect(forbidden.stderr).toMatch(/^error: 403 /);
    const usage = await spawnOps(["dead-letters", "discard"]);
    expect(usage.code).toBe(2);
  });
});
