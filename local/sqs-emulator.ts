/** The fauxqs SQS emulator, in process, on a free port of 127.0.0.1. */
import { type FauxqsServer, startFauxqs } from "fauxqs";
import { LOCAL_REGION } from "./aws-clients.ts";

/** A running emulator. */
export interface SqsEmulator {
  /** Endpoint for SDK clients. Always pass it: the emulator's queue URLs name a host that does not resolve. */
  readonly endpoint: string;
  /** The emulator itself, for inspection (in-flight messages and their visibility deadlines). */
  readonly server: FauxqsServer;
  stop(): Promise<void>;
}

/**
 * Starts the emulator on `port` (0: any free one). With `dataDir` its queues and messages are kept
 * in SQLite there, so a restarted stack finds the messages it had not yet processed.
 */
export async function startSqsEmulator(
  options: { port?: number; dataDir?: string } = {},
): Promise<SqsEmulator> {
  const server = await startFauxqs({
    port: options.port ?? 0,
    host: "127.0.0.1",
    logger: false,
    defaultRegion: LOCAL_REGION,
    ...(options.dataDir ? { dataDir: options.dataDir } : {}),
  });
  return { endpoint: `http://127.0.0.1:${server.port}`, server, stop: () => server.stop() };
}
