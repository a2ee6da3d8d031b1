/** A connection string as it may be printed: in messages, reports and logs. */

/** `url` without its password (`postgres://user:***@host/db`); a string that is no URL is not echoed. */
export function withoutPassword(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = "***";
    return parsed.toString();
  } catch {
    return "(the database URL)";
  }
}
