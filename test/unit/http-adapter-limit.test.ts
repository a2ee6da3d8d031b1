/**
 * The local HTTP adapter's body limit: a body over 10 MB is answered 413 with the API's problem
 * document and `Connection: close`, and the connection is closed cleanly, so a client on a
 * keep-alive agent reads the whole answer and its next request (on a new connection) succeeds.
 */
import {
  type Agent,
  request as httpRequest,
  type IncomingHttpHeaders,
  Agent as KeepAliveAgent,
} from "node:http";
import { connect } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_BODY_BYTES, serveHttpApi } from "../../local/http-adapter.ts";
import { PROBLEM } from "../../shared/errors/http.ts";
import { PROBLEM_CONTENT_TYPE, problemType } from "../../shared/http/problem.ts";

let server: Awaited<ReturnType<typeof serveHttpApi>>;
/** What the handler was called with: a refused body must never reach it. */
const reached: Array<{ path: string; bytes: number }> = [];

beforeAll(async () => {
  server = await serveHttpApi(async (event) => {
    reached.push({ path: event.rawPath, bytes: Buffer.byteLength(event.body ?? "") });
    return { statusCode: 200, headers: { "content-type": "application/json" }, body: '{"ok":true}' };
  });
});
afterAll(async () => {
  await server?.close();
});

interface Answer {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly text: string;
  /** The local port of the connection it came on, to tell connections apart. */
  readonly localPort: number;
}

/** One request on `agent`: `body` written in chunks of 1 MB, or the whole at once; `end` when it is done. */
function send(
  agent: Agent,
  options: { method: string; path: string; headers?: Record<string, string | number>; body?: Buffer },
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const url = new URL(options.path, server.url);
    const request = httpRequest(
      url,
      { method: options.method, agent, headers: options.headers ?? {} },
      (response) => {
        const chunks: Buffer[] = [];
        response.on("data", (chunk: Buffer) => chunks.push(chunk));
        response.on("error", reject);
        response.on("end", () =>
          resolve({
            status: response.statusCode ?? 0,
            headers: response.headers,
            text: Buffer.concat(chunks).toString("utf8"),
            localPort: request.socket?.localPort ?? 0,
          }),
        );
      },
    );
    request.on("error", reject);
    const body = options.body;
    if (!body) {
      request.end();
      return;
    }
    // Written the way a streaming client does, so the server's answer can come before the end.
    const step = 1024 * 1024;
    let offset = 0;
    const writeMore = () => {
      while (offset < body.length) {
        const chunk = body.subarray(offset, offset + step);
        offset += step;
        if (!request.write(chunk)) {
          request.once("drain", writeMore);
          return;
        }
      }
      request.end();
    };
    writeMore();
  });
}

function expectTooLarge(answer: Answer, path: string): void {
  expect(answer.status).toBe(413);
  expect(answer.headers["content-type"]).toBe(PROBLEM_CONTENT_TYPE);
  expect(answer.headers.connection).toBe("close");
  const problem = JSON.parse(answer.text);
  expect(problem).toEqual({
    type: problemType("contentTooLarge"),
    title: PROBLEM.contentTooLarge.title,
    status: 413,
    detail: expect.stringMatching(/at most 10485760 bytes/),
    instance: path,
  });
}

describe("a body over the limit", () => {
  const tooBig = Buffer.alloc(MAX_BODY_BYTES + 1, 0x61);
  const path = "/v1/core/dead-letters/replay";

  it("is 413 as a problem, before a byte is read when Content-Length says so, then the next request succeeds", async () => {
    const agent = new KeepAliveAgent({ keepAlive: true, maxSockets: 1 });
    try {
      const refused = await send(agent, {
        method: "POST",
        path,
        headers: { "content-type": "application/json", "content-length": tooBig.length },
        body: tooBig,
      });
      expectTooLarge(refused, path);
      expect(refused.text).toContain(`${tooBig.length} bytes`);
      const next = await send(agent, { method: "GET", path: "/v1/core/dead-letters" });
      expect(next.status).toBe(200);
      expect(next.text).toBe('{"ok":true}');
      expect(next.localPort, "the refused connection is not reused").not.toBe(refused.localPort);
      expect(reached).toEqual([{ path: "/v1/core/dead-letters", bytes: 0 }]);
    } finally {
      agent.destroy();
      reached.length = 0;
    }
  });

  it("is 413 as a problem once a chunked body passes the limit, then the next request succeeds", async () => {
    const agent = new KeepAliveAgent({ keepAlive: true, maxSockets: 1 });
    try {
      const refused = await send(agent, {
        method: "POST",
        path,
        headers: { "content-type": "application/json", "transfer-encoding": "chunked" },
        body: tooBig,
      });
      expectTooLarge(refused, path);
      const next = await send(agent, {
        method: "POST",
        path,
        headers: { "content-type": "application/json" },
        body: Buffer.from("{}"),
      });
      expect(next.status).toBe(200);
      expect(reached).toEqual([{ path, bytes: 2 }]);
    } finally {
      agent.destroy();
      reached.length = 0;
    }
  });

  it("is refused without the body being sent when the client asks first (Expect: 100-continue)", async () => {
    const agent = new KeepAliveAgent({ keepAlive: true, maxSockets: 1 });
    try {
      const refused = await new Promise<Answer>((resolve, reject) => {
        const request = httpRequest(new URL(path, server.url), {
          method: "POST",
          agent,
          headers: {
            "content-type": "application/json",
            "content-length": tooBig.length,
            expect: "100-continue",
          },
        });
        request.on("continue", () => reject(new Error("the server asked for the body")));
        request.on("response", (response) => {
          const chunks: Buffer[] = [];
          response.on("data", (chunk: Buffer) => chunks.push(chunk));
          response.on("end", () => {
            resolve({
              status: response.statusCode ?? 0,
              headers: response.headers,
              text: Buffer.concat(chunks).toString("utf8"),
              localPort: request.socket?.localPort ?? 0,
            });
            request.destroy();
          });
        });
        request.on("error", reject);
        request.flushHeaders();
      });
      expectTooLarge(refused, path);
      const next = await send(agent, { method: "GET", path: "/v1/core/dead-letters" });
      expect(next.status).toBe(200);
    } finally {
      agent.destroy();
      reached.length = 0;
    }
  });

  it("keeps reading what the client still sends after the 413, so a client that reads late still gets all of it", async () => {
    // A raw connection that reads nothing until it has sent more: if the server closed at once,
    // those bytes would meet a reset, and the reset would discard the unread 413.
    const socket = connect(Number(new URL(server.url).port), "127.0.0.1");
    socket.pause();
    await new Promise<void>((resolve, reject) => socket.once("connect", resolve).once("error", reject));
    const received: Buffer[] = [];
    const closed = new Promise<string>((resolve) => {
      socket.on("data", (chunk: Buffer) => received.push(chunk));
      socket.once("end", () => resolve("end"));
      socket.once("error", (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
    });
    socket.write(
      `POST ${path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n` +
        `content-length: ${tooBig.length}\r\n\r\n`,
    );
    socket.write(tooBig.subarray(0, 64 * 1024));
    await sleep(200);
    socket.write(tooBig.subarray(64 * 1024, 2 * 1024 * 1024));
    await sleep(200);
    socket.resume();
    expect(await closed).toBe("end");
    socket.end();
    const text = Buffer.concat(received).toString("utf8");
    const [head = "", body = ""] = text.split("\r\n\r\n");
    expect(head).toMatch(/^HTTP\/1\.1 413 /);
    expect(head.toLowerCase()).toContain("connection: close");
    expect(JSON.parse(body)).toMatchObject({ status: 413, instance: path });
    expect(reached).toEqual([]);
  });

  it("lets exactly 10 MB through", async () => {
    const agent = new KeepAliveAgent({ keepAlive: true, maxSockets: 1 });
    try {
      const answer = await send(agent, {
        method: "POST",
        path,
        headers: { "content-type": "application/json", "content-length": MAX_BODY_BYTES },
        body: Buffer.alloc(MAX_BODY_BYTES, 0x61),
      });
      expect(answer.status).toBe(200);
      expect(reached).toEqual([{ path, bytes: MAX_BODY_BYTES }]);
    } finally {
      agent.destroy();
      reached.length = 0;
    }
  });
});
