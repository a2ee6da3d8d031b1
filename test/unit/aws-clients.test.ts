/**
 * shared/aws/clients.ts: every client the library builds has its connection and request timeouts
 * in effect. A call to a server that accepts the connection and never answers fails with a
 * TimeoutError in bounded time (without the timeouts it would wait for the SDK's socket timeout,
 * minutes), and a client built with nothing passed carries the defaults.
 */
import { createServer, type Server, type Socket } from "node:net";
import { PutEventsCommand } from "@aws-sdk/client-eventbridge";
import { GetSecretValueCommand } from "@aws-sdk/client-secrets-manager";
import { GetQueueUrlCommand, SendMessageCommand } from "@aws-sdk/client-sqs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AWS_CLIENT_DEFAULTS,
  createEventBridgeClient,
  createSecretsManagerClient,
  createSqsClient,
} from "../../shared/aws/clients.ts";

const credentials = { accessKeyId: "test", secretAccessKey: "test" };
const region = "eu-west-1";
/** The request timeout the hanging calls use. */
const REQUEST_TIMEOUT_MS = 300;
/** How long a hanging call may take to fail before the test calls the timeout missing. */
const BOUND_MS = 3000;

/** Accepts connections and never writes a byte back. */
let silent: Server;
let endpoint: string;
const sockets = new Set<Socket>();

beforeAll(async () => {
  silent = createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => {});
  });
  await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
  const address = silent.address();
  if (!address || typeof address === "string") throw new Error("no port");
  endpoint = `http://127.0.0.1:${address.port}`;
});

afterAll(async () => {
  for (const socket of sockets) socket.destroy();
  await new Promise((resolve) => silent?.close(resolve));
});

/** Settles with the call's error (or a "still waiting" marker after BOUND_MS), and how long it took. */
async function failure(call: Promise<unknown>): Promise<{ error: unknown; ms: number }> {
  const started = Date.now();
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<string>((resolve) => {
    timer = setTimeout(() => resolve(`still waiting after ${BOUND_MS} ms`), BOUND_MS);
  });
  try {
    const outcome = await Promise.race([
      call.then(
        () => "answered",
        (error: unknown) => error,
      ),
      bound,
    ]);
    return { error: outcome, ms: Date.now() - started };
  } finally {
    clearTimeout(timer);
  }
}

/** The options the client's HTTP handler resolved (it resolves them on its first request). */
async function handlerOptions(client: {
  config: { requestHandler: unknown };
}): Promise<Record<string, unknown>> {
  const handler = client.config.requestHandler as {
    handle(request: object, options: { abortSignal: AbortSignal }): Promise<unknown>;
    httpHandlerConfigs(): Record<string, unknown>;
  };
  // An already-aborted request: the handler loads its configuration, then gives up at once.
  await handler
    .handle(
      { protocol: "http:", hostname: "127.0.0.1", port: 9, method: "GET", path: "/", headers: {}, query: {} },
      { abortSignal: AbortSignal.abort() },
    )
    .catch(() => {});
  return handler.httpHandlerConfigs();
}

describe("AWS client timeouts", () => {
  it("an SQS call to a server that never answers fails with a TimeoutError in bounded time", async () => {
    const sqs = createSqsClient({
      endpoint,
      region,
      credentials,
      maxAttempts: 1,
      requestTimeoutMs: REQUEST_TIMEOUT_MS,
    });
    try {
      const { error, ms } = await failure(sqs.send(new GetQueueUrlCommand({ QueueName: "q" })));
      expect(error).toBeInstanceOf(Error);
      expect((error as Error).name).toBe("TimeoutError");
      expect(ms).toBeGreaterThanOrEqual(REQUEST_TIMEOUT_MS - 50);
      expect(ms).toBeLessThan(BOUND_MS);
    } finally {
      sqs.destroy();
    }
  });

  it("so do EventBridge and Secrets Manager calls", async () => {
    const options = { endpoint, region, credentials, maxAttempts: 1, requestTimeoutMs: REQUEST_TIMEOUT_MS };
    const eventBridge = createEventBridgeClient(options);
    const secrets = createSecretsManagerClient(options);
    try {
      const results = await Promise.all([
        failure(
          eventBridge.send(
            new PutEventsCommand({ Entries: [{ Source: "s", DetailType: "d", Detail: "{}" }] }),
          ),
        ),
        failure(secrets.send(new GetSecretValueCommand({ SecretId: "s" }))),
      ]);
      for (const { error, ms } of results) {
        expect((error as Error).name).toBe("TimeoutError");
        expect(ms).toBeLessThan(BOUND_MS);
      }
    } finally {
      eventBridge.destroy();
      secrets.destroy();
    }
  });

  it("an SQS call never goes to the host a QueueUrl names (a replay's QueueUrl is a consumer's word)", async () => {
    // No endpoint: the SDK's default would send the request to the QueueUrl's host, the silent
    // server here. With the library's client it goes to the region's endpoint instead (which this
    // machine may not reach: the call fails, and the silent server sees no connection).
    const sqs = createSqsClient({
      region,
      credentials,
      requestTimeoutMs: REQUEST_TIMEOUT_MS,
      maxAttempts: 1,
    });
    let connections = 0;
    const count = () => {
      connections++;
    };
    silent.on("connection", count);
    try {
      await sqs
        .send(new SendMessageCommand({ QueueUrl: `${endpoint}/000000000000/elsewhere`, MessageBody: "{}" }))
        .catch(() => undefined);
      expect(connections).toBe(0);
    } finally {
      silent.off("connection", count);
      sqs.destroy();
    }
  });

  it("a client built with nothing passed has the defaults", async () => {
    const clients = [createSqsClient(), createEventBridgeClient(), createSecretsManagerClient()];
    try {
      for (const client of clients) {
        expect(await client.config.maxAttempts()).toBe(AWS_CLIENT_DEFAULTS.maxAttempts);
        expect(await handlerOptions(client)).toMatchObject({
          connectionTimeout: AWS_CLIENT_DEFAULTS.connectionTimeoutMs,
          requestTimeout: AWS_CLIENT_DEFAULTS.requestTimeoutMs,
          throwOnRequestTimeout: true,
        });
      }
    } finally {
      for (const client of clients) client.destroy();
    }
    expect(AWS_CLIENT_DEFAULTS).toEqual({
      connectionTimeoutMs: 1000,
      requestTimeoutMs: 5000,
      maxAttempts: 3,
    });
  });

  it("the caller's settings merge over the defaults", async () => {
    const sqs = createSqsClient({ endpoint, region, credentials, maxAttempts: 1, connectionTimeoutMs: 250 });
    try {
      expect(await sqs.config.maxAttempts()).toBe(1);
      expect(await sqs.config.region()).toBe(region);
      expect(await handlerOptions(sqs)).toMatchObject({
        connectionTimeout: 250,
        requestTimeout: AWS_CLIENT_DEFAULTS.requestTimeoutMs,
        throwOnRequestTimeout: true,
      });
    } finally {
      sqs.destroy();
    }
  });
});
