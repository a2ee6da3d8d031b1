/**
 * `jobfence doctor`: reads a jobfence database (roles, grants, memberships, definer functions,
 * row-level security and policies, ownership, the `core` migrations) and prints each finding with
 * what to do, and what each consumer works on against what its definition declares (`data`).
 * Exit codes: 0 no findings; 1 findings, or the database did not answer; 2 usage.
 */
import { EXIT } from "../ops/io.ts";
import { doctorDatabase } from "../shared/commands/doctor.ts";
import { withoutPassword } from "../shared/db/connection-text.ts";
import { type DoctorReport, formatFinding } from "../shared/doctor/findings.ts";
import { consumersOf } from "./consumers.ts";
import {
  type DatabaseCommandFlags,
  databaseCommand,
  describeError,
  parseDatabaseCommand,
} from "./database-command.ts";
import type { JobfenceIo } from "./io.ts";

interface DoctorFlags extends DatabaseCommandFlags {
  readonly json?: boolean;
}

/** Runs `jobfence doctor <argv…>`; resolves to the exit code. */
export async function runDoctorCommand(argv: readonly string[], io: JobfenceIo): Promise<number> {
  const command = databaseCommand(
    "doctor",
    "Check a jobfence database's roles, grants, policies and core migrations, and what each consumer works on against what its definition declares.",
    {
      consumer: "a consumer of the service, declaring nothing (repeatable)",
      definitions:
        "a module exporting consumer definitions, whose data declarations are checked (repeatable)",
    },
    (c) => c.option("--json", "print the report as JSON"),
  );
  const parsed = parseDatabaseCommand<DoctorFlags>(command, argv, io);
  if (typeof parsed === "number") return parsed;
  const { flags, url } = parsed;
  let report: DoctorReport;
  try {
    report = await doctorDatabase({
      databaseUrl: url,
      consumers: await consumersOf(flags, io.cwd ?? process.cwd()),
    });
  } catch (error) {
    io.err(`jobfence doctor: the check of ${withoutPassword(url)} could not finish: ${describeError(error)}`);
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
