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

export async function startSqsEmulator(options: { port?: number } = {}): Promise<SqsEmulator> {
  const server = await startFauxqs({
    port: options.port ?? 0,
    host: "127.0.0.1",
    logger: false,
    defaultRegion: LOCAL_REGION,
  });
  return { endpoint: `http://127.0.0.1:${server.port}`, server, stop: () => server.stop() };
}
