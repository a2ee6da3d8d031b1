/**
 * `jobfence doctor`: reads a jobfence database (roles, grants, memberships, definer functions,
 * row-level security and policies, ownership, the `core` migrations) and prints each finding with
 * what to do, and what each consumer works on against what its definition declares
 * (`data`). Exit codes: 0 no findings; 1 findings, or the database did not answer; 2 usage.
 */
import { Command, CommanderError } from "commander";
import { EXIT, LineWriter } from "../ops/io.ts";
import { doctorDatabase } from "../shared/commands/doctor.ts";
import { type DoctorReport, formatFinding } from "../shared/doctor/findings.ts";
import { type ConsumerFlags, consumersOf, repeatable } from "./consumers.ts";
import { databaseUrlOf, withoutPassword } from "./database-url.ts";
import type { JobfenceIo } from "./io.ts";

interface DoctorFlags extends ConsumerFlags {
  readonly databaseUrl?: string;
  readonly json?: boolean;
}

/** Runs `jobfence doctor <argv…>`; resolves to the exit code. */
export async function runDoctorCommand(argv: readonly string[], io: JobfenceIo): Promise<number> {
  const out = new LineWriter(io.out);
  const err = new LineWriter(io.err);
  const command = new Command("jobfence doctor")
    .description(
      "Check a jobfence database's roles, grants, policies and core migrations, and what each consumer works on against what its definition declares.",
    )
    .option("--database-url <url>", "the database (else $DATABASE_URL)")
    .option("--consumer <name>", "a consumer of the service, declaring nothing (repeatable)", repeatable, [])
    .option(
      "--definitions <module>",
      "a module exporting consumer definitions, whose data declarations are checked (repeatable)",
      repeatable,
      [],
    )
    .option("--json", "print the report as JSON")
    .helpOption("-h, --help", "show help")
    .configureOutput({ writeOut: (text) => out.write(text), writeErr: (text) => err.write(text) })
    .exitOverride();
  let flags: DoctorFlags;
  try {
    command.parse(argv, { from: "user" });
    flags = command.opts<DoctorFlags>();
  } catch (error) {
    out.flush();
    err.flush();
    if (error instanceof CommanderError) return error.exitCode === 0 ? EXIT.ok : EXIT.usage;
    throw error;
  }
  const url = databaseUrlOf(flags.databaseUrl, io.env);
  if (url === undefined) {
    io.err("jobfence doctor: name the database with --database-url <url> or DATABASE_URL");
    return EXIT.usage;
  }
  let report: DoctorReport;
  try {
    report = await doctorDatabase({
      databaseUrl: url,
      consumers: await consumersOf(flags, io.cwd ?? process.cwd()),
    });
  } catch (error) {
    io.err(
      `jobfence doctor: the check of ${withoutPassword(url)} could not finish: ${(error as Error).message}`,
    );
    return EXIT.failed;
  }
  if (flags.json) {
    io.out(JSON.stringify(report, null, 2));
  } else {
    io.out(`checked ${withoutPassword(url)} as ${report.readAs}`);
    for (const finding of report.findings)
      for (const line of `\n${formatFinding(finding)}`.split("\n")) io.out(line);
    for (const skipped of report.skipped) io.out(`not checked [${skipped.check}]: ${skipped.reason}`);
    io.out(report.findings.length === 0 ? "no findings" : `${report.findings.length} finding(s)`);
  }
  return report.findings.length === 0 ? EXIT.ok : EXIT.failed;
}
