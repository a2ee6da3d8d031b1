/** What the `jobfence` command writes to and reads from its surroundings. */
import type { OpsIo } from "../ops/io.ts";

/** The ops CLI's, and the working directory. */
export interface JobfenceIo extends OpsIo {
  /** The working directory: the local stack's `.local/` is looked for there. @default process.cwd() */
  readonly cwd?: string;
}
