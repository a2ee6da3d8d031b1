/**
 * The CLI's errors. Each maps to an exit code (cli.ts): a usage error to 2, a failure to 1.
 * Commands throw them; only cli.ts prints them, so every error reaches the operator the same way.
 */

/** Bad flags, arguments or configuration: exit 2. */
export class UsageError extends Error {
  override name = "UsageError";
  /**
   * Whether the command's help follows the message: yes for flags and arguments (the help shows
   * the right ones), no for configuration (a missing URL or token is not fixed by the help).
   */
  readonly showHelp: boolean;
  constructor(message: string, options: { showHelp?: boolean } = {}) {
    super(message);
    this.showHelp = options.showHelp ?? true;
  }
}

/** A failure already described for the operator: exit 1, its lines to stderr. */
export class CliFailure extends Error {
  override name = "CliFailure";
  readonly lines: readonly string[];
  constructor(lines: readonly string[]) {
    super(lines[0] ?? "failed");
    this.lines = lines;
  }
}

/** The API answered with an error status; `problem` is its problem+json document when it sent one. */
export class ApiError extends CliFailure {
  override name = "ApiError";
  readonly status: number;
  readonly problem: Readonly<Record<string, unknown>> | undefined;
  constructor(lines: readonly string[], status: number, problem: Record<string, unknown> | undefined) {
    super(lines);
    this.status = status;
    this.problem = problem;
  }

  /** The problem's `reason` extension (e.g. "plan-stale"), when it has one. */
  get reason(): string | undefined {
    const reason = this.problem?.reason;
    return typeof reason === "string" ? reason : undefined;
  }

  /** The same error with more lines for the operator (a hint on what to do next). */
  withHint(...hints: readonly string[]): ApiError {
    return new ApiError([...this.lines, ...hints], this.status, this.problem as Record<string, unknown>);
  }
}
