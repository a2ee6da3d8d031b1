/**
 * The local stack's edges (issue 32, item 9), as users meet them: `npm start` in a child process
 * with its own embedded PostgreSQL and SQS emulator, refused a taken port, and stopped by a signal to
 * npm or to its node process. After each, nothing of the stack may be left: no process in its
 * group, and nothing listening on the ports it had.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { chmod } from "node:fs/promises";
import { createConnection, createServer, type Server } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { freePort } from "../../local/postgres.ts";
import {
  callApi,
  groupAlive,
  REPO_ROOT,
  type StackProcess,
  type StackServices,
  stackEnv,
  stackNodePid,
  startStack,
  tempLocalDir,
  waitFor,
} from "./support.ts";

const LONG = 120_000;

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
});

/** A local directory the embedded PostgreSQL's OS user can traverse (mkdtemp makes it 0700). */
async function localDir(): Promise<string> {
  const dir = await tempLocalDir();
  cleanups.push(() => dir.remove());
  await chmod(dir.path, 0o755);
  return dir.path;
}

/** Holds `port` on 127.0.0.1 until the test ends, as another program would. */
async function holdPort(): Promise<number> {
  const port = await freePort();
  const server: Server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", resolve);
  });
  cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return port;
}

/** Whether something accepts connections on 127.0.0.1:`port`. */
function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ port, host: "127.0.0.1" });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

/** The ports a stack listens on. */
interface StackPorts {
  postgres: number;
  sqs: number;
  api: number;
  provider: number;
}

/** Every port the stack gets, fixed and free, so the test can check each is let go. */
async function fixedPorts(): Promise<StackPorts> {
  return {
    postgres: await freePort(),
    sqs: await freePort(),
    api: await freePort(),
    provider: await freePort(),
  };
}

function portEnv(ports: StackPorts): NodeJS.ProcessEnv {
  return {
    JOBFENCE_PG_PORT: String(ports.postgres),
    JOBFENCE_SQS_PORT: String(ports.sqs),
    JOBFENCE_API_PORT: String(ports.api),
    JOBFENCE_PROVIDER_PORT: String(ports.provider),
  };
}

/** `npm start` run to its end: its exit, what it printed, and whether any process of its group is left. */
async function startToExit(
  services: StackServices,
  timeoutMs = 60_000,
): Promise<{ code: number | null; stdout: string; stderr: string; pid: number }> {
  const child: ChildProcess = spawn("npm", ["start"], {
    cwd: REPO_ROOT,
    env: stackEnv(services),
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const pid = child.pid as number;
  cleanups.push(async () => {
    if (groupAlive(pid)) process.kill(-pid, "SIGKILL");
  });
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (chunk) => {
    stdout += String(chunk);
  });
  child.stderr?.on("data", (chunk) => {
    stderr += String(chunk);
  });
  const code = await new Promise<number | null>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`npm start still running after ${timeoutMs} ms:\n${stdout}\n${stderr}`)),
      timeoutMs,
    );
    child.on("close", (exitCode) => {
      clearTimeout(timer);
      resolve(exitCode);
    });
  });
  return { code, stdout, stderr, pid };
}

/** Starts a stack on its own PostgreSQL and emulator, on `ports`; stopped at the test's end if still up. */
async function ownStack(ports: StackPorts): Promise<StackProcess> {
  const stack = await startStack({ localDir: await localDir(), env: portEnv(ports) });
  cleanups.push(() => stack.stop(10_000));
  return stack;
}

/** Waits until no process of the stack's group is left, and checks none of its ports still listens. */
async function expectAllGone(stack: StackProcess, ports: StackPorts) {
  await waitFor(
    "every process of the stack's group to end",
    async () => groupAlive(stack.pid),
    (alive) => !alive,
    20_000,
  );
  for (const [part, port] of Object.entries(ports)) {
    expect(await listening(port), `${part} still listens on ${port}`).toBe(false);
  }
}

describe("npm start refuses a taken port, clearly, and leaves nothing running", () => {
  it("names the PostgreSQL port that is taken and the setting that moves it", { timeout: LONG }, async () => {
    const taken = await holdPort();
    const ports = { ...(await fixedPorts()), postgres: taken };
    const run = await startToExit({ localDir: await localDir(), env: portEnv(ports) });
    expect(run.code).toBe(1);
    expect(run.stderr).toContain(
      `the local stack could not start: port ${taken} on 127.0.0.1, wanted by PostgreSQL, is taken by another process; set JOBFENCE_PG_PORT to another port (0 picks a free one)`,
    );
    expect(run.stderr).not.toContain("undefined");
    expect(groupAlive(run.pid)).toBe(false);
  });

  for (const [part, name, setting] of [
    ["sqs", "the SQS emulator", "JOBFENCE_SQS_PORT"],
    ["api", "the dead-letter API", "JOBFENCE_API_PORT"],
    ["provider", "the fake provider", "JOBFENCE_PROVIDER_PORT"],
  ] as const) {
    it(`refuses a taken ${part} port after PostgreSQL started, and stops what had started`, {
      timeout: LONG,
    }, async () => {
      const taken = await holdPort();
      const ports = { ...(await fixedPorts()), [part]: taken };
      const run = await startToExit({ localDir: await localDir(), env: portEnv(ports) });
      expect(run.code).toBe(1);
      expect(run.stdout).toMatch(/postgres\s+embedded PostgreSQL/); // it had started
      expect(run.stdout).toMatch(/start\s+failed; stopping what had started/);
      expect(run.stderr).toContain(
        `the local stack could not start: port ${taken} on 127.0.0.1, wanted by ${name}, is taken by another process; set ${setting} to another port`,
      );
      expect(run.stderr).not.toMatch(/EADDRINUSE|Unhandled/);
      // The embedded PostgreSQL ran in the group: none of it is left, and its port is free again.
      expect(groupAlive(run.pid), "a process of the stack's group is still running").toBe(false);
      expect(await listening(ports.postgres)).toBe(false);
    });
  }
});

describe("a signal stops the whole stack, its embedded PostgreSQL included", () => {
  it("SIGTERM to npm (which passes it to its shell only) stops everything, and the banner lists the ports", {
    timeout: LONG,
  }, async () => {
    const ports = await fixedPorts();
    const stack = await ownStack(ports);
    await stack.waitForLine(/^\s+ports\s/, 5000);
    expect(stack.stdout()).toContain(
      `  ports      PostgreSQL ${ports.postgres} (JOBFENCE_PG_PORT), SQS ${ports.sqs} (JOBFENCE_SQS_PORT), API ${ports.api} (JOBFENCE_API_PORT), provider ${ports.provider} (JOBFENCE_PROVIDER_PORT)`,
    );
    expect(stack.info.providerUrl).toBe(`http://127.0.0.1:${ports.provider}`);
    expect(stack.stdout()).toContain(`  provider   http://127.0.0.1:${ports.provider}   (POST /v1/charges`);
    expect(await listening(ports.provider)).toBe(true);
    expect(await listening(ports.postgres)).toBe(true);
    process.kill(stack.pid, "SIGTERM");
    await expectAllGone(stack, ports);
    expect(stack.stdout()).toMatch(/stopping\s+\(process \d+ that started it ended\)/);
    expect(stack.stdout()).toMatch(/\bstopped\b/);
  });

  it("SIGHUP to npm (which it does not pass on) stops everything", { timeout: LONG }, async () => {
    const ports = await fixedPorts();
    const stack = await ownStack(ports);
    process.kill(stack.pid, "SIGHUP");
    await expectAllGone(stack, ports);
    expect(stack.stdout()).toMatch(/\bstopped\b/);
  });

  for (const signal of ["SIGTERM", "SIGHUP"] as const) {
    it(`${signal} to the stack's node process stops everything`, { timeout: LONG }, async () => {
      const ports = await fixedPorts();
      const stack = await ownStack(ports);
      const node = await stackNodePid(stack.pid);
      expect(node, "the stack's node process").toEqual(expect.any(Number));
      process.kill(node as number, signal);
      expect(await stack.exited).toEqual({ code: 0, signal: null });
      await expectAllGone(stack, ports);
      expect(stack.stdout()).toContain(`stopping   (${signal})`);
    });
  }
});

/** Runs `npm run <script> -- <args>` against the stack in `localDir`; its exit and output. */
function npmRun(
  localDir: string,
  script: string,
  args: readonly string[],
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn("npm", ["run", "--silent", script, "--", ...args], {
      cwd: REPO_ROOT,
      env: { ...stackEnv({ localDir }), JOBFENCE_LOCAL_DIR: localDir },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout?.on("data", (chunk) => {
      stdout += String(chunk);
    });
    child.stderr?.on("data", (chunk) => {
      stderr += String(chunk);
    });
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

describe("a restart of the stack", () => {
  it("refuses a plan token from before it, saying the plan is from an earlier run and how to plan again", {
    timeout: LONG,
  }, async () => {
    const ports = await fixedPorts();
    const dir = await localDir();
    const first = await startStack({ localDir: dir, env: portEnv(ports) });
    cleanups.push(() => first.stop(10_000));
    const sent = await npmRun(dir, "send", ["award-points", "--raw", "not a job"]);
    expect(sent.code, sent.stderr).toBe(0);
    await first.waitForLine(/DEAD\s+award-points job \S+: poison after 1 attempt/);
    const filter = { consumer: "award-points" };
    const plan = await callApi(
      first.info,
      "POST",
      "/v1/core/dead-letters/discard/plan",
      first.info.tokens.admin,
      {
        filter,
      },
    );
    const token = plan.body?.token as string;
    expect(token).toEqual(expect.any(String));
    expect((await first.stop(20_000)).forced).toBe(false);

    const second = await startStack({ localDir: dir, env: portEnv(ports) });
    cleanups.push(() => second.stop(10_000));
    const refused = await callApi(
      second.info,
      "POST",
      "/v1/core/dead-letters/discard",
      second.info.tokens.admin,
      {
        filter,
        token,
        reason: "from before the restart",
      },
    );
    expect(refused.status).toBe(400);
    expect(refused.contentType).toContain("application/problem+json");
    expect(refused.body?.detail).toContain("its plan was made before the key changed");
    expect(refused.body?.detail).toContain(
      "plan again (POST /v1/core/dead-letters/discard/plan with the same filter",
    );

    const cli = await npmRun(dir, "ops", [
      ...["dead-letters", "discard", "--consumer", "award-points"],
      ...["--confirm", token, "--reason", "from before the restart"],
    ]);
    expect(cli.code).toBe(1);
    expect(cli.stderr).toContain("its plan was made before the key changed");
    expect(cli.stderr).toContain(
      "hint: a plan's token works only with the API that issued it, within 15 minutes and not after a restart of the local stack; plan again — npm run ops -- dead-letters discard --consumer award-points --plan — and start it with the new token",
    );
  });
});
