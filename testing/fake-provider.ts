/**
 * A fake external provider on a real HTTP server, for steps (`job.step`) that call one: charges
 * (POST /v1/charges) and emails (POST /v1/emails), with Stripe's Idempotency-Key semantics, faults
 * to inject, and a ledger of every effect it had. It is what proves a step's effect happens once:
 * a retry or a replay that calls again with the step's key is answered from the key, and the ledger
 * shows one effect.
 *
 * Idempotency, as Stripe does it:
 * - a request with a key it has seen, and the same request (method, path and the body's canonical
 *   JSON), gets the first answer again with `Idempotent-Replayed: true`, and no new effect;
 * - the same key with another request is refused: 400 `idempotency_error`;
 * - the same key while the first request is still being answered is refused: 409
 *   `idempotency_error`, code `idempotency_key_in_use`;
 * - a request refused before it acted (a bad body or key) leaves its key unremembered.
 * Keys are remembered for the server's life, or until a reset (Stripe keeps them 24 hours).
 *
 * Control, in process or over HTTP (so a stack's provider can be driven with curl):
 * GET /_fake/ledger (`{ entries, requests }`), POST /_fake/faults (a {@link FaultSpec}),
 * POST /_fake/reset. Control requests are not kept among `requests()`.
 *
 * ```ts
 * const provider = await startFakeProvider();
 * provider.fault({ path: "/v1/emails", mode: "late", delayMs: 500 });
 * // … the consumer's step calls `${provider.url}/v1/emails` with its key, times out, retries …
 * expect(provider.ledger()).toHaveLength(1);
 * await provider.close();
 * ```
 */
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { canonicalJson } from "../shared/envelope/canonical-json.ts";
import {
  describeIssues,
  errorBody,
  type Fault,
  type FaultSpec,
  faultErrorType,
  IDEMPOTENCY_KEY,
  type LedgerEntry,
  PROVIDER_ENDPOINTS,
  type ProviderEffect,
  parseFault,
  REQUEST_BODIES,
  type RequestEntry,
  type RequestOutcome,
} from "./fake-provider-api.ts";

export type {
  FaultSpec,
  LedgerEntry,
  ProviderEffect,
  RequestEntry,
  RequestOutcome,
} from "./fake-provider-api.ts";

/** Where the provider listens. */
export interface FakeProviderOptions {
  /** @default 0: any free port */
  port?: number;
  /** @default "127.0.0.1" */
  host?: string;
}

/** A running fake provider. */
export interface FakeProvider {
  /** `http://127.0.0.1:PORT`, no trailing slash. */
  readonly url: string;
  /** Every effect, in order. */
  ledger(): LedgerEntry[];
  /** Every request seen to its endpoints (and unknown paths), in arrival order. */
  requests(): RequestEntry[];
  /** Injects a fault into the next requests that would act; throws ConfigurationError for a bad spec. */
  fault(spec: FaultSpec): void;
  /** Forgets the ledger, the requests, the keys and the faults. */
  reset(): void;
  /** Stops listening and closes every connection, hung ones included. */
  close(): Promise<void>;
}

/** A request body above this is refused (413), unread. */
const MAX_BODY_BYTES = 1024 * 1024;

/** A remembered answer. */
interface Answer {
  readonly status: number;
  readonly body: unknown;
}

/** What a key is remembered with: the request it was first used with, and its answer once given. */
interface KeyRecord {
  readonly identity: string;
  /** Undefined while the first request is in flight (a `late` answer not yet sent). */
  answer: Answer | undefined;
}

/** The mutable state a reset clears. */
interface State {
  ledger: LedgerEntry[];
  requests: RequestEntry[];
  keys: Map<string, KeyRecord>;
  /** Faults still to apply, each with the requests it has left. */
  faults: Fault[];
}

const freshState = (): State => ({ ledger: [], requests: [], keys: new Map(), faults: [] });

/** An id as Stripe spells them: a prefix and 24 alphanumerics. */
const objectId = (prefix: string) => `${prefix}_${randomUUID().replaceAll("-", "").slice(0, 24)}`;

/** Starts a fake provider (on any free port of 127.0.0.1 by default). */
export async function startFakeProvider(options: FakeProviderOptions = {}): Promise<FakeProvider> {
  let state = freshState();
  const timers = new Set<NodeJS.Timeout>();

  const addFault = (spec: unknown): Fault => {
    const fault = parseFault(spec);
    state.faults.push(fault);
    return fault;
  };

  /** Takes one use of the first fault for `path`, if any. */
  const takeFault = (path: string): Fault | undefined => {
    const index = state.faults.findIndex((f) => f.path === undefined || f.path === path);
    const fault = state.faults[index];
    if (fault === undefined) return undefined;
    if (fault.times <= 1) state.faults.splice(index, 1);
    else state.faults[index] = { ...fault, times: fault.times - 1 };
    return fault;
  };

  const record = (
    request: IncomingMessage,
    path: string,
    key: string | null,
    outcome: RequestOutcome,
    status: number | null,
    effect: string | null = null,
  ) => {
    state.requests.push({
      seq: state.requests.length + 1,
      method: request.method ?? "GET",
      path,
      key,
      outcome,
      status,
      effect,
      at: new Date().toISOString(),
    });
  };

  /** Makes the effect: a ledger entry (its id is `effect`), and the object answered for it. */
  const act = (
    kind: ProviderEffect,
    key: string | null,
    body: Record<string, unknown>,
  ): { answer: Answer; effect: string } => {
    const id = objectId(kind === "charge" ? "ch" : "em");
    const created = Math.floor(Date.now() / 1000);
    state.ledger.push({
      seq: state.ledger.length + 1,
      id,
      kind,
      key,
      request: body,
      at: new Date().toISOString(),
    });
    const answered =
      kind === "charge"
        ? {
            id,
            object: "charge",
            amount: body.amount,
            currency: String(body.currency).toLowerCase(),
            customer: body.customer,
            ...(body.description === undefined ? {} : { description: body.description }),
            status: "succeeded",
            created,
          }
        : { id, object: "email", to: body.to, subject: body.subject, status: "sent", created };
    return { answer: { status: 200, body: answered }, effect: id };
  };

  const provide = (
    request: IncomingMessage,
    response: ServerResponse,
    path: string,
    kind: ProviderEffect,
    raw: Buffer,
  ): void => {
    const headers = request.headersDistinct["idempotency-key"] ?? [];
    const key = headers[0] ?? null;
    const refuse = (status: number, body: unknown) => {
      record(request, path, key, "refused", status);
      send(response, status, body, key);
    };
    if (headers.length > 1) {
      refuse(400, errorBody("invalid_request_error", "send one Idempotency-Key header, not several"));
      return;
    }
    if (key !== null && !IDEMPOTENCY_KEY.test(key)) {
      refuse(
        400,
        errorBody("invalid_request_error", "Idempotency-Key must be 1 to 255 printable ASCII characters"),
      );
      return;
    }
    let parsed: unknown;
    try {
      // Fatal: two bodies that differ only in invalid bytes must not read as one request.
      parsed = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(raw));
    } catch {
      refuse(400, errorBody("invalid_request_error", "the body must be a JSON object in UTF-8"));
      return;
    }
    const valid = REQUEST_BODIES[kind].safeParse(parsed);
    if (!valid.success) {
      refuse(400, errorBody("invalid_request_error", describeIssues(valid.error)));
      return;
    }

    // The same request: method, path and the body's canonical JSON (key order and spacing aside).
    const identity = `${request.method} ${path} ${canonicalJson(parsed)}`;
    const known = key === null ? undefined : state.keys.get(key);
    if (known !== undefined) {
      if (known.identity !== identity) {
        refuse(
          400,
          errorBody(
            "idempotency_error",
            `Keys for idempotent requests can only be used with the same parameters they were first used with; ${key} was used with another request`,
          ),
        );
        return;
      }
      if (known.answer === undefined) {
        refuse(
          409,
          errorBody(
            "idempotency_error",
            `There is currently another in-progress request using this Idempotency-Key (${key}); try again later`,
            "idempotency_key_in_use",
          ),
        );
        return;
      }
      record(request, path, key, "replayed", known.answer.status);
      send(response, known.answer.status, known.answer.body, key, true);
      return;
    }

    const fault = takeFault(path);
    if (fault?.mode === "fail") {
      record(request, path, key, "failed", fault.status);
      send(
        response,
        fault.status,
        errorBody(faultErrorType(fault.status), `the fake provider was told to fail (${fault.status})`),
        key,
      );
      return;
    }
    if (fault?.mode === "hang" && !fault.act) {
      record(request, path, key, "hung", null);
      return; // never answered; close() ends the connection
    }
    const { answer, effect } = act(kind, key, valid.data as Record<string, unknown>);
    if (fault?.mode === "hang") {
      if (key !== null) state.keys.set(key, { identity, answer });
      record(request, path, key, "hung", null, effect);
      return;
    }
    if (fault?.mode === "late") {
      const remembered: KeyRecord = { identity, answer: undefined };
      if (key !== null) state.keys.set(key, remembered);
      record(request, path, key, "late", answer.status, effect);
      const timer = setTimeout(() => {
        timers.delete(timer);
        remembered.answer = answer;
        send(response, answer.status, answer.body, key);
      }, fault.delayMs);
      timers.add(timer);
      return;
    }
    if (key !== null) state.keys.set(key, { identity, answer });
    record(request, path, key, "acted", answer.status, effect);
    send(response, answer.status, answer.body, key);
  };

  const control = (path: string, method: string, raw: Buffer, response: ServerResponse): boolean => {
    if (method === "GET" && path === "/_fake/ledger") {
      send(response, 200, { entries: state.ledger, requests: state.requests }, null);
      return true;
    }
    if (method === "POST" && path === "/_fake/reset") {
      provider.reset();
      send(response, 200, { reset: true }, null);
      return true;
    }
    if (method === "POST" && path === "/_fake/faults") {
      try {
        send(response, 200, { fault: addFault(JSON.parse(raw.toString("utf8"))) }, null);
      } catch (error) {
        send(response, 400, errorBody("invalid_request_error", (error as Error).message), null);
      }
      return true;
    }
    return false;
  };

  const handle = async (request: IncomingMessage, response: ServerResponse): Promise<void> => {
    const method = request.method ?? "GET";
    let path: string;
    try {
      path = new URL(request.url ?? "/", "http://fake").pathname;
    } catch {
      record(request, request.url ?? "", null, "refused", 400);
      send(response, 400, errorBody("invalid_request_error", "the request target is not a path"), null);
      request.resume();
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of request) {
      size += (chunk as Buffer).length;
      if (size > MAX_BODY_BYTES) {
        record(request, path, null, "refused", 413);
        response.writeHead(413, { "content-type": "application/json", connection: "close" });
        response.end(JSON.stringify(errorBody("invalid_request_error", "the body is over 1 MiB")));
        return;
      }
      chunks.push(chunk as Buffer);
    }
    const raw = Buffer.concat(chunks);
    if (path.startsWith("/_fake/") && control(path, method, raw, response)) return;
    const kind = Object.hasOwn(PROVIDER_ENDPOINTS, path) ? PROVIDER_ENDPOINTS[path] : undefined;
    if (method === "POST" && kind !== undefined) return provide(request, response, path, kind, raw);
    const key = request.headers["idempotency-key"];
    record(request, path, typeof key === "string" ? key : null, "refused", 404);
    send(
      response,
      404,
      errorBody("invalid_request_error", `Unrecognized request URL (${method}: ${path})`),
      null,
    );
  };

  // A client that goes away mid-body ends its own request, never the process.
  const server = createServer((request, response) => {
    handle(request, response).catch(() => response.destroy());
  });

  // A port another process holds is a rejection the caller can explain, not an unhandled 'error'.
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, options.host ?? "127.0.0.1", () => {
      server.off("error", reject);
      resolve();
    });
  });
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : 0;
  const host = options.host ?? "127.0.0.1";

  const provider: FakeProvider = {
    url: `http://${host.includes(":") ? `[${host}]` : host}:${port}`,
    ledger: () => state.ledger.map((entry) => ({ ...entry })),
    requests: () => state.requests.map((entry) => ({ ...entry })),
    fault: (spec) => {
      addFault(spec);
    },
    reset: () => {
      // Late answers still due go out; their keys are forgotten with the rest.
      state = freshState();
    },
    close: () =>
      new Promise<void>((resolve, reject) => {
        for (const timer of timers) clearTimeout(timer);
        timers.clear();
        server.close((error) => (error ? reject(error) : resolve()));
        server.closeAllConnections();
      }),
  };
  return provider;
}

/** Answers `body` as JSON, with Stripe's idempotency headers. */
function send(
  response: ServerResponse,
  status: number,
  body: unknown,
  key: string | null,
  replayed = false,
): void {
  if (response.destroyed || response.writableEnded) return; // the client gave up waiting
  response.writeHead(status, {
    "content-type": "application/json",
    "request-id": `req_${randomUUID().replaceAll("-", "").slice(0, 14)}`,
    ...(key === null ? {} : { "idempotency-key": key }),
    ...(replayed ? { "idempotent-replayed": "true" } : {}),
  });
  response.end(JSON.stringify(body));
}
