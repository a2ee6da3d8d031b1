/**
 * The `last_error` column: the error's class and message and a trimmed stack, bounded so that one
 * runaway error cannot bloat the table (the database refuses more than 16 KiB). Pure.
 */

/** Bounds of the recorded error, in characters. */
export const LAST_ERROR_LIMITS = Object.freeze({ message: 2000, stackLines: 20, stack: 8000 });

/** What `last_error` holds. */
export interface LastError {
  readonly class: string;
  readonly message: string;
  readonly stack?: string;
}

/**
 * Describes `error` for the record. For a wrapper that carries the real failure as `cause`
 * (exhausted retries), the cause's class and message are what an operator needs to see.
 */
export function describeError(error: unknown, options: { unwrapCause?: boolean } = {}): LastError {
  const subject =
    options.unwrapCause && error instanceof Error && error.cause !== undefined ? error.cause : error;
  if (!(subject instanceof Error)) {
    return { class: typeof subject, message: bound(safeString(subject), LAST_ERROR_LIMITS.message) };
  }
  const description: { -readonly [K in keyof LastError]: LastError[K] } = {
    class: classOf(subject),
    message: bound(sanitize(subject.message), LAST_ERROR_LIMITS.message),
  };
  if (subject.stack) {
    const lines = subject.stack.split("\n").slice(0, LAST_ERROR_LIMITS.stackLines).join("\n");
    description.stack = bound(sanitize(lines), LAST_ERROR_LIMITS.stack);
  }
  const code = (subject as { code?: unknown }).code;
  if (typeof code === "string" && code.length <= 16) description.message = `${description.message} [${code}]`;
  return description;
}

/**
 * The error's class: its `name` when it names one, else its constructor's (node-postgres names
 * its DatabaseError instances plain "error").
 */
function classOf(error: Error): string {
  if (error.name && error.name !== "Error" && error.name !== "error") return error.name;
  return error.constructor?.name || "Error";
}

function safeString(value: unknown): string {
  try {
    return sanitize(String(value));
  } catch {
    return "(unprintable)";
  }
}

/** jsonb cannot hold U+0000 or lone surrogates; error text from anywhere may contain them. */
function sanitize(text: string): string {
  return text.replaceAll("\u0000", "\\u0000").toWellFormed();
}

function bound(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}
