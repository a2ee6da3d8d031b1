/**
 * notify-user's email provider: where it is (the consumer's own setting EMAIL_PROVIDER_URL), the
 * message it sends, and the one call its step makes, `POST {url}/v1/emails` with the step's key as
 * the `Idempotency-Key`, so a retry, a replay or a repeat after a crash is answered from the key and
 * the user gets one email. The provider is any that speaks this API; the local stack and the tests
 * run jobfence's fake one (`startFakeProvider` from jobfence/testing).
 */
import { createHash } from "node:crypto";
import { z } from "zod";
import { ConfigurationError } from "../../shared/index.ts";

/** The environment variable that names the email provider's base URL (http or https). */
export const EMAIL_PROVIDER_URL = "EMAIL_PROVIDER_URL";

/** How long one call may take before it is given up (and the step retried with the same key). */
export const EMAIL_CALL_TIMEOUT_MS = 5_000;

/**
 * What is wrong with `value` as the provider's base URL (missing, not a URL, not http or https,
 * with a query or fragment), as a clause to follow the setting's name; undefined when it is fine.
 */
export function emailProviderUrlProblem(value: string | undefined): string | undefined {
  if (value === undefined || value.trim() === "") {
    return "is required: the email provider's base URL (http or https), e.g. http://127.0.0.1:4568";
  }
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return `is ${JSON.stringify(value)}, which is not a URL: give the email provider's base URL (http or https)`;
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    return `is ${JSON.stringify(value)}, which is not an http or https URL`;
  }
  if (url.search !== "" || url.hash !== "") {
    return `is ${JSON.stringify(value)}: a base URL takes no query or fragment`;
  }
  return undefined;
}

/**
 * The provider's base URL from `env`, without a trailing slash; throws {@link ConfigurationError}
 * naming the setting when it is missing or not an http(s) URL.
 */
export function emailProviderUrl(env: NodeJS.ProcessEnv = process.env): string {
  const value = env[EMAIL_PROVIDER_URL];
  const problem = emailProviderUrlProblem(value);
  if (problem !== undefined)
    throw new ConfigurationError("notify-user", [`${EMAIL_PROVIDER_URL} ${problem}`]);
  return new URL(value as string).href.replace(/\/+$/, "");
}

/** One plain-text email to one address. */
export interface EmailMessage {
  readonly to: string;
  readonly subject: string;
  readonly text: string;
}

/** What the provider answers for an email it sent: the step's recorded result. */
export const EmailSent = z.object({
  /** The provider's message id, recorded with the notification. */
  id: z.string().min(1).max(255),
  object: z.literal("email"),
  status: z.literal("sent"),
});

/** The provider answered with an error: its status, and Stripe-shaped type and code when it gave them. */
export class EmailProviderError extends Error {
  override name = "EmailProviderError";
  readonly status: number;
  readonly type: string | undefined;
  readonly code: string | undefined;
  constructor(status: number, type: string | undefined, code: string | undefined, message: string) {
    super(
      `the email provider answered ${status}${type ? ` ${type}` : ""}${code ? ` (${code})` : ""}: ${message}`,
    );
    this.status = status;
    this.type = type;
    this.code = code;
  }
}

/**
 * Whether retrying cannot help: the provider refused the request itself (a 4xx), except a 409 (the
 * key's first request is still being answered) and a 429 (too many requests), which pass. Any
 * other failure (5xx, a timeout, a connection refused) is retried with the same key.
 */
export function isPermanentEmailFailure(error: unknown): boolean {
  return (
    error instanceof EmailProviderError &&
    error.status >= 400 &&
    error.status < 500 &&
    error.status !== 409 &&
    error.status !== 429
  );
}

/**
 * Sends `message` through the provider at `url` under `key`; resolves to the provider's answer
 * (the step validates it), rejects with {@link EmailProviderError} for an error answer, or with the
 * abort's reason when `signal` or the call's own timeout ends it first.
 */
export async function sendEmail(
  url: string,
  message: EmailMessage,
  key: string,
  signal: AbortSignal,
): Promise<unknown> {
  const response = await fetch(`${url}/v1/emails`, {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": key },
    body: JSON.stringify({ to: message.to, subject: message.subject, text: message.text }),
    signal: AbortSignal.any([signal, AbortSignal.timeout(EMAIL_CALL_TIMEOUT_MS)]),
  });
  const text = await response.text();
  let body: unknown;
  try {
    body = text === "" ? undefined : JSON.parse(text);
  } catch {
    body = undefined;
  }
  if (!response.ok) {
    const error = (body as { error?: { type?: unknown; code?: unknown; message?: unknown } } | undefined)
      ?.error;
    throw new EmailProviderError(
      response.status,
      typeof error?.type === "string" ? error.type : undefined,
      typeof error?.code === "string" ? error.code : undefined,
      typeof error?.message === "string" ? error.message : text.slice(0, 200),
    );
  }
  return body;
}

/** A local part the provider takes as an address: letters, digits and `_+-.`, not starting or ending with a dot. */
const ADDRESS_LOCAL_PART = /^[A-Za-z0-9_+-](?:[A-Za-z0-9_+.-]{0,62}[A-Za-z0-9_+-])?$/;

/**
 * The reference deployment has no address book: a user's address is made from their id, in the
 * `users.example.com` domain: the id itself when it can be a local part, otherwise a digest of it.
 */
export function userAddress(userId: string): string {
  const local =
    ADDRESS_LOCAL_PART.test(userId) && !userId.includes("..")
      ? userId
      : `u-${createHash("sha256").update(userId, "utf8").digest("hex").slice(0, 32)}`;
  return `${local}@users.example.com`;
}
