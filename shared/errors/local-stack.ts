/** The local stack refusing to start (local/stack.ts): what stopped it, and how to get past it. */
import { JobfenceError } from "./jobfence-error.ts";

/** A port the local stack needs is held by another process; `setting` chooses another one. */
export class PortTakenError extends JobfenceError {
  override name = "PortTakenError";
  /** What wanted the port: "PostgreSQL", "the SQS emulator", "the dead-letter API". */
  readonly part: string;
  readonly port: number;
  /** The environment variable that chooses the part's port. */
  readonly setting: string;
  constructor(part: string, port: number, setting: string, options?: ErrorOptions) {
    super(
      `port ${port} on 127.0.0.1, wanted by ${part}, is taken by another process; set ${setting} to another port (0 picks a free one), or stop what listens on ${port}`,
      options,
    );
    this.part = part;
    this.port = port;
    this.setting = setting;
  }
}

/** An embedded PostgreSQL that exited before it accepted connections; `log` holds its last lines. */
export class EmbeddedPostgresStartError extends JobfenceError {
  override name = "EmbeddedPostgresStartError";
  readonly log: readonly string[];
  /** Whether its log says another process holds its port. */
  readonly addressInUse: boolean;
  constructor(log: readonly string[]) {
    super(
      `the embedded PostgreSQL exited before accepting connections${log.length > 0 ? `; its last lines:\n  ${log.join("\n  ")}` : ""}`,
    );
    this.log = log;
    this.addressInUse = log.some((line) => /address already in use/i.test(line));
  }
}
