/**
 * The local stack's ports: which part listens where, which setting moves it, and the refusal when
 * a port is taken. A fixed default port is what a second stack, another PostgreSQL or any other
 * server most often already holds.
 */
import { createServer } from "node:net";
import { PortTakenError } from "../shared/errors/local-stack.ts";

/** A part of the stack that listens on a port of its own. */
export type LocalPortPart = "postgres" | "sqs" | "api" | "provider";

/** Default ports; 0 means any free port. Fixed by default so queue URLs stored in dead letters stay valid across restarts. */
export const LOCAL_PORTS: Readonly<Record<LocalPortPart, number>> = Object.freeze({
  postgres: 54329,
  sqs: 9324,
  api: 8787,
  provider: 4568,
});

/** Each part's name as the stack says it, and the environment variable that chooses its port. */
export const LOCAL_PORT_SETTINGS: Readonly<
  Record<LocalPortPart, { readonly part: string; readonly env: string }>
> = Object.freeze({
  postgres: { part: "PostgreSQL", env: "JOBFENCE_PG_PORT" },
  sqs: { part: "the SQS emulator", env: "JOBFENCE_SQS_PORT" },
  api: { part: "the dead-letter API", env: "JOBFENCE_API_PORT" },
  provider: { part: "the fake provider", env: "JOBFENCE_PROVIDER_PORT" },
});

/** The refusal for `part`'s port. */
export function portTaken(part: LocalPortPart, port: number, cause?: unknown): PortTakenError {
  const { part: name, env } = LOCAL_PORT_SETTINGS[part];
  return new PortTakenError(name, port, env, cause === undefined ? undefined : { cause });
}

/** Whether `error` is a listen's "address already in use". */
export function isAddressInUse(error: unknown): boolean {
  return typeof error === "object" && error !== null && (error as { code?: unknown }).code === "EADDRINUSE";
}

/**
 * Runs `listen` (a part's start on `port`) and turns its "address already in use" into the
 * refusal that names the part and its setting.
 */
export async function listeningOn<T>(
  part: LocalPortPart,
  port: number,
  listen: () => Promise<T>,
): Promise<T> {
  try {
    return await listen();
  } catch (error) {
    throw isAddressInUse(error) ? portTaken(part, port, error) : error;
  }
}

/**
 * Refuses `part`'s fixed port when another process holds it on 127.0.0.1, before anything is
 * started there: PostgreSQL, refused a port, says so only in its own log. Port 0 is never taken.
 */
export async function ensurePortFree(part: LocalPortPart, port: number): Promise<void> {
  if (port === 0) return;
  await listeningOn(
    part,
    port,
    () =>
      new Promise<void>((resolve, reject) => {
        const probe = createServer();
        probe.once("error", reject);
        probe.listen(port, "127.0.0.1", () => probe.close(() => resolve()));
      }),
  );
}

/** Short names for the ports line `npm start` prints, in README's order. */
const SHORT_NAMES: Readonly<Record<LocalPortPart, string>> = {
  postgres: "PostgreSQL",
  sqs: "SQS",
  api: "API",
  provider: "provider",
};

/**
 * The line `npm start` prints: each port the stack listens on and the setting that moves it. Parts
 * it did not start (DATABASE_URL, SQS_ENDPOINT) are left out. Pure.
 */
export function portsLine(listening: Partial<Record<LocalPortPart, number>>): string {
  return (Object.keys(SHORT_NAMES) as LocalPortPart[])
    .filter((part) => listening[part] !== undefined)
    .map((part) => `${SHORT_NAMES[part]} ${listening[part]} (${LOCAL_PORT_SETTINGS[part].env})`)
    .join(", ");
}
