/**
 * A real HTTP server in front of an API Gateway HTTP API (payload format 2.0) handler: each request
 * becomes the event API Gateway would send, and the handler's result becomes the response. What
 * API Gateway does before the handler (the JWT authorizer) the handler does itself.
 */
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Context } from "aws-lambda";
import { LOCAL_ACCOUNT } from "./aws-clients.ts";
import { lambdaContext } from "./lambda-context.ts";

export type HttpApiHandler = (
  event: APIGatewayProxyEventV2,
  context: Context,
) => Promise<APIGatewayProxyStructuredResultV2>;

/** API Gateway refuses request bodies over 10 MB; so does the adapter. */
const MAX_BODY_BYTES = 10 * 1024 * 1024;

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
  const server = createServer(async (request, response) => {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of request) {
      size += (chunk as Buffer).length;
      if (size > MAX_BODY_BYTES) {
        response.writeHead(413, { "content-type": "application/problem+json" });
        response.end(JSON.stringify({ type: "about:blank", title: "Payload Too Large", status: 413 }));
        return;
      }
      chunks.push(chunk as Buffer);
    }
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
