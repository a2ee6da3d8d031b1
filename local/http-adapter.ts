/**
 * A real HTTP server in front of an API Gateway HTTP API (payload format 2.0) handler: each request
 * becomes the event API Gateway would send, and the handler's result becomes the response. What
 * API Gateway does before the handler (the JWT authorizer) the handler does itself; its body limit
 * the server applies, answering 413 with the API's problem document.
 */
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Context } from "aws-lambda";
import { HttpProblem } from "../shared/errors/http.ts";
import { problemResponse } from "../shared/http/problem.ts";
import {
  MAX_REQUEST_BODY_BYTES,
  MAX_REQUEST_LINE_AND_HEADERS_BYTES,
  requestLineAndHeadersBytes,
} from "../shared/http/request.ts";
import { LOCAL_ACCOUNT } from "./aws-clients.ts";
import { lambdaContext } from "./lambda-context.ts";

export type HttpApiHandler = (
  event: APIGatewayProxyEventV2,
  context: Context,
) => Promise<APIGatewayProxyStructuredResultV2>;

/** API Gateway refuses request bodies over 10 MB; so does the adapter. */
export const MAX_BODY_BYTES = MAX_REQUEST_BODY_BYTES;

/**
 * How long a refused request's connection is kept reading (and discarding) what the client still
 * sends after the 413 has gone out. Closing at once would make the kernel answer the unread bytes
 * with a reset, which can destroy the 413 before the client reads it.
 */
const LINGER_MS = 5_000;

/** The size the request says it has, when it says one. */
function declaredLength(request: IncomingMessage): number | undefined {
  const header = request.headers["content-length"];
  return header !== undefined && /^\d+$/.test(header) ? Number(header) : undefined;
}

/**
 * Answers 413 as the API answers every problem, and closes the connection cleanly: the response
 * says `Connection: close`, then the write side is shut (the client reads the whole answer and
 * end of stream) while what the client keeps sending is read and dropped, for at most LINGER_MS.
 */
function refuseTooLarge(request: IncomingMessage, response: ServerResponse, size: string): void {
  refuse(
    request,
    response,
    new HttpProblem(
      "contentTooLarge",
      `the request body is ${size}; the API takes at most ${MAX_BODY_BYTES} bytes (10 MB)`,
    ),
  );
}

/** Answers `problem` before the request is read, and closes the connection cleanly (as above). */
function refuse(request: IncomingMessage, response: ServerResponse, refusal: HttpProblem): void {
  const problem = problemResponse(refusal, new URL(request.url ?? "/", "http://localhost").pathname);
  const body = problem.body ?? "";
  const socket = request.socket;
  // Node closes a connection whose response says `close` by destroying the socket as soon as the
  // response is written; a half-close instead lets the client's remaining bytes drain.
  socket.destroySoon = () => {
    if (!socket.writableEnded) socket.end();
  };
  const linger = setTimeout(() => socket.destroy(), LINGER_MS);
  linger.unref();
  socket.once("close", () => clearTimeout(linger));
  request.resume();
  response.shouldKeepAlive = false;
  response.writeHead(refusal.status, {
    ...(problem.headers as Record<string, string>),
    "content-length": String(Buffer.byteLength(body)),
    connection: "close",
  });
  response.end(body);
}

/** The v2 event for a request. */
export function toHttpApiEvent(request: IncomingMessage, body: Buffer): APIGatewayProxyEventV2 {
  const url = new URL(request.url ?? "/", "http://localhost");
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(request.headers)) {
    if (value !== undefined) headers[name.toLowerCase()] = Array.isArray(value) ? value.join(",") : value;
  }
  // No prototype: a parameter named __proto__ must stay a parameter (and be refused as unknown).
  const query: Record<string, string> = Object.create(null);
  for (const [name, value] of url.searchParams)
    query[name] = name in query ? `${query[name]},${value}` : value;
  const method = request.method ?? "GET";
  const isText = body.length === 0 || /json|text|x-www-form-urlencoded/i.test(headers["content-type"] ?? "");
  const now = new Date();
  return {
    version: "2.0",
    routeKey: "$default",
    rawPath: url.pathname,
    rawQueryString: url.search.slice(1),
    headers,
    ...(Object.keys(query).length > 0 ? { queryStringParameters: query } : {}),
    requestContext: {
      accountId: LOCAL_ACCOUNT,
      apiId: "local",
      domainName: headers.host ?? "localhost",
      domainPrefix: "local",
      http: {
        method,
        path: url.pathname,
        protocol: `HTTP/${request.httpVersion}`,
        sourceIp: request.socket.remoteAddress ?? "127.0.0.1",
        userAgent: headers["user-agent"] ?? "",
      },
      requestId: randomUUID(),
      routeKey: "$default",
      stage: "$default",
      time: now.toUTCString(),
      timeEpoch: now.getTime(),
    },
    ...(body.length > 0 ? { body: isText ? body.toString("utf8") : body.toString("base64") } : {}),
    isBase64Encoded: !isText,
  };
}

/** Serves `handler` on 127.0.0.1:`port` (0: any free port). */
export async function serveHttpApi(
  handler: HttpApiHandler,
  options: { port?: number; functionName?: string } = {},
): Promise<{ url: string; server: Server; close(): Promise<void> }> {
  // Node's parser takes up to 64 KiB of headers, so that a request over API Gateway's smaller limit
  // gets the API's problem from the check below rather than Node's bare 431.
  const server = createServer({ maxHeaderSize: 64 * 1024 }, async (request, response) => {
    const lineAndHeaders = requestLineAndHeadersBytes(
      request.method ?? "GET",
      request.url ?? "/",
      request.rawHeaders.filter((_, i) => i % 2 === 1),
    );
    if (lineAndHeaders > MAX_REQUEST_LINE_AND_HEADERS_BYTES) {
      refuse(
        request,
        response,
        new HttpProblem(
          "headersTooLarge",
          `the request line and header values are ${lineAndHeaders} bytes; API Gateway takes at most ${MAX_REQUEST_LINE_AND_HEADERS_BYTES}`,
        ),
      );
      return;
    }
    const declared = declaredLength(request);
    if (declared !== undefined && declared > MAX_BODY_BYTES) {
      // Refused before a byte of the body is read: the client said how much it would send.
      refuseTooLarge(request, response, `${declared} bytes`);
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    const outcome = await new Promise<"complete" | "refused" | "gone">((resolve) => {
      const onData = (chunk: Buffer) => {
        size += chunk.length;
        if (size <= MAX_BODY_BYTES) {
          chunks.push(chunk);
          return;
        }
        // A chunked body (no Content-Length) is refused once it passes the limit.
        request.off("data", onData);
        chunks.length = 0;
        refuseTooLarge(request, response, `over ${MAX_BODY_BYTES} bytes`);
        resolve("refused");
      };
      request.on("data", onData);
      request.once("end", () => resolve("complete"));
      // The client went away mid-body: nobody is left to answer.
      request.once("error", () => resolve("gone"));
      request.once("close", () => resolve(request.complete ? "complete" : "gone"));
    });
    if (outcome !== "complete") return;
    try {
      const result = await handler(
        toHttpApiEvent(request, Buffer.concat(chunks)),
        lambdaContext(options.functionName ?? "dead-letters-api"),
      );
      const body = result.body ?? "";
      response.writeHead(result.statusCode ?? 200, result.headers as Record<string, string>);
      response.end(result.isBase64Encoded ? Buffer.from(body, "base64") : body);
    } catch {
      // API Gateway answers a failed integration with 500 and no detail.
      response.writeHead(500, { "content-type": "application/json" });
      response.end(JSON.stringify({ message: "Internal Server Error" }));
    }
  });
  // A body the client announces with Expect: 100-continue is refused before the client sends it.
  server.on("checkContinue", (request, response) => {
    const declared = declaredLength(request);
    if (declared === undefined || declared <= MAX_BODY_BYTES) response.writeContinue();
    server.emit("request", request, response);
  });
  // A port another process holds is a rejection the caller can explain, not an unhandled 'error'.
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, "127.0.0.1", () => {
      server.off("error", reject);
      resolve();
    });
  });
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    server,
    close: () => new Promise<void>((resolve, reject) => server.close((e) => (e ? reject(e) : resolve()))),
  };
}
