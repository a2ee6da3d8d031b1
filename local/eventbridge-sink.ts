/**
 * A local stand-in for the ops EventBridge bus: an HTTP server that speaks the PutEvents call of
 * EventBridge's JSON 1.1 protocol, so the real SDK client publishes to it unchanged. It keeps what
 * it receives, and can be told to fail, to prove that a failed alert never loses a dead letter.
 */
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";

/** One event as a target on the bus would see it. */
export interface ReceivedEvent {
  readonly eventBusName: string;
  readonly source: string;
  readonly detailType: string;
  readonly detail: unknown;
}

/** How the sink answers PutEvents. */
export type SinkMode = "accept" | "reject-entries" | "http-500";

/** A running sink. */
export interface EventBridgeSink {
  readonly endpoint: string;
  /** Every accepted event, in arrival order. */
  readonly events: ReceivedEvent[];
  /** Changes how later calls are answered. */
  setMode(mode: SinkMode): void;
  /** Called with each accepted event (the local stack logs them). */
  onEvent?: (event: ReceivedEvent) => void;
  stop(): Promise<void>;
}

interface PutEventsEntry {
  EventBusName?: string;
  Source?: string;
  DetailType?: string;
  Detail?: string;
}

export async function startEventBridgeSink(options: { port?: number } = {}): Promise<EventBridgeSink> {
  let mode: SinkMode = "accept";
  const events: ReceivedEvent[] = [];

  const handle = async (request: IncomingMessage, response: ServerResponse): Promise<void> => {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const target = request.headers["x-amz-target"];
    if (target !== "AWSEvents.PutEvents") {
      return reply(response, 400, {
        __type: "UnknownOperationException",
        message: `unsupported ${String(target)}`,
      });
    }
    if (mode === "http-500")
      return reply(response, 500, { __type: "InternalException", message: "sink told to fail" });
    const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { Entries?: PutEventsEntry[] };
    const entries = body.Entries ?? [];
    if (mode === "reject-entries") {
      return reply(response, 200, {
        FailedEntryCount: entries.length,
        Entries: entries.map(() => ({ ErrorCode: "InternalFailure", ErrorMessage: "sink told to reject" })),
      });
    }
    for (const entry of entries) {
      const event: ReceivedEvent = {
        eventBusName: entry.EventBusName ?? "default",
        source: entry.Source ?? "",
        detailType: entry.DetailType ?? "",
        detail: entry.Detail ? JSON.parse(entry.Detail) : undefined,
      };
      events.push(event);
      sink.onEvent?.(event);
    }
    return reply(response, 200, {
      FailedEntryCount: 0,
      Entries: entries.map(() => ({ EventId: randomUUID() })),
    });
  };

  const server = createServer((request, response) => {
    handle(request, response).catch((error: unknown) =>
      reply(response, 400, { __type: "SerializationException", message: String(error) }),
    );
  });
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, "127.0.0.1", resolve));
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : 0;

  const sink: EventBridgeSink = {
    endpoint: `http://127.0.0.1:${port}`,
    events,
    setMode: (next) => {
      mode = next;
    },
    stop: () =>
      new Promise<void>((resolve, reject) => server.close((error) => (error ? reject(error) : resolve()))),
  };
  return sink;
}

function reply(response: ServerResponse, status: number, body: unknown): void {
  response.writeHead(status, { "content-type": "application/x-amz-json-1.1" });
  response.end(JSON.stringify(body));
}
