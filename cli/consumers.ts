/**
 * The service's consumers a `jobfence migrate` or `jobfence doctor` is told about: named with
 * `--consumer <name>`, or read from the modules that export their definitions
 * (`--definitions dist/consumers.js`), whose `data` declarations the doctor then checks.
 */
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import type { ServiceConsumer } from "../shared/commands/service-consumers.ts";

/** Flags both commands take. */
export interface ConsumerFlags {
  readonly consumer: readonly string[];
  readonly definitions: readonly string[];
}

/** Whether `value` is shaped like a consumer definition: a name, a payload schema and a work. */
function isDefinition(value: unknown): value is ServiceConsumer {
  if (typeof value !== "object" || value === null) return false;
  const v = value as Record<string, unknown>;
  return typeof v.name === "string" && typeof v.work === "function" && typeof v.payload === "object";
}

/**
 * The consumers named by the flags: each module's exported definitions (a module that exports
 * none is refused: the path is probably wrong), then the bare names not among them.
 */
export async function consumersOf(flags: ConsumerFlags, cwd: string): Promise<ServiceConsumer[]> {
  const found: ServiceConsumer[] = [];
  for (const path of flags.definitions) {
    const module = (await import(pathToFileURL(resolve(cwd, path)).href)) as Record<string, unknown>;
    // A definition exported twice (named and default, say) is one consumer.
    const definitions = [...new Set(Object.values(module).filter(isDefinition))];
    if (definitions.length === 0) {
      throw new Error(`${path} exports no consumer definition (an object with name, payload and work)`);
    }
    for (const d of definitions)
      found.push(d.data === undefined ? { name: d.name } : { name: d.name, data: d.data });
  }
  const named = new Set(found.map((c) => c.name));
  return [...found, ...flags.consumer.filter((name) => !named.has(name)).map((name) => ({ name }))];
}
