/**
 * Where the local stack keeps its state (stack.json, stats.json, the embedded PostgreSQL's data,
 * the emulator's messages): JOBFENCE_LOCAL_DIR, else `<repo>/.local`. `npm start` writes there,
 * and every tool that reads the running stack (send, demo, doctor, the ops CLI) resolves it here,
 * so they all find the same stack. No dependencies: the ops CLI imports it.
 */
import { join } from "node:path";

const REPO_ROOT = join(import.meta.dirname, "..");

/** The local stack's directory: JOBFENCE_LOCAL_DIR when set and not empty, else `<repoRoot>/.local`. */
export function localDirFromEnv(
  env: Readonly<Record<string, string | undefined>>,
  repoRoot: string = REPO_ROOT,
): string {
  const dir = env.JOBFENCE_LOCAL_DIR;
  return dir !== undefined && dir !== "" ? dir : join(repoRoot, ".local");
}

/** The stack's description in `localDir`, written by `npm start` when it is ready. */
export function stackFilePath(localDir: string): string {
  return join(localDir, "stack.json");
}
