/**
 * `toMatchFileSnapshot` against a schema description committed in the repository. Where the file
 * does not exist yet, vitest writes it (as any new snapshot) unless it writes no new snapshots
 * (CI set, and no --update): there it fails with a bare "Snapshot mismatched", so this names the
 * missing file and what to do instead.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { expect } from "vitest";

const ROOT = join(import.meta.dirname, "..", "..");

/** Expects `described` to equal the committed `path` (relative to `root`, the repository's). */
export async function expectSchemaSnapshot(described: string, path: string, root = ROOT): Promise<void> {
  const file = join(root, path);
  const committed = existsSync(file);
  try {
    await expect(described).toMatchFileSnapshot(file);
  } catch (error) {
    if (committed) throw error;
    throw new Error(`${path} is missing: run npm run schema:snapshot, review it and commit it`, {
      cause: error,
    });
  }
}
