/**
 * The `last_error` column: the error's class and message and a trimmed stack, bounded so that one
 * runaway error cannot bloat the table (the database refuses more than 16 KiB). Pure.
 */

/** Bounds of the recorded error, in characters. */
export const LAST_ERROR_LIMITS = Object.freeze({
  message: 2000,
  stackLines: 20,
  stack: 8000,
  /** The whole description as UTF-8 JSON; the database refuses more than 16 KiB, and jsonb's text adds spacing. */
  bytes: 12_288,
});

/** What `last_error` holds. */
export interface LastError {
  readonly class: string;
  readonly message: string;
  readonly stack?: string;
}

/**
 * Describes `error` for the record. For a wrapper that carries the real failure as `cause`
 * (exhausted retries), the cause's class and message are what an operator needs to see.
 *
 * Never throws, whatever was thrown: an error whose properties are getters that throw, or are not
 * strings, is described as far as it can be read. The description is what lets a failure be
 * recorded; an error that made it fail would leave its message circling in the queue.
 */
export function describeError(error: unknown, options: { unwrapCause?: boolean } = {}): LastError {
  try {
    const cause = options.unwrapCause && error instanceof Error ? read(error, "cause") : undefined;
    const subject = cause !== undefined ? cause : error;
    if (!(subject instanceof Error)) {
      return fitToBytes({
        class: typeof subject,
        message: clean(safeString(subject), LAST_ERROR_LIMITS.message),
      });
    }
    const code = read(subject, "code");
    const suffix = typeof code === "string" && code.length <= 16 ? ` [${code}]` : "";
    const description: { -readonly [K in keyof LastError]: LastError[K] } = {
      class: clean(classOf(subject), 200),
      message:
        clean(safeString(read(subject, "message")), LAST_ERROR_LIMITS.message - suffix.length) + suffix,
    };
    const stack = read(subject, "stack");
    if (typeof stack === "string" && stack.length > 0) {
      const lines = stack.split("\n").slice(0, LAST_ERROR_LIMITS.stackLines).join("\n");
      description.stack = clean(lines, LAST_ERROR_LIMITS.stack);
    }
    return fitToBytes(description);
  } catch {
    return { class: "UnreadableError", message: "the error could not be described: reading it threw" };
  }
}

/**
 * `description` with `note` appended to its message, within the same bounds: what the harness adds
 * to a failure it did not retry for a reason of its own (the retry would outlive the message).
 */
export function withNote(description: LastError, note: string): LastError {
  return fitToBytes({
    ...description,
    message: clean(`${description.message} — ${note}`, LAST_ERROR_LIMITS.message),
  });
}

/** A property of a thrown value, or undefined when reading it throws. */
function read(value: object, key: string): unknown {
  try {
    return (value as Record<string, unknown>)[key];
  } catch {
    return undefined;
  }
}

/**
 * Keeps the serialised description within {@link LAST_ERROR_LIMITS.bytes}: the character bounds
 * alone do not, since a character can take up to six bytes of JSON (an escaped control character).
 * Drops the stack first, then halves the message until it fits.
 */
function fitToBytes(description: LastError): LastError {
  const size = (d: LastError) => Buffer.byteLength(JSON.stringify(d), "utf8");
  if (size(description) <= LAST_ERROR_LIMITS.bytes) return description;
  const { stack: _stack, ...withoutStack } = description;
  let fitted: LastError = withoutStack;
  while (size(fitted) > LAST_ERROR_LIMITS.bytes && fitted.message.length > 1) {
    fitted = { ...fitted, message: clean(fitted.message, Math.floor(fitted.message.length / 2)) };
  }
  return fitted;
}

/**
 * The error's class: its `name` when it names one, else its constructor's (node-postgres names
 * its DatabaseError instances plain "error").
 */
function classOf(error: Error): string {
  const name = read(error, "name");
  if (typeof name === "string" && name && name !== "Error" && name !== "error") return name;
  const maker = read(error, "constructor");
  const constructorName = typeof maker === "function" ? read(maker, "name") : undefined;
  return typeof constructorName === "string" && constructorName ? constructorName : "Error";
}

function safeString(value: unknown): string {
  if (typeof value === "string") return value;
  try {
    return String(value);
  } catch {
    return "(unprintable)";
  }
}

/**
 * Text jsonb can hold, at most `max` UTF-16 units: U+0000 escaped, cut with an ellipsis, and made
 * well-formed after the cut (which may split a surrogate pair), since jsonb refuses lone surrogates.
 */
function clean(text: string, max: number): string {
  const escaped = text.replaceAll("\u0000", "\\u0000");
  const cut = escaped.length <= max ? escaped : `${escaped.slice(0, Math.max(0, max - 1))}…`;
  return cut.toWellFormed();
}
