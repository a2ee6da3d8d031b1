/**
 * notify-user's email call (functions/notify-user/email.ts) against the fake provider over real
 * HTTP: its setting refused when missing or not http(s), one email per key however often it is
 * sent, the provider's refusals as errors that say which are permanent, and a call that hangs given
 * up by its signal.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  EMAIL_PROVIDER_URL,
  EmailProviderError,
  EmailSent,
  emailProviderUrl,
  isPermanentEmailFailure,
  sendEmail,
  userAddress,
} from "../../functions/notify-user/email.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { emailRequest } from "../../testing/fake-provider-api.ts";
import { type FakeProvider, startFakeProvider } from "../../testing/index.ts";

let provider: FakeProvider;
beforeAll(async () => {
  provider = await startFakeProvider();
});
afterAll(async () => {
  await provider?.close();
});

const MESSAGE = { to: "u-1@users.example.com", subject: "10 points", text: "You earned 10 points." };
const never = new AbortController().signal;

describe("EMAIL_PROVIDER_URL", () => {
  it("is the provider's base URL, without a trailing slash", () => {
    expect(emailProviderUrl({ [EMAIL_PROVIDER_URL]: "http://127.0.0.1:4568/" })).toBe(
      "http://127.0.0.1:4568",
    );
    expect(emailProviderUrl({ [EMAIL_PROVIDER_URL]: "https://mail.example.com/api" })).toBe(
      "https://mail.example.com/api",
    );
  });

  it.each([
    [undefined, /EMAIL_PROVIDER_URL is required/],
    ["  ", /EMAIL_PROVIDER_URL is required/],
    ["mail.example.com", /is "mail\.example\.com", which is not a URL/],
    ["ftp://mail.example.com", /which is not an http or https URL/],
    ["https://mail.example.com/?token=1", /takes no query or fragment/],
  ])("refuses %j, naming the setting", (value, message) => {
    const read = () => emailProviderUrl(value === undefined ? {} : { [EMAIL_PROVIDER_URL]: value });
    expect(read).toThrow(ConfigurationError);
    expect(read).toThrow(message);
  });
});

describe("sendEmail", () => {
  it("sends once per key: a repeat gets the same message id and the ledger one email", async () => {
    provider.reset();
    const first = EmailSent.parse(await sendEmail(provider.url, MESSAGE, "notify-user:job-1:email", never));
    const again = EmailSent.parse(await sendEmail(provider.url, MESSAGE, "notify-user:job-1:email", never));
    expect(again.id).toBe(first.id);
    expect(provider.ledger()).toEqual([
      expect.objectContaining({ kind: "email", key: "notify-user:job-1:email", request: MESSAGE }),
    ]);
  });

  it("rejects an error answer with its status, type and code, permanent only for a 4xx but 409 and 429", async () => {
    provider.reset();
    const failure = async (status: number) => {
      provider.fault({ mode: "fail", status });
      return sendEmail(provider.url, MESSAGE, `k-${status}`, never).catch((error: unknown) => error);
    };
    const refused = await failure(400);
    expect(refused).toBeInstanceOf(EmailProviderError);
    expect(refused).toMatchObject({ status: 400, type: "invalid_request_error" });
    expect(isPermanentEmailFailure(refused)).toBe(true);
    expect(isPermanentEmailFailure(await failure(402))).toBe(true);
    expect(isPermanentEmailFailure(await failure(429))).toBe(false);
    expect(isPermanentEmailFailure(await failure(500))).toBe(false);
    expect(isPermanentEmailFailure(await failure(503))).toBe(false);

    provider.fault({ mode: "late", delayMs: 300 });
    const first = sendEmail(provider.url, MESSAGE, "in-flight", never);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const inFlight = await sendEmail(provider.url, MESSAGE, "in-flight", never).catch(
      (error: unknown) => error,
    );
    expect(inFlight).toMatchObject({ status: 409, code: "idempotency_key_in_use" });
    expect(isPermanentEmailFailure(inFlight)).toBe(false);
    await first;

    expect(isPermanentEmailFailure(new Error("connection refused"))).toBe(false);
    expect(provider.ledger().map((e) => e.key)).toEqual(["in-flight"]);
  });

  it("gives up a call that hangs when its signal aborts", async () => {
    provider.reset();
    provider.fault({ mode: "hang" });
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error("the record's deadline")), 100);
    await expect(sendEmail(provider.url, MESSAGE, "hung", controller.signal)).rejects.toThrow(
      "the record's deadline",
    );
  });
});

describe("userAddress", () => {
  it("uses an id that can be an address's local part, and a digest of any other", () => {
    expect(userAddress("u-1")).toBe("u-1@users.example.com");
    const odd = userAddress("ada lovelace@home");
    expect(odd).toMatch(/^u-[0-9a-f]{32}@users\.example\.com$/);
    expect(userAddress("ada lovelace@home")).toBe(odd);
    expect(userAddress(".dot")).not.toBe(".dot@users.example.com");
    // Each is an address the provider takes.
    for (const id of ["u-1", "ada lovelace@home", ".dot", "a..b", "x".repeat(128)]) {
      expect(emailRequest.shape.to.safeParse(userAddress(id)).success, id).toBe(true);
    }
  });
});
