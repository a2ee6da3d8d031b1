/**
 * The flags replay and discard share for their bulk form (filters instead of an id), and the
 * checks on them: one dead letter or a set, never both; a set needs a filter or an explicit --all.
 */
import { type Command, Option, type OptionValues } from "commander";
import { UsageError } from "./errors.ts";
import {
  type ApiField,
  addApiFlags,
  addCliFlag,
  addWatchFlags,
  asTyped,
  FILTER_FIELDS,
  flagName,
  given,
} from "./flags.ts";

/** API fields only a bulk operation takes. */
const BULK_FIELDS = [...FILTER_FIELDS, "token", "rate_per_second"] as const satisfies readonly ApiField[];

/** CLI flags only a bulk operation takes, by attribute name. */
const BULK_SWITCHES = { all: "--all", plan: "--plan", watch: "--watch", interval: "--interval" } as const;

/** Adds the filters and the bulk flags to `command` (replay or discard). */
export function addBulkFlags(command: Command, kind: "replay" | "discard", rateDefault: number): Command {
  const filters = `Filters (without an id: the pending dead letters to ${kind}):`;
  addApiFlags(command, filters, FILTER_FIELDS);
  addCliFlag(command, filters, "--all", `no filter: ${kind} every pending dead letter`);
  const bulk = "Bulk:";
  command.addOption(
    new Option(
      "--plan",
      `count and sample the matches and print the token that starts exactly them; change nothing`,
    )
      .helpGroup(bulk)
      .conflicts(["confirm", "rate", "watch"]),
  );
  addApiFlags(command, bulk, ["token", "rate_per_second"], {
    rate_per_second: `${kind === "replay" ? "messages sent" : "rows discarded"} per second at most (default ${rateDefault})`,
  });
  return addWatchFlags(command, bulk, "after starting, follow the operation until it ends");
}

/** The first bulk flag given, if any: `<command> <id>` acts on one dead letter and takes none. */
export function bulkFlagGiven(options: OptionValues): string | undefined {
  const switches = Object.entries(BULK_SWITCHES)
    .filter(([attribute]) => options[attribute] !== undefined)
    .map(([, flag]) => flag);
  return [...given(options, BULK_FIELDS), ...switches][0];
}

/**
 * The flags that choose the set, as typed (for suggested commands); refuses a set without a
 * filter unless --all says that every pending dead letter is meant.
 */
export function selection(options: OptionValues, kind: "replay" | "discard"): string[] {
  const filters = asTyped(options, FILTER_FIELDS);
  if (options.all === true) {
    if (filters.length > 0) throw new UsageError(`--all means no filter; drop ${filters[0]} or --all`);
    return ["--all"];
  }
  if (filters.length === 0) {
    throw new UsageError(
      `a bulk ${kind} needs a filter (${FILTER_FIELDS.map(flagName).join(", ")}), ` +
        `or --all for every pending dead letter; for one dead letter: ${kind} <id>`,
    );
  }
  return filters;
}
