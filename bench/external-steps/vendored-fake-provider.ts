/**
 * TEMPORARY: a minimal stand-in for `startFakeProvider` (jobfence/testing) until the fake provider
 * reaches this branch, with the subset of its interface the benchmark uses: POST /v1/charges,
 * `Idempotency-Key` as Stripe honours it (a repeat of key + same request answers the first answer
 * with `Idempotent-Replayed: true` and acts no more; another request under the key is refused with
 * 400; a key in flight 409), the ledger of effects and every request seen. Deleted when the real
 * one is merged (bench/external-steps/provider.ts then re-exports it).
 */
import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";

export interface LedgerEntry {
  readonly seq: number;
  readonly id: string;
  readonly kind: "charge" | "email";
  readonly key: string | null;
  readonly request: unknown;
  readonly at: string;
}

export interface RequestEntry {
  readonly seq: number;
  readonly method: string;
  readonly path: string;
  readonly key: string | null;
  readonly outcome: "acted" | "replayed" | "refused" | "failed" | "hung" | "late";
  readonly status: number | null;
  readonly effect: string | null;
  readonly at: string;
}

export interface FakeProvider {
  readonly url: string;
  ledger(): LedgerEntry[];
  requests(): RequestEntry[];
  close(): Promise<void>;
}

async function bodyOf(req: IncomingMessage): Promise<string> {
  let text = "";
  for await (const chunk of req) text += String(chunk);
  return text;
}

export async function startFakeProvider(
  options: { port?: number; host?: string } = {},
): Promise<FakeProvider> {
  const ledger: LedgerEntry[] = [];
  const requests: RequestEntry[] = [];
  const keys = new Map<string, { identity: string; answer?: string }>();
  const server = createServer(async (req, res) => {
    const path = req.url ?? "/";
    const text = await bodyOf(req);
    const header = req.headers["idempotency-key"];
    const key = typeof header === "string" ? header : null;
    const answer = (status: number, body: unknown) => {
      res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
    };
    const record = (outcome: RequestEntry["outcome"], status: number, effect: string | null = null) =>
      requests.push({
        seq: requests.length + 1,
        method: req.method ?? "",
        path,
        key,
        outcome,
        status,
        effect,
        at: new Date().toISOString(),
      });
    if (req.method !== "POST" || path !== "/v1/charges") return answer(404, { error: { type: "not_found" } });
    const identity = `${req.method} ${path} ${text}`;
    const seen = key === null ? undefined : keys.get(key);
    if (seen) {
      if (seen.identity !== identity) {
        record("refused", 400);
        return answer(400, { error: { type: "idempotency_error" } });
      }
      if (seen.answer === undefined) {
        record("refused", 409);
        return answer(409, { error: { type: "idempotency_key_in_use" } });
      }
      record("replayed", 200);
      res.writeHead(200, { "content-type": "application/json", "idempotent-replayed": "true" });
      return res.end(seen.answer);
    }
    const request = JSON.parse(text) as { amount: number; currency: string; customer: string };
    const id = `ch_${randomBytes(8).toString("hex")}`;
    const created = Math.floor(Date.now() / 1000);
    ledger.push({ seq: ledger.length + 1, id, kind: "charge", key, request, at: new Date().toISOString() });
    record("acted", 200, id);
    const body = JSON.stringify({ id, object: "charge", ...request, status: "succeeded", created });
    if (key !== null) keys.set(key, { identity, answer: body });
    res.writeHead(200, { "content-type": "application/json" }).end(body);
  });
  await new Promise<void>((resolve) =>
    server.listen(options.port ?? 0, options.host ?? "127.0.0.1", resolve),
  );
  const { address, port } = server.address() as AddressInfo;
  return {
    url: `http://${address}:${port}`,
    ledger: () => [...ledger],
    requests: () => [...requests],
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
