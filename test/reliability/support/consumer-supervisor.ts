/**
 * Runs {@link ConsumerProcessConfig consumer processes} the way Lambda runs containers: one
 * process, started again whenever it dies, until told to stop. Collects every record's outcome
 * and every crash (exit status and the last lines it wrote to stderr) for the figures.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { ConsumerProcessConfig, ConsumerProcessMessage } from "./consumer-process.ts";
import { tally } from "./figures.ts";

const ENTRY = fileURLToPath(new URL("./consumer-process.ts", import.meta.url));

/** What the processes reported. */
export interface OutcomeTally {
  /** Records handled (one per delivery that reached an outcome). */
  deliveries: number;
  /** Deliveries with an attempt number above 1. */
  redeliveries: number;
  /** Outcomes by status (`applied`, `duplicate`, `retry`, `dead-lettered:<kind>`, …). */
  readonly byStatus: Record<string, number>;
  /** The failures behind retries, failed dead-letter writes and dead letters, by SQLSTATE or message. */
  readonly errors: Record<string, number>;
  /** Poller failures (receive, delete) by message. */
  readonly pollerErrors: Record<string, number>;
}

/** A process that died without being told to stop. */
export interface Crash {
  readonly code: number | null;
  readonly signal: string | null;
  /** The last line of its stderr that names an error. */
  readonly reason: string;
}

export interface SupervisedConsumer {
  readonly tally: OutcomeTally;
  readonly crashes: Crash[];
  /** Processes started, the first included. */
  starts(): number;
  /** Resolves when a process is up and polling. */
  ready(): Promise<void>;
  /** Stops the running process (it finishes its invocations) and starts no other. */
  stop(): Promise<void>;
}

export function superviseConsumer(config: ConsumerProcessConfig): SupervisedConsumer {
  const counts: OutcomeTally = {
    deliveries: 0,
    redeliveries: 0,
    byStatus: {},
    errors: {},
    pollerErrors: {},
  };
  const crashes: Crash[] = [];
  let started = 0;
  let stopping = false;
  let current: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();
  let readyWaiters: Array<() => void> = [];
  let isReady = false;

  const launch = () => {
    started++;
    isReady = false;
    const child = spawn(process.execPath, [ENTRY], {
      env: { ...process.env, JOBFENCE_REL_CONSUMER: JSON.stringify(config) },
      stdio: ["ignore", "ignore", "pipe", "ipc"],
    });
    current = child;
    let stderr = "";
    child.stderr?.setEncoding("utf8");
    child.stderr?.on("data", (chunk: string) => {
      stderr = (stderr + chunk).slice(-4000);
    });
    child.on("message", (message: ConsumerProcessMessage) => {
      switch (message.type) {
        case "ready":
          isReady = true;
          for (const waiter of readyWaiters) waiter();
          readyWaiters = [];
          break;
        case "outcome":
          counts.deliveries++;
          if (message.attempt > 1) counts.redeliveries++;
          tally(counts.byStatus, message.status);
          if (message.error !== undefined) tally(counts.errors, message.error);
          break;
        case "poller-error":
          tally(counts.pollerErrors, message.error);
          break;
        case "stopped":
          break;
      }
    });
    exited = new Promise((resolve) => {
      child.on("exit", (code, signal) => {
        current = undefined;
        if (!stopping) {
          // Node prints the thrown error as `error: …` or `SomeError: …` under the throwing line.
          const lines = stderr.split("\n");
          const thrown = lines.find((l) => /^(\w*Error|error)\b[^:]*: /.test(l));
          crashes.push({ code, signal, reason: (thrown ?? stderr.slice(-200)).trim() });
          // Lambda starts a fresh container for the next invocation.
          setTimeout(() => {
            if (!stopping) launch();
          }, 100);
        }
        resolve();
      });
    });
  };
  launch();

  return {
    tally: counts,
    crashes,
    starts: () => started,
    ready: () =>
      isReady
        ? Promise.resolve()
        : new Promise<void>((resolve) => {
            readyWaiters.push(resolve);
          }),
    async stop() {
      stopping = true;
      const child = current;
      if (child) {
        child.send({ type: "stop" });
        const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
        await exited;
        clearTimeout(timer);
      }
    },
  };
}
