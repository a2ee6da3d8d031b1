/** The database a `jobfence` command connects to, and how it is printed. */

/** `--database-url`, else `DATABASE_URL`; undefined when neither names one. */
export function databaseUrlOf(
  flag: string | undefined,
  env: Readonly<Record<string, string | undefined>>,
): string | undefined {
  const url = flag ?? env.DATABASE_URL;
  return url === undefined || url === "" ? undefined : url;
}

/** A connection string without its password, for printing. */
export function withoutPassword(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = "***";
    return parsed.toString();
  } catch {
    return "(the database URL)";
  }
}
