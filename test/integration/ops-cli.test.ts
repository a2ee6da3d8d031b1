/**
 * The ops CLI (ops/) against the real API on a real HTTP server: every command, its human and
 * --json output, the state it leaves in the database, its errors and exit codes; bulk operations
 * run by the real worker, one chunk per poll of the CLI; and scripts/ops.ts spawned as a child
 * process to prove the entry point.
 */
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { LOCAL_ACCOUNT } from "../../local/aws-clients.ts";
import { serveHttpApi } from "../../local/http-adapter.ts";
import { type OpsIo, runOps, type Terminal } from "../../ops/cli.ts";
import { runChunk } from "../../shared/dead-letters/bulk-worker.ts";
import { sealKey } from "../../shared/dead-letters/seal.ts";
import { PermanentJobError } from "../../shared/errors/job.ts";
import { type ApiTestBed, apiTestBed } from "../support/api-harness.ts";
import { award, invoke, sqsRecord } from "../support/consumer-harness.ts";
import { receiveAll } from "../support/sqs.ts";

const ROOT = join(import.meta.dirname, "..", "..");
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const UUID_TEXT = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
/** Bulk operations over more rows than this need their plan's token (small, so tests reach it). */
const CONFIRM_ABOVE = 3;

let bed: ApiTestBed;
let queueUrl: string;
let tmp: string;
beforeAll(async () => {
  bed = await apiTestBed({ bulk: { confirmAbove: CONFIRM_ABOVE } });
  queueUrl = (await bed.queue("ops-cli")).url;
  tmp = await mkdtemp(join(tmpdir(), "jobfence-ops-"));
  // Always one pending dead letter no bulk test selects: a consumer's set is then never "every
  // pending dead letter", which needs a token whatever its size.
  await deadLetters("ops-bystander", ["ops-bystander-1"]);
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
  options: {
    token?: string;
    connection?: boolean;
    env?: Record<string, string>;
    stackFile?: string;
    sleep?: (ms: number) => Promise<void>;
    terminal?: Terminal;
    fetch?: typeof fetch;
  } = {},
): Promise<Run> {
  const out: string[] = [];
  const err: string[] = [];
  const io: OpsIo = {
    out: (line) => out.push(line),
    err: (line) => err.push(line),
    env: options.env ?? {},
    stackFile: options.stackFile ?? join(tmp, "absent-stack.json"),
    ...(options.sleep ? { sleep: options.sleep } : {}),
    ...(options.terminal ? { terminal: options.terminal } : {}),
    ...(options.fetch ? { fetch: options.fetch } : {}),
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
  await bed.consumerRole(name);
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

/**
 * The `sleep` of a watching CLI: instead of waiting, runs the bulk worker's next chunk (waiting
 * for one to come due at the operation's rate), so each poll sees exactly one more chunk done.
 */
async function nextChunk(): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const ran = await runChunk({ pool: bed.opsPool, sqs: bed.sqs });
    if (ran.kind !== "idle") return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error("no chunk of a bulk operation came due");
}

/** The token a --plan printed in its suggested start command. */
function tokenOf(run: Run): string {
  const token = /--confirm (\S+)/.exec(run.out)?.[1];
  if (token === undefined) throw new Error(`no token in:\n${run.out}`);
  return token;
}

/** The id of the operation a start printed. */
function operationIdOf(run: Run): string {
  const id = new RegExp(`^started \\w+ operation (${UUID_TEXT})`, "m").exec(run.out)?.[1];
  if (id === undefined) throw new Error(`no operation id in:\n${run.out}\n${run.err}`);
  return id;
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

  it("--errors adds each dead letter's last error as the last column, cut to stay on one line", async () => {
    await deadLetters("ops-list-errors", ["ops-list-errors-1", `ops-list-errors-${"y".repeat(150)}`], 1);
    const run = await ops(["dead-letters", "list", "--consumer", "ops-list-errors", "--errors"]);
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
      "last_error",
    ]);
    const rows = rest.filter((l) => UUID.test(l.slice(0, 36)));
    expect(rows).toHaveLength(3);
    const column = header?.indexOf("last_error") ?? -1;
    expect(column).toBeGreaterThan(0);
    const errors = rows.map((row) => row.slice(column));
    expect(errors).toContain("PermanentJobError: refused ops-list-errors-1");
    // A message longer than the column is cut with "…"; `show <id>` prints it whole.
    const long = errors.find((e) =>
      e.startsWith(`PermanentJobError: refused ops-list-errors-${"y".repeat(20)}`),
    );
    expect(long).toMatch(/…$/);
    expect(long).toHaveLength(100);
    expect(errors).toContainEqual(
      expect.stringMatching(/^PoisonMessageError: unparseable-body: body is not JSON/),
    );

    // Without the flag, no error column; --json has last_error either way.
    const plain = await ops(["dead-letters", "list", "--consumer", "ops-list-errors"]);
    expect(plain.lines[0]).not.toContain("last_error");
    expect(plain.out).not.toContain("PermanentJobError");
    const json = JSON.parse(
      (await ops(["dead-letters", "list", "--consumer", "ops-list-errors", "--json"])).out,
    );
    expect(json.items).toContainEqual(
      expect.objectContaining({
        job_id: "ops-list-errors-1",
        last_error: expect.objectContaining({
          class: "PermanentJobError",
          message: "refused ops-list-errors-1",
        }),
      }),
    );
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

    // commander's own message for a missing argument (was "show needs the dead letter's id").
    const missing = await ops(["dead-letters", "show"]);
    expect(missing.code).toBe(2);
    expect(missing.err).toContain("error: missing required argument 'id'");
    expect(missing.err).toContain("Usage: npm run ops -- dead-letters show [options] <id>");
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

describe("dead-letters openapi", () => {
  it("prints the document the API serves, byte for byte docs/openapi.json; a token without read is refused", async () => {
    const run = await ops(["dead-letters", "openapi"]);
    expect(run.err).toBe("");
    expect(run.code).toBe(0);
    expect(`${run.out}\n`).toBe(await readFile(join(ROOT, "docs", "openapi.json"), "utf8"));

    const refused = await ops(["dead-letters", "openapi"], { token: bed.tokens.discard });
    expect(refused.code).toBe(1);
    expect(refused.err).toMatch(/403/);
    expect(refused.err).toMatch(/core\.dead_letters\.read/);
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

  it("replaying a body no consumer can read prints the API's note: one, and a plan of several", async () => {
    await deadLetters("ops-replay-poison", ["ops-replay-poison-ok"], 2);
    const plan = await ops(["dead-letters", "replay", "--consumer", "ops-replay-poison", "--plan"]);
    expect(plan.err).toBe("");
    expect(plan.code).toBe(0);
    expect(plan.lines[0]).toMatch(/^replay plan: 3 pending dead letters match .* a replay would send 3, /);
    expect(plan.lines[1]).toMatch(
      /^note: 2 of the 3 dead letters this replay would send have no readable job \(job_fingerprint is null: .*\)\. A replay sends bodies unchanged, so the consumer will refuse them as poison again, without retries, and record them as new dead letters\.$/,
    );
    const planJson = JSON.parse(
      (await ops(["dead-letters", "replay", "--consumer", "ops-replay-poison", "--plan", "--json"])).out,
    );
    expect(planJson).toMatchObject({ would_send: 3, unreadable: 2, note: expect.any(String) });

    const id = await idOf("ops-replay-poison", "ops-replay-poison-poison-0");
    const run = await ops(["dead-letters", "replay", id]);
    expect(run.err).toBe("");
    expect(run.code).toBe(0);
    expect(run.lines).toEqual([
      expect.stringMatching(new RegExp(`^replayed ${id} \\(SQS message \\S+\\)$`)),
      expect.stringMatching(
        /^note: The body is not JSON, and a replay sends it unchanged: the consumer will refuse it as poison again, without retries, and record it as a new dead letter\. /,
      ),
    ]);
    const other = await idOf("ops-replay-poison", "ops-replay-poison-poison-1");
    const json = JSON.parse((await ops(["dead-letters", "replay", other, "--json"])).out);
    expect(json).toMatchObject({ id: other, status: "replayed", note: expect.stringContaining("not JSON") });

    // A readable job's replay has nothing to add.
    const ok = await ops(["dead-letters", "replay", await idOf("ops-replay-poison", "ops-replay-poison-ok")]);
    expect(ok.code).toBe(0);
    expect(ok.lines).toHaveLength(1);
    expect(ok.out).not.toContain("note:");
  });

  it("a replay whose run fails again links both dead letters, in the API (one and list) and in show", async () => {
    const queue = await bed.queue("ops-relink");
    await deadLetters("ops-relink", ["ops-relink-1"], 0, queue.url);
    const first = await idOf("ops-relink", "ops-relink-1");
    expect((await ops(["dead-letters", "replay", first])).code).toBe(0);
    // The replayed copy runs, and the consumer refuses it again: a new pending dead letter.
    const [copy, ...more] = await receiveAll(bed.sqs, queue.url);
    expect(more).toEqual([]);
    const consumer = bed.consumer(
      {
        ...awardPointsConsumer,
        name: "ops-relink",
        work: async (job) => {
          throw new PermanentJobError(`refused ${job.jobId} again`);
        },
      },
      { queueUrl: queue.url },
    );
    expect(await invoke(consumer, [sqsRecord(copy?.Body ?? "")])).toEqual([]);
    const rows = await rowsOf("ops-relink");
    expect(rows.map((r) => r.status)).toEqual(["replayed", "pending_review"]);
    const second = rows[1]?.id as string;

    const one = async (id: string) => JSON.parse((await ops(["dead-letters", "show", id, "--json"])).out);
    expect(await one(first)).toMatchObject({ id: first, replay_of: null, replay_failed_as: second });
    expect(await one(second)).toMatchObject({ id: second, replay_of: first, replay_failed_as: null });
    const list = JSON.parse(
      (await ops(["dead-letters", "list", "--consumer", "ops-relink", "--status", "replayed", "--json"])).out,
    );
    expect(list.items).toEqual([expect.objectContaining({ id: first, replay_failed_as: second })]);
    const pending = JSON.parse(
      (
        await ops([
          "dead-letters",
          "list",
          "--consumer",
          "ops-relink",
          "--status",
          "pending_review",
          "--json",
        ])
      ).out,
    );
    expect(pending.items).toEqual([expect.objectContaining({ id: second, replay_of: first })]);

    const shown = await ops(["dead-letters", "show", first]);
    expect(shown.out).toMatch(
      new RegExp(`^replay_failed_as\\s+${second} \\(its replay's run failed again as that one\\)$`, "m"),
    );
    expect((await ops(["dead-letters", "show", second])).out).toMatch(
      new RegExp(`^replay_of\\s+${first} \\(replayed; its run failed again as this one\\)$`, "m"),
    );
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

describe("dead-letters groups and the group, error-class and message filters", () => {
  it("lists a consumer's failure groups; each group's id lists exactly its dead letters", async () => {
    await deadLetters("ops-groups", ["ops-groups-1", "ops-groups-2", "ops-groups-3"], 2);

    const run = await ops(["dead-letters", "groups", "--consumer", "ops-groups"]);
    expect(run.err).toBe("");
    expect(run.code).toBe(0);
    expect(run.lines[0]?.split(/\s{2,}/)).toEqual([
      "consumer",
      "group",
      "error_class",
      "pending",
      "total",
      "last_seen",
      "sample message",
    ]);
    expect(run.out).toMatch(
      /^ops-groups\s+[0-9a-f]{32}\s+PermanentJobError\s+3\s+3\s+\S+Z\s+refused ops-groups-/m,
    );
    expect(run.out).toContain("dead letters of one: npm run ops -- dead-letters list --group <group>");

    const groups = JSON.parse(
      (await ops(["dead-letters", "groups", "--consumer", "ops-groups", "--json"])).out,
    ).items as Array<{ group: string; pending: number; consumer: string }>;
    expect(groups.length).toBeGreaterThanOrEqual(2);
    expect(groups.reduce((sum, g) => sum + g.pending, 0)).toBe(5);
    for (const g of groups) {
      expect(g.consumer).toBe("ops-groups");
      expect(g.group).toMatch(/^[0-9a-f]{32}$/);
      // A group is one consumer's: the same fingerprint in another consumer is another group.
      const members = JSON.parse(
        (await ops(["dead-letters", "list", "--consumer", "ops-groups", "--group", g.group, "--json"])).out,
      ).items;
      expect(members).toHaveLength(g.pending);
      for (const member of members) expect(member).toMatchObject({ consumer: "ops-groups", group: g.group });
    }

    const byClass = await ops([
      "dead-letters",
      "list",
      "--consumer",
      "ops-groups",
      "--error-class",
      "PermanentJobError",
    ]);
    expect(byClass.lines.filter((l) => UUID.test(l.slice(0, 36)))).toHaveLength(3);
    // A case-insensitive "contains" match on the last error's message.
    const byMessage = await ops([
      "dead-letters",
      "list",
      "--consumer",
      "ops-groups",
      "--message",
      "REFUSED OPS",
    ]);
    expect(byMessage.lines.filter((l) => UUID.test(l.slice(0, 36)))).toHaveLength(3);

    const stats = await ops(["dead-letters", "stats"]);
    expect(stats.out).toMatch(
      /^biggest pending failure groups \(\d+ of \d+; all: npm run ops -- dead-letters groups\):$/m,
    );
    expect(stats.out).toMatch(/^ops-groups\s+[0-9a-f]{32}\s+PermanentJobError\s+3\s+3\s/m);

    const id = await idOf("ops-groups", "ops-groups-1");
    const show = await ops(["dead-letters", "show", id]);
    expect(show.out).toMatch(/^error_class\s+PermanentJobError$/m);
    expect(show.out).toMatch(/^group\s+[0-9a-f]{32}$/m);
  });

  it("refuses bad group, message and limit values with the API schema's words (exit 2)", async () => {
    for (const [args, message] of [
      [["list", "--group", "xyz"], "--group: a group is 32 hex digits"],
      [["list", "--message", "ab"], "--message: "],
      [["replay", "--message", "ab", "--plan"], "--message: "],
      [["groups", "--limit", "0"], "--limit: "],
      [["groups", "--limit", "501"], "--limit: "],
    ] as const) {
      const run = await ops(["dead-letters", ...args]);
      expect(run.code, args.join(" ")).toBe(2);
      expect(run.err).toMatch(/^error: /);
      expect(run.err).toContain(message);
      expect(run.err).toContain("Usage:");
      expect(run.out).toBe("");
    }
  });
});

describe("dead-letters replay <id> --delay", () => {
  it("replays one dead letter with an SQS delay; refuses a delay out of the API's range", async () => {
    await deadLetters("ops-delay", ["ops-delay-1"]);
    const id = await idOf("ops-delay", "ops-delay-1");
    for (const delay of ["901", "-1", "soon", "1.5"]) {
      const refused = await ops(["dead-letters", "replay", id, "--delay", delay]);
      expect(refused.code, delay).toBe(2);
      expect(refused.err).toContain("error: --delay: ");
    }
    const run = await ops(["dead-letters", "replay", id, "--delay", "5"]);
    expect(run.err).toBe("");
    expect(run.code).toBe(0);
    expect(run.out).toMatch(new RegExp(`^replayed ${id} \\(SQS message \\S+, delivered in 5 s\\)$`));
    expect(await rowsOf("ops-delay")).toMatchObject([{ id, status: "replayed" }]);
  });
});

describe("dead-letters replay <id> --force-outlived --reason", () => {
  it("an outlived dead letter is refused without the override, and replayed with it and its reason", async () => {
    const consumer = "ops-outlived";
    await bed.consumerRole(consumer);
    // A copy drained 30 days after its first send, its job without a fence: the database records it outlived.
    const id = await bed.db.withClient(async (c) => {
      const { rows } = await c.query<{ id: string; error_kind: string }>(
        `INSERT INTO core.dead_letters (job_id, consumer, queue, tenant_id, attempts, error_kind, last_error,
                                        correlation_id, body_form, body, message_attributes)
         VALUES ('ops-outlived-1', $1, $2, 't_42', 19, 'unrecorded', '{"class":"UnrecordedMessageError","message":"x"}',
                 'c-1', 'text', $3, $4::jsonb)
         RETURNING id, error_kind`,
        [
          consumer,
          queueUrl,
          JSON.stringify(award("ops-outlived-1")),
          JSON.stringify({ sent_timestamp: String(Date.now() - 30 * 86_400_000) }),
        ],
      );
      expect(rows[0]?.error_kind).toBe("outlived");
      return rows[0]?.id as string;
    });
    const refused = await ops(["dead-letters", "replay", id]);
    expect(refused.code).not.toBe(0);
    expect(refused.err).toMatch(/outlived/);
    const noReason = await ops(["dead-letters", "replay", id, "--force-outlived"]);
    expect(noReason.code).toBe(2);
    expect(noReason.err).toMatch(/reason/);
    expect(await rowsOf(consumer)).toMatchObject([{ id, status: "pending_review" }]);
    const reason = "ledger has no entry for ops-outlived-1";
    const run = await ops(["dead-letters", "replay", id, "--force-outlived", "--reason", reason]);
    expect(run.err).toBe("");
    expect(run.code).toBe(0);
    expect(run.out).toMatch(new RegExp(`^replayed ${id} \\(SQS message \\S+\\)$`));
    expect(await rowsOf(consumer)).toMatchObject([{ id, status: "replayed", discard_reason: reason }]);
  });
});

describe("dead-letters replay (bulk)", () => {
  const jobs = ["ops-bulk-1", "ops-bulk-2", "ops-bulk-3", "ops-bulk-4", "ops-bulk-5"];

  it("--plan prints the match count, a sample and the start command with its token; changes nothing", async () => {
    await deadLetters("ops-bulk", jobs);
    await deadLetters("ops-bulk-other", ["ops-bulk-other-1"]);
    const run = await ops(["dead-letters", "replay", "--consumer", "ops-bulk", "--plan"]);
    expect(run.err).toBe("");
    expect(run.code).toBe(0);
    expect(run.lines[0]).toMatch(
      /^replay plan: 5 pending dead letters match \(of \d+ pending in all\); a replay would send 5, resolve 0 as superseded .* and leave 0 pending as conflicts /,
    );
    expect(run.out).toContain("sample (5 of 5):");
    for (const job of jobs) expect(run.out).toContain(job);
    // Five is more than the bed's confirmAbove: the token is required.
    expect(run.out).toMatch(
      /^start it with this plan's token \(required for this set; it expires at \S+Z\):$/m,
    );
    expect(run.out).toMatch(/^ {2}npm run ops -- dead-letters replay --consumer ops-bulk --confirm \S+$/m);
    expect(run.out).toMatch(/^nothing was changed$/m);
    expect((await rowsOf("ops-bulk")).map((r) => r.status)).toEqual(Array(5).fill("pending_review"));

    const json = await ops(["dead-letters", "replay", "--consumer", "ops-bulk", "--plan", "--json"]);
    expect(JSON.parse(json.out)).toMatchObject({
      kind: "replay",
      matched: 5,
      would_send: 5,
      confirmation_required: true,
      token: expect.any(String),
    });
  });

  it("without the token a large set is refused (428) with the command that plans it", async () => {
    const run = await ops(["dead-letters", "replay", "--consumer", "ops-bulk"]);
    expect(run.code).toBe(1);
    expect(run.out).toBe("");
    expect(run.err).toMatch(/^error: 428 /m);
    expect(run.err).toMatch(/^ {2}reason: confirmation-required$/m);
    expect(run.err).toContain(
      "hint: plan it first — npm run ops -- dead-letters replay --consumer ops-bulk --plan — then start it with the --confirm <plan-token> it prints",
    );
    expect((await rowsOf("ops-bulk")).map((r) => r.status)).toEqual(Array(5).fill("pending_review"));
  });

  it("starts with the plan's token and --watch follows the worker chunk by chunk to the end", async () => {
    const plan = await ops(["dead-letters", "replay", "--consumer", "ops-bulk", "--plan"]);
    const run = await ops(
      [
        "dead-letters",
        "replay",
        "--consumer",
        "ops-bulk",
        "--confirm",
        tokenOf(plan),
        "--rate",
        "2",
        "--watch",
      ],
      { sleep: nextChunk },
    );
    expect(run.code).toBe(0);
    const id = operationIdOf(run);
    expect(run.err).toBe(
      `watching; Ctrl-C stops watching, not the operation (npm run ops -- dead-letters operations cancel ${id} does)`,
    );
    // At 2 a second the worker handles 2 rows a chunk: one progress line per chunk, no line twice.
    expect(run.lines.slice(0, 5)).toEqual([
      `started replay operation ${id}: 5 dead letters at up to 2/s`,
      `replay ${id}: running 0/5 (0%) — 0 replayed, 0 superseded, 0 conflicts, 0 failed`,
      `replay ${id}: running 2/5 (40%) — 2 replayed, 0 superseded, 0 conflicts, 0 failed`,
      `replay ${id}: running 4/5 (80%) — 4 replayed, 0 superseded, 0 conflicts, 0 failed`,
      `replay ${id}: completed 5/5 (100%) — 5 replayed, 0 superseded, 0 conflicts, 0 failed`,
    ]);
    expect(run.out).toMatch(new RegExp(`^operation\\s+${id}$`, "m"));
    expect(run.out).toMatch(/^status\s+completed$/m);
    expect(run.out).toMatch(/^filter\s+\{"consumer":"ops-bulk"\}$/m);
    expect(run.out).toMatch(/^submitted\s+\S+Z by local-admin$/m);
    expect(await rowsOf("ops-bulk")).toEqual(
      jobs.map((job) =>
        expect.objectContaining({ job_id: job, status: "replayed", resolved_by: "local-admin" }),
      ),
    );
    expect(await rowsOf("ops-bulk-other")).toMatchObject([{ status: "pending_review" }]);

    // Nothing left: a re-run is not a failure.
    const nothingLeft = await ops(["dead-letters", "replay", "--consumer", "ops-bulk"]);
    expect(nothingLeft).toMatchObject({ code: 0, out: "no pending dead letters match: nothing to replay" });
    const emptyPlan = await ops(["dead-letters", "replay", "--consumer", "ops-bulk", "--plan"]);
    expect(emptyPlan.code).toBe(0);
    expect(emptyPlan.lines[0]).toMatch(
      /^replay plan: no pending dead letters match \(of \d+ pending in all\); nothing to do$/,
    );
  });

  it("--json --watch prints the started operation, then one body per change, one per line", async () => {
    await deadLetters("ops-bulk-json", ["ops-bulk-json-1", "ops-bulk-json-2", "ops-bulk-json-3"]);
    const run = await ops(
      ["dead-letters", "replay", "--consumer", "ops-bulk-json", "--rate", "2", "--watch", "--json"],
      { sleep: nextChunk },
    );
    expect(run.err).toBe("");
    expect(run.code).toBe(0);
    const bodies = run.lines.map((l) => JSON.parse(l));
    expect(bodies.map((b) => [b.status, b.processed])).toEqual([
      ["running", 0],
      ["running", 0],
      ["running", 2],
      ["completed", 3],
    ]);
    expect(bodies.at(-1)).toMatchObject({ kind: "replay", planned: 3, replayed: 3, skipped: [] });
  });

  it("a plan whose set changed is refused (409 plan-stale) with how to plan again", async () => {
    await deadLetters("ops-stale", ["ops-stale-1", "ops-stale-2"]);
    const plan = await ops(["dead-letters", "replay", "--consumer", "ops-stale", "--plan"]);
    const gone = await idOf("ops-stale", "ops-stale-1");
    expect((await ops(["dead-letters", "discard", gone, "--reason", "changes the set"])).code).toBe(0);
    const run = await ops(["dead-letters", "replay", "--consumer", "ops-stale", "--confirm", tokenOf(plan)]);
    expect(run.code).toBe(1);
    expect(run.err).toMatch(/^error: 409 /m);
    expect(run.err).toMatch(/^ {2}reason: plan-stale$/m);
    expect(run.err).toContain(
      "hint: the matching dead letters changed since the plan; plan again — npm run ops -- dead-letters replay --consumer ops-stale --plan — and start it with the new token",
    );
    expect((await rowsOf("ops-stale")).map((r) => r.status)).toEqual(["discarded", "pending_review"]);
  });

  it("a start with a plan's token acts on the planned rows and says how many newer matching dead letters it left out", async () => {
    await deadLetters("ops-newer", ["ops-newer-1", "ops-newer-2"]);
    const plan = await ops(["dead-letters", "discard", "--consumer", "ops-newer", "--plan"]);
    await deadLetters("ops-newer", ["ops-newer-3", "ops-newer-4"]); // recorded after the plan
    const run = await ops([
      "dead-letters",
      "discard",
      "--consumer",
      "ops-newer",
      "--confirm",
      tokenOf(plan),
      "--reason",
      "r",
    ]);
    expect(run.err).toBe("");
    expect(run.code).toBe(0);
    expect(run.out).toMatch(/^started discard operation \S+: 2 dead letters at up to/m);
    expect(run.out).toContain(
      "2 newer matching dead letters not included: recorded after the plan, they stay pending; plan again to include them",
    );
    operationIdOf(run);
    await nextChunk();
    expect((await rowsOf("ops-newer")).map((r) => [r.job_id, r.status])).toEqual([
      ["ops-newer-1", "discarded"],
      ["ops-newer-2", "discarded"],
      ["ops-newer-3", "pending_review"],
      ["ops-newer-4", "pending_review"],
    ]);

    // --json has the field; a start without a token, whose set is everything matching, leaves none out.
    const json = await ops(["dead-letters", "discard", "--consumer", "ops-newer", "--reason", "r", "--json"]);
    expect(JSON.parse(json.out)).toMatchObject({ planned: 2, newer_not_included: 0 });
  });

  it("a plan made before the API restarted (a new signing key) is refused as from an earlier run, with how to plan again", async () => {
    await deadLetters("ops-restart", ["ops-restart-1", "ops-restart-2"]);
    const plan = await ops(["dead-letters", "replay", "--consumer", "ops-restart", "--plan"]);
    // The local stack makes its key at every start: a restarted API is one with a new key.
    const restarted = await serveHttpApi(bed.handler({ sealKey: sealKey(randomBytes(32)) }));
    try {
      const response = await fetch(`${restarted.url}/v1/core/dead-letters/replay`, {
        method: "POST",
        headers: { authorization: `Bearer ${bed.tokens.admin}`, "content-type": "application/json" },
        body: JSON.stringify({ filter: { consumer: "ops-restart" }, token: tokenOf(plan) }),
      });
      expect(response.status).toBe(400);
      expect(response.headers.get("content-type")).toContain("application/problem+json");
      const problem = (await response.json()) as { detail: string; errors: { field: string }[] };
      expect(problem.detail).toContain("its plan was made before the key changed");
      expect(problem.detail).toContain(
        "plan again (POST /v1/core/dead-letters/replay/plan with the same filter, or the ops CLI's dead-letters replay <filters> --plan)",
      );
      expect(problem.errors.map((e) => e.field)).toEqual(["token"]);

      const run = await ops(
        [
          ...["dead-letters", "replay", "--consumer", "ops-restart", "--confirm", tokenOf(plan)],
          ...["--api", restarted.url, "--token", bed.tokens.admin],
        ],
        { connection: false },
      );
      expect(run.code).toBe(1);
      expect(run.err).toMatch(/^error: 400 /m);
      expect(run.err).toContain("its plan was made before the key changed");
      expect(run.err).toContain(
        "hint: a plan's token works only with the API that issued it, within 15 minutes and not after a restart of the local stack; plan again — npm run ops -- dead-letters replay --consumer ops-restart --plan — and start it with the new token",
      );
      expect((await rowsOf("ops-restart")).map((r) => r.status)).toEqual([
        "pending_review",
        "pending_review",
      ]);
    } finally {
      await restarted.close();
    }
  });

  it("reports the dead letters that failed to send and exits 1 when watching; they stay pending", async () => {
    const missingQueue = `${bed.emulator.endpoint}/${LOCAL_ACCOUNT}/ops-cli-no-such-queue`;
    await deadLetters("ops-bulk-fail", ["ops-bulk-fail-1", "ops-bulk-fail-2"], 0, missingQueue);
    const run = await ops(["dead-letters", "replay", "--consumer", "ops-bulk-fail", "--watch"], {
      sleep: nextChunk,
    });
    expect(run.code).toBe(1);
    const id = operationIdOf(run);
    expect(run.out).toContain(
      `replay ${id}: completed 2/2 (100%) — 0 replayed, 0 superseded, 0 conflicts, 2 failed`,
    );
    expect(run.out).toMatch(/^left pending \(2\):$/m);
    for (const row of await rowsOf("ops-bulk-fail")) {
      expect(run.out).toMatch(new RegExp(`^ {2}${row.id}\\s+send-failed\\s+\\S+Z\\s+\\S`, "m"));
    }
    expect(run.err).toContain("2 dead letters failed to send and stay pending_review");
    expect((await rowsOf("ops-bulk-fail")).map((r) => r.status)).toEqual([
      "pending_review",
      "pending_review",
    ]);
  });

  it("refuses a bulk replay without a filter unless --all (usage, exit 2); --all plans everything", async () => {
    const run = await ops(["dead-letters", "replay"]);
    expect(run.code).toBe(2);
    expect(run.err).toContain("a bulk replay needs a filter");
    const status = await ops(["dead-letters", "replay", "--status", "replayed", "--consumer", "x"]);
    expect(status.code).toBe(2);
    const both = await ops(["dead-letters", "replay", "--all", "--consumer", "x", "--plan"]);
    expect(both.code).toBe(2);
    expect(both.err).toContain("--all means no filter");
    const conflicting = await ops(["dead-letters", "replay", "--consumer", "x", "--plan", "--confirm", "t"]);
    expect(conflicting.code).toBe(2);
    expect(conflicting.err).toContain("cannot be used with option '--confirm <plan-token>'");

    const all = await ops(["dead-letters", "replay", "--all", "--plan", "--json"]);
    expect(all.code).toBe(0);
    const plan = JSON.parse(all.out);
    // Every pending dead letter: the API asks for the token whatever the count.
    expect(plan).toMatchObject({ kind: "replay", confirmation_required: true });
    expect(plan.matched).toBe(plan.pending_total);
    const unconfirmed = await ops(["dead-letters", "replay", "--all"]);
    expect(unconfirmed.code).toBe(1);
    expect(unconfirmed.err).toMatch(/^error: 428 /m);
    expect(unconfirmed.err).toContain("npm run ops -- dead-letters replay --all --plan");
  });
});

describe("dead-letters discard (bulk)", () => {
  it("needs --reason; --plan needs none and suggests the start; with the token it discards them all", async () => {
    await deadLetters("ops-bulk-discard", [], 4);
    const noReason = await ops(["dead-letters", "discard", "--consumer", "ops-bulk-discard"]);
    expect(noReason.code).toBe(2);
    expect(noReason.err).toContain("error: discard needs --reason");

    const plan = await ops(["dead-letters", "discard", "--consumer", "ops-bulk-discard", "--plan"]);
    expect(plan.err).toBe("");
    expect(plan.code).toBe(0);
    expect(plan.lines[0]).toMatch(
      /^discard plan: 4 pending dead letters match \(of \d+ pending in all\); a discard would resolve all of them as discarded$/,
    );
    expect(plan.out).toContain("sample (4 of 4):");
    expect(plan.out).toMatch(
      /^ {2}npm run ops -- dead-letters discard --consumer ops-bulk-discard --confirm \S+ --reason "<why>"$/m,
    );
    expect((await rowsOf("ops-bulk-discard")).map((r) => r.status)).toEqual(Array(4).fill("pending_review"));

    const run = await ops(
      [
        "dead-letters",
        "discard",
        "--consumer",
        "ops-bulk-discard",
        "--reason",
        "garbage from a test producer",
        "--confirm",
        tokenOf(plan),
        "--watch",
      ],
      { sleep: nextChunk },
    );
    expect(run.code).toBe(0);
    const id = operationIdOf(run);
    expect(run.lines[0]).toBe(`started discard operation ${id}: 4 dead letters at up to 200/s`);
    expect(run.out).toContain(`discard ${id}: completed 4/4 (100%) — 4 discarded`);
    expect(run.out).toMatch(/^reason\s+garbage from a test producer$/m);
    expect(await rowsOf("ops-bulk-discard")).toEqual(
      Array(4).fill(
        expect.objectContaining({
          status: "discarded",
          discard_reason: "garbage from a test producer",
          resolved_by: "local-admin",
        }),
      ),
    );
  });
});

describe("dead-letters operations", () => {
  it("lists operations newest first, filters them, and refuses bad flags (exit 2)", async () => {
    await deadLetters("ops-list-ops", ["ops-list-ops-1"]);
    const started = await ops(["dead-letters", "replay", "--consumer", "ops-list-ops"]);
    expect(started.code).toBe(0);
    const id = operationIdOf(started);
    expect(started.lines[1]).toBe(`follow it: npm run ops -- dead-letters operations status ${id} --watch`);

    const run = await ops(["dead-letters", "operations"]);
    expect(run.err).toBe("");
    expect(run.code).toBe(0);
    expect(run.lines[0]?.split(/\s{2,}/)).toEqual([
      "id",
      "kind",
      "status",
      "progress",
      "submitted_at",
      "submitted_by",
      "filter",
    ]);
    expect(run.lines[1]).toMatch(
      new RegExp(
        `^${id}\\s+replay\\s+running\\s+0/1\\s+\\S+Z\\s+local-admin\\s+\\{"consumer":"ops-list-ops"\\}$`,
      ),
    );

    const discards = JSON.parse(
      (await ops(["dead-letters", "operations", "list", "--kind", "discard", "--json"])).out,
    );
    expect(discards.items.length).toBeGreaterThan(0);
    for (const op of discards.items) expect(op.kind).toBe("discard");

    for (const args of [
      ["--status", "lost"],
      ["--kind", "resurrect"],
      ["--limit", "101"],
    ]) {
      const refused = await ops(["dead-letters", "operations", "list", ...args]);
      expect(refused.code, args.join(" ")).toBe(2);
      expect(refused.err).toContain(`error: ${args[0]}: `);
    }
    await nextChunk();
  });

  it("shows, cancels and watches an operation; a second cancel is a 409 problem", async () => {
    await deadLetters("ops-cancel", ["ops-cancel-1", "ops-cancel-2", "ops-cancel-3"]);
    const started = await ops(["dead-letters", "replay", "--consumer", "ops-cancel", "--rate", "0.5"]);
    const id = operationIdOf(started);

    const status = await ops(["dead-letters", "operations", "status", id]);
    expect(status.code).toBe(0);
    expect(status.out).toMatch(new RegExp(`^operation\\s+${id}$`, "m"));
    expect(status.out).toMatch(/^status\s+running$/m);
    expect(status.out).toMatch(/^progress\s+0 of 3 \(0%\)$/m);
    expect(status.out).toMatch(/^rate\s+0\.5\/s$/m);

    const forbidden = await ops(["dead-letters", "operations", "cancel", id], { token: bed.tokens.read });
    expect(forbidden.code).toBe(1);
    expect(forbidden.err).toMatch(/^error: 403 /m);

    const cancel = await ops(["dead-letters", "operations", "cancel", id]);
    expect(cancel.err).toBe("");
    expect(cancel.code).toBe(0);
    expect(cancel.out).toBe(
      `cancelled replay operation ${id} after 0 of 3: 0 replayed, 0 superseded, 0 conflicts, 0 failed`,
    );
    expect((await rowsOf("ops-cancel")).map((r) => r.status)).toEqual(Array(3).fill("pending_review"));

    const again = await ops(["dead-letters", "operations", "cancel", id]);
    expect(again.code).toBe(1);
    expect(again.err).toMatch(/^error: 409 /m);

    // Watching an operation that has ended returns at once; cancelled is not success.
    const watched = await ops(["dead-letters", "operations", "status", id, "--watch"]);
    expect(watched.code).toBe(1);
    expect(watched.out).toMatch(/^status\s+cancelled$/m);
    expect(watched.out).toMatch(/^cancelled_by\s+local-admin$/m);
    expect(watched.err).toContain(`the replay operation ${id} ended cancelled`);

    const invalid = await ops(["dead-letters", "operations", "status", "not-a-uuid"]);
    expect(invalid.code).toBe(1);
    expect(invalid.err).toContain("error: 400 The request is not valid");
    const interval = await ops(["dead-letters", "operations", "status", id, "--watch", "--interval", "0"]);
    expect(interval.code).toBe(2);
    expect(interval.err).toContain("error: --interval: ");
  });

  it("on a terminal, --watch redraws one progress bar in place instead of printing lines", async () => {
    await deadLetters("ops-tty", ["ops-tty-1", "ops-tty-2", "ops-tty-3"]);
    const writes: string[] = [];
    const terminal: Terminal = { write: (text) => writes.push(text), columns: 80 };
    const run = await ops(["dead-letters", "replay", "--consumer", "ops-tty", "--rate", "2", "--watch"], {
      sleep: nextChunk,
      terminal,
    });
    expect(run.code).toBe(0);
    const id = operationIdOf(run);
    expect(run.out).not.toContain(`replay ${id}: running`);
    expect(run.out).toMatch(/^status\s+completed$/m);
    const bars = writes.filter((w) => w !== "\r\u001b[K").map((w) => w.replace("\r\u001b[K", ""));
    expect(writes.every((w) => w.startsWith("\r\u001b[K"))).toBe(true);
    expect(bars).toEqual([
      expect.stringMatching(/^\[░+\] {3}0% 0\/3 — 0 replayed/),
      expect.stringMatching(/^\[█+░+\] {2}66% 2\/3 — 2 replayed/),
      expect.stringMatching(/^\[█+\] 100% 3\/3 — 3 replayed/),
    ]);
    for (const bar of bars) expect(bar.length).toBeLessThan(terminal.columns);
    // The bar is cleared before the summary is printed.
    expect(writes.at(-1)).toBe("\r\u001b[K");
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

  it("finds the local stack in JOBFENCE_LOCAL_DIR, where npm start writes it", async () => {
    const localDir = await mkdtemp(join(tmp, "local-dir-"));
    const stackFile = join(localDir, "stack.json");
    await writeFile(stackFile, JSON.stringify({ apiUrl: bed.apiUrl, tokens: { admin: bed.tokens.admin } }));
    const out: string[] = [];
    const err: string[] = [];
    // No io.stackFile: the CLI resolves it from the environment, as scripts/ops.ts runs it.
    const code = await runOps(["dead-letters", "stats", "--json"], {
      out: (line) => out.push(line),
      err: (line) => err.push(line),
      env: { JOBFENCE_LOCAL_DIR: localDir },
    });
    expect(err).toEqual([`using the local stack's admin token from ${stackFile}`]);
    expect(code).toBe(0);
    expect(JSON.parse(out.join("\n"))).toHaveProperty("counts");
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

  it("reports an unreachable API clearly, naming `npm start` (exit 1)", async () => {
    const url = `http://127.0.0.1:${await closedPort()}`;
    const run = await ops(["dead-letters", "stats", "--api", url, "--token", "t"], { connection: false });
    expect(run.code).toBe(1);
    expect(run.out).toBe("");
    expect(run.err.split("\n")).toEqual([
      `error: cannot reach the dead-letter API at ${url}: is the local stack running? start it with \`npm start\``,
      expect.stringMatching(/^ {2}cause: .*ECONNREFUSED/),
    ]);

    // Another host: the URL and the network come first; the local stack is still named.
    const remote = await ops(
      ["dead-letters", "stats", "--api", "https://ops.example.invalid", "--token", "t"],
      {
        connection: false,
        fetch: async () => {
          throw new TypeError("fetch failed", {
            cause: Object.assign(new Error("getaddrinfo ENOTFOUND ops.example.invalid"), {
              code: "ENOTFOUND",
            }),
          });
        },
      },
    );
    expect(remote.code).toBe(1);
    expect(remote.err.split("\n")).toEqual([
      "error: cannot reach the dead-letter API at https://ops.example.invalid: check the URL (--api, JOBFENCE_API_URL) and the network; for the local stack, start it with `npm start`",
      "  cause: getaddrinfo ENOTFOUND ops.example.invalid",
    ]);
  });

  it("prints help on --help (exit 0) and usage on a bad command (exit 2)", async () => {
    const top = await ops(["--help"], { connection: false });
    expect(top.code).toBe(0);
    expect(top.out).toContain("Usage: npm run ops -- dead-letters <command>");
    const discardHelp = await ops(["dead-letters", "discard", "--help"], { connection: false });
    expect(discardHelp.code).toBe(0);
    expect(discardHelp.out).toContain("--reason <text>");
    // commander's own message for an unknown command (was "unknown dead-letters command: resurrect").
    const unknown = await ops(["dead-letters", "resurrect"], { connection: false });
    expect(unknown.code).toBe(2);
    expect(unknown.err).toContain("error: unknown command 'resurrect'");
    const dl = await ops(["dl", "replay", "--help"], { connection: false });
    expect(dl.code).toBe(0);
    expect(dl.out).toContain("Usage: npm run ops -- dead-letters replay <id> [--delay <seconds>]");
    expect(dl.out).toContain("--confirm <plan-token>");
    expect(dl.out).toContain("--api <url>");
    const none = await ops([], { connection: false });
    expect(none.code).toBe(2);
    expect(none.err).toContain("Usage: npm run ops -- dead-letters <command>");
  });
});

describe("scripts/ops.ts", () => {
  async function spawnOps(
    args: string[],
    env: Record<string, string> = {},
  ): Promise<{ code: number | null; stdout: string; stderr: string }> {
    const child = spawn(process.execPath, ["scripts/ops.ts", ...args], {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? "", ...env },
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

  it("reads the local stack of JOBFENCE_LOCAL_DIR, as npm start, send, demo and doctor do", async () => {
    const localDir = await mkdtemp(join(tmp, "spawn-local-dir-"));
    const stackFile = join(localDir, "stack.json");
    await writeFile(stackFile, JSON.stringify({ apiUrl: bed.apiUrl, tokens: { admin: bed.tokens.admin } }));
    const run = await spawnOps(["dead-letters", "stats", "--json"], { JOBFENCE_LOCAL_DIR: localDir });
    expect(run.stderr).toBe(`using the local stack's admin token from ${stackFile}\n`);
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

  it("names `npm start` when the API cannot be reached (exit 1)", async () => {
    const url = `http://127.0.0.1:${await closedPort()}`;
    const run = await spawnOps(["dead-letters", "list", "--api", url, "--token", "t"]);
    expect(run.code).toBe(1);
    expect(run.stdout).toBe("");
    expect(run.stderr).toContain(
      `error: cannot reach the dead-letter API at ${url}: is the local stack running? start it with \`npm start\`\n`,
    );
  });
});
