/**
 * What the ops CLI writes to and reads from its surroundings. `scripts/ops.ts` wires it to the
 * process; tests pass their own, so every command runs in-process with its output captured.
 */

/** Where the CLI writes and what it reads from its environment. */
export interface OpsIo {
  /** One line of standard output (no trailing newline). */
  out(line: string): void;
  /** One line of standard error (no trailing newline). */
  err(line: string): void;
  readonly env: Record<string, string | undefined>;
  /** @default globalThis.fetch */
  readonly fetch?: typeof fetch;
  /** The local stack's description. @default `stack.json` in `env.JOBFENCE_LOCAL_DIR`, else `<repo>/.local/stack.json` */
  readonly stackFile?: string;
  /**
   * Standard output when it is a terminal: `--watch` then draws a progress bar it redraws in
   * place. Absent (pipes, files, tests by default), progress is printed as plain lines.
   */
  readonly terminal?: Terminal;
  /**
   * How the operator runs the CLI, for the commands it suggests and its usage line.
   * @default "npm run ops --" (this repository); the package's `jobfence ops` says "jobfence ops"
   */
  readonly program?: string;
  /** @default a timer; tests may pass their own to poll without waiting */
  readonly sleep?: (ms: number) => Promise<void>;
}

/** A terminal on standard output. */
export interface Terminal {
  /** Raw text, control sequences included, without a newline added. */
  write(text: string): void;
  /** Its width in columns. */
  readonly columns: number;
}

/** Exit codes. */
export const EXIT = Object.freeze({ ok: 0, failed: 1, usage: 2 });

/**
 * Turns the chunks commander writes (help text, error messages: several lines, each ending in a
 * newline) into the whole lines {@link OpsIo} takes.
 */
export class LineWriter {
  #pending = "";
  readonly #write: (line: string) => void;

  constructor(write: (line: string) => void) {
    this.#write = write;
  }

  write(chunk: string): void {
    const lines = (this.#pending + chunk).split("\n");
    this.#pending = lines.pop() ?? "";
    for (const line of lines) this.#write(line);
  }

  /** Writes what is left of an unfinished line. */
  flush(): void {
    if (this.#pending !== "") this.#write(this.#pending);
    this.#pending = "";
  }
}
