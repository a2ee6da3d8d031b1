/**
 * End-to-end support: the local stack as a child process (`npm start`, in its own process group so
 * the whole tree can be signalled), and small helpers that drive it from outside only — HTTP and
 * SQL here, the SQS API in ../support/sqs.ts. The test owns PostgreSQL and the SQS emulator, so a stack can be SIGKILLed and
 * started again on the same services.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import type { StackInfo } from "../../local/stack.ts";

/** The repository root, where `npm start` runs. */
export const REPO_ROOT = fileURLToPath(new URL("../../", import.meta.url));

/** Retry timing the e2e stack runs with: seconds, so retries and exhaustion happen quickly. */
export const E2E_RETRY = Object.freeze({ baseSeconds: 1, capSeconds: 2, maxAttempts: 4 });

/** The services the test owns and the stack is pointed at. */
export interface StackServices {
  /** @default none: the stack starts its own embedded PostgreSQL (data in `localDir`), as `npm start` does */
  readonly databaseUrl?: string;
  /** @default none: the stack starts its own SQS emulator, as `npm start` does */
  readonly sqsEndpoint?: string;
  /** A directory of the stack's own (stack.json, stats.json). */
  readonly localDir: string;
  /** The repository `npm start` runs in. @default this one */
  readonly cwd?: string;
  /** Variables set last, over the rest (a fixed port, say). @default none */
  readonly env?: NodeJS.ProcessEnv;
}

/** How a stack process ended. */
export interface StackExit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

/** A running `npm start`. */
export interface StackProcess {
  readonly pid: number;
  readonly info: StackInfo;
  /** Everything the process printed on stdout so far (the last line possibly incomplete). */
  stdout(): string;
  /** Everything it printed on stderr so far. */
  stderr(): string;
  /** Complete stdout lines matching `pattern`. */
  lines(pattern: RegExp): string[];
  /** stdout lines matching `pattern`, each with when the test process received it (ms since the epoch). */
  timedLines(pattern: RegExp): Array<{ at: number; line: string }>;
  /** Waits until a complete stdout line matches `pattern`; returns the match. */
  waitForLine(pattern: RegExp, timeoutMs?: number): Promise<RegExpMatchArray>;
  /** Resolves when the process (npm) has exited. */
  readonly exited: Promise<StackExit>;
  /** SIGINT to the process group (what Ctrl-C does); SIGKILL to the group if it is still up after `timeoutMs`. */
  stop(timeoutMs?: number): Promise<StackExit & { forced: boolean }>;
  /** SIGKILL to the whole process group, at once; waits for npm to be gone. */
  kill(): Promise<StackExit>;
}

/**
 * The environment `npm start` gets: the test's, minus any JOBFENCE_* of its own and the database
 * and SQS it runs on, plus ours. Services the test does not own, the stack starts on free ports.
 */
export function stackEnv(services: StackServices): NodeJS.ProcessEnv {
  const inherited = Object.fromEntries(
    Object.entries(process.env).filter(
      ([name]) => !name.startsWith("JOBFENCE_") && name !== "DATABASE_URL" && name !== "SQS_ENDPOINT",
    ),
  );
  return {
    ...inherited,
    ...(services.databaseUrl ? { DATABASE_URL: services.databaseUrl } : { JOBFENCE_PG_PORT: "0" }),
    ...(services.sqsEndpoint ? { SQS_ENDPOINT: services.sqsEndpoint } : { JOBFENCE_SQS_PORT: "0" }),
    JOBFENCE_LOCAL_DIR: services.localDir,
    JOBFENCE_API_PORT: "0",
    JOBFENCE_PROVIDER_PORT: "0",
    JOBFENCE_RETRY_BASE_SECONDS: String(E2E_RETRY.baseSeconds),
    JOBFENCE_RETRY_CAP_SECONDS: String(E2E_RETRY.capSeconds),
    JOBFENCE_MAX_ATTEMPTS: String(E2E_RETRY.maxAttempts),
    JOBFENCE_LOCK_TIMEOUT_MS: "500",
    JOBFENCE_POLL_WAIT_SECONDS: "1",
    ...services.env,
  };
}

/** A fresh directory for a stack's state; `remove` deletes it. */
export async function tempLocalDir(): Promise<{ path: string; remove(): Promise<void> }> {
  const path = await mkdtemp(join(tmpdir(), "jobfence-e2e-"));
  return { path, remove: () => rm(path, { recursive: true, force: true }) };
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Sends `signal` to the process group led by `pid`; false when the group is gone already. */
function signalGroup(pid: number, signal: NodeJS.Signals | 0): boolean {
  try {
    process.kill(-pid, signal);
    return true;
  } catch {
    return false;
  }
}

/** Whether any process of the group led by `pid` is still alive. */
export function groupAlive(pid: number): boolean {
  return signalGroup(pid, 0);
}

/**
 * The pid of the stack's own node process (`node scripts/start.ts`) in the process group led by
 * `pgid` (npm → sh → node), read from /proc; undefined when there is none (or no /proc).
 */
export async function stackNodePid(pgid: number): Promise<number | undefined> {
  let entries: string[];
  try {
    entries = await readdir("/proc");
  } catch {
    return undefined;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = await readFile(`/proc/${entry}/stat`, "utf8");
      // pid (comm) state ppid pgrp …; comm may hold spaces and parentheses.
      const pgrp = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[2]);
      if (pgrp !== pgid) continue;
      // Not `sh -c "node scripts/start.ts"`: node itself, with the script as an argument of its own.
      const [program = "", ...args] = (await readFile(`/proc/${entry}/cmdline`, "utf8")).split("\0");
      if (/(^|\/)node$/.test(program) && args.includes("scripts/start.ts")) return Number(entry);
    } catch {
      // the process ended meanwhile
    }
  }
  return undefined;
}

/**
 * Spawns `npm start` with {@link stackEnv} and waits until it is ready: the "ready" line on stdout
 * and `stack.json` in the local directory. Kills the group and throws when it exits or times out
 * first, with what it printed.
 */
export async function startStack(services: StackServices, timeoutMs = 60_000): Promise<StackProcess> {
  const child: ChildProcess = spawn("npm", ["start"], {
    cwd: services.cwd ?? REPO_ROOT,
    env: stackEnv(services),
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const pid = child.pid;
  if (pid === undefined) throw new Error("npm start could not be spawned");
  let out = "";
  let err = "";
  let partial = "";
  const received: Array<{ at: number; line: string }> = [];
  let exit: StackExit | undefined;
  const waiters = new Set<() => void>();
  const notify = () => {
    for (const waiter of waiters) waiter();
  };
  child.stdout?.setEncoding("utf8");
  child.stderr?.setEncoding("utf8");
  child.stdout?.on("data", (chunk: string) => {
    out += chunk;
    const at = Date.now();
    const parts = (partial + chunk).split("\n");
    partial = parts.pop() ?? "";
    for (const line of parts) received.push({ at, line });
    notify();
  });
  child.stderr?.on("data", (chunk: string) => {
    err += chunk;
  });
  // Every writer (npm, sh, node) has closed both pipes: everything the stack printed has been read.
  const closed = (stream: NodeJS.ReadableStream | null) =>
    new Promise<void>((resolve) => (stream ? stream.on("close", () => resolve()) : resolve()));
  const pipesClosed = Promise.all([closed(child.stdout), closed(child.stderr)]);
  const exited = new Promise<StackExit>((resolve) => {
    child.on("exit", (code, signal) => {
      exit = { code, signal };
      notify();
      resolve(exit);
    });
  });

  const lines = (pattern: RegExp) => received.filter((l) => pattern.test(l.line)).map((l) => l.line);
  const waitForLine = (pattern: RegExp, ms = 30_000) =>
    new Promise<RegExpMatchArray>((resolve, reject) => {
      const check = () => {
        for (const { line } of received) {
          const match = line.match(pattern);
          if (match) {
            done();
            resolve(match);
            return;
          }
        }
        if (exit) {
          done();
          reject(
            new Error(
              `the stack exited (${JSON.stringify(exit)}) before printing ${pattern}; stderr:\n${err}`,
            ),
          );
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`no line matching ${pattern} within ${ms} ms; stdout:\n${out}\nstderr:\n${err}`));
      }, ms);
      const done = () => {
        clearTimeout(timer);
        waiters.delete(check);
      };
      waiters.add(check);
      check();
    });

  /** Resolves true once npm has exited, no process of its group is left and both pipes are closed. */
  const gone = async (ms: number): Promise<boolean> => {
    const deadline = Date.now() + ms;
    const timedOut = sleep(ms).then(() => false);
    if (!(await Promise.race([exited.then(() => true), timedOut]))) return false;
    while (groupAlive(pid)) {
      if (Date.now() > deadline) return false;
      await sleep(50);
    }
    return Promise.race([
      pipesClosed.then(() => true),
      sleep(Math.max(0, deadline - Date.now())).then(() => false),
    ]);
  };
  const kill = async (): Promise<StackExit> => {
    signalGroup(pid, "SIGKILL");
    await gone(10_000);
    return exited;
  };
  const stop = async (ms = 20_000): Promise<StackExit & { forced: boolean }> => {
    if (!exit || groupAlive(pid)) signalGroup(pid, "SIGINT");
    if (await gone(ms)) return { ...(await exited), forced: false };
    return { ...(await kill()), forced: true };
  };

  try {
    await waitForLine(/\bready\s+wrote\b/, timeoutMs);
    const info = JSON.parse(await readFile(join(services.localDir, "stack.json"), "utf8")) as StackInfo;
    return {
      pid,
      info,
      stdout: () => out,
      stderr: () => err,
      lines,
      timedLines: (pattern) => received.filter((l) => pattern.test(l.line)),
      waitForLine,
      exited,
      stop,
      kill,
    };
  } catch (error) {
    await kill();
    throw error;
  }
}

/** The award-points queue of a running stack. */
export function awardQueue(info: StackInfo): { url: string; backstopUrl: string } {
  const queue = info.queues["award-points"];
  if (!queue) throw new Error(`the stack runs no award-points consumer: ${JSON.stringify(info.queues)}`);
  return queue;
}

/** An award-points job envelope. */
export function envelope(jobId: string, userId: string, points: number, tenantId = "t_e2e"): string {
  return JSON.stringify({
    job_id: jobId,
    tenant_id: tenantId,
    correlation_id: `corr-${jobId}`,
    payload: { user_id: userId, points },
  });
}

/** Polls `probe` until it returns a value `done` accepts; throws with the last value after `timeoutMs`. */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T>,
  done: (value: T) => boolean,
  timeoutMs = 30_000,
  intervalMs = 200,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (done(value)) return value;
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}; last: ${JSON.stringify(value)}`);
    await sleep(intervalMs);
  }
}

/** What the database holds for one job. */
export interface JobEffects {
  ledger: number;
  fences: number;
  deadLetters: number;
}

/** Counts a job's ledger rows, fences and dead letters (as the superuser). */
export async function effectsOf(db: pg.Client, jobId: string): Promise<JobEffects> {
  const { rows } = await db.query<JobEffects>(
    `SELECT (SELECT count(*)::int FROM award_points.ledger WHERE job_id = $1) AS ledger,
            (SELECT count(*)::int FROM core.processed_jobs WHERE job_id = $1) AS fences,
            (SELECT count(*)::int FROM core.dead_letters WHERE job_id = $1) AS "deadLetters"`,
    [jobId],
  );
  const row = rows[0];
  if (!row) throw new Error("no row");
  return row;
}

/** A dead letter as the tests read it. */
export interface DeadLetterRow {
  id: string;
  job_id: string;
  consumer: string;
  queue: string;
  payload: Record<string, unknown> | null;
  /** How the body is kept ('text' or 'utf16') and, for text, the body itself. */
  body_form: string;
  body: string | null;
  attempts: number;
  error_kind: string;
  status: string;
  discard_reason: string | null;
  resolved_by: string | null;
  resolved_at: Date | null;
  last_error: { class: string; message: string };
}

/** The dead letters of a job, oldest first. */
export async function deadLettersOf(db: pg.Client, jobId: string): Promise<DeadLetterRow[]> {
  const { rows } = await db.query<DeadLetterRow>(
    `SELECT id, job_id, consumer, queue, payload, body_form, body, attempts, error_kind, status, discard_reason,
            resolved_by, resolved_at, last_error
       FROM core.dead_letters WHERE job_id = $1 ORDER BY created_at, id`,
    [jobId],
  );
  return rows;
}

/** A dead letter by id. */
export async function deadLetterById(db: pg.Client, id: string): Promise<DeadLetterRow> {
  const { rows } = await db.query<DeadLetterRow>(
    `SELECT id, job_id, consumer, queue, payload, body_form, body, attempts, error_kind, status, discard_reason,
            resolved_by, resolved_at, last_error
       FROM core.dead_letters WHERE id = $1`,
    [id],
  );
  const row = rows[0];
  if (!row) throw new Error(`no dead letter ${id}`);
  return row;
}

/** A row lock held on a user's balance in an open transaction, until `release`. */
export interface HeldLock {
  release(): Promise<void>;
}

/**
 * Creates the user's balance row if missing (a lock needs a row), then holds `FOR UPDATE` on it in
 * a transaction of its own connection, so the consumer's balance upsert waits and hits its
 * lock_timeout: a transient failure.
 */
export async function holdBalanceLock(
  databaseUrl: string,
  userId: string,
  tenantId = "t_e2e",
): Promise<HeldLock> {
  const holder = new pg.Client({ connectionString: databaseUrl, application_name: "jobfence-e2e-lock" });
  await holder.connect();
  try {
    await holder.query(
      `INSERT INTO award_points.balances (tenant_id, user_id, balance) VALUES ($1, $2, 0)
       ON CONFLICT DO NOTHING`,
      [tenantId, userId],
    );
    await holder.query("BEGIN");
    const locked = await holder.query(
      "SELECT 1 FROM award_points.balances WHERE tenant_id = $1 AND user_id = $2 FOR UPDATE",
      [tenantId, userId],
    );
    if (locked.rowCount !== 1) throw new Error(`no balance row to lock for ${userId}`);
  } catch (error) {
    await holder.end().catch(() => {});
    throw error;
  }
  let released = false;
  return {
    async release() {
      if (released) return;
      released = true;
      try {
        await holder.query("COMMIT");
      } finally {
        await holder.end();
      }
    },
  };
}

/** An HTTP answer: status, content type and the parsed JSON body (undefined when there is none). */
export interface ApiAnswer {
  status: number;
  contentType: string;
  body: Record<string, unknown> | undefined;
}

/** Calls the stack's API with a bearer token (none when `token` is undefined). */
export async function callApi(
  info: StackInfo,
  method: "GET" | "POST",
  path: string,
  token: string | undefined,
  body?: unknown,
): Promise<ApiAnswer> {
  const headers: Record<string, string> = {};
  if (token !== undefined) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(`${info.apiUrl}${path}`, {
    method,
    headers,
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await response.text();
  return {
    status: response.status,
    contentType: response.headers.get("content-type") ?? "",
    body: text === "" ? undefined : (JSON.parse(text) as Record<string, unknown>),
  };
}
