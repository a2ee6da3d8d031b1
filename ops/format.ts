/** Small formatters for human output: times, ages, counts, JSON and copy-pasteable commands. */

/** How the CLI is invoked, for usage lines and the commands it suggests. */
export const PROGRAM = "npm run ops --";

/** "2026-11-29T08:22:01.123456Z" → "2026-11-29T08:22:01Z" (still valid for --after). */
export function shortTime(value: string | null | undefined): string {
  if (!value) return "-";
  const match = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.\d+)?Z$/.exec(value);
  return match ? `${match[1]}Z` : value;
}

/** A rough age: "3d 4h", "2h 5m", "7m", "12s". */
export function age(from: string, now: number): string {
  const ms = now - Date.parse(from);
  if (!Number.isFinite(ms)) return "?";
  const s = Math.max(0, Math.floor(ms / 1000));
  const d = Math.floor(s / 86_400);
  const h = Math.floor((s % 86_400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  if (d > 0) return `${d}d ${h}h`;
  if (h > 0) return `${h}h ${m}m`;
  if (m > 0) return `${m}m`;
  return `${s}s`;
}

/** "1 dead letter", "3 dead letters". */
export function plural(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

/** A JSON body on one line (the API's are already; a pretty-printed one is folded). */
export function oneLine(text: string): string {
  // A raw newline can only stand between tokens (JSON strings escape theirs), so this is exact.
  return text.trim().replace(/\r?\n\s*/g, "");
}

/** Pretty JSON; numbers parsed exactly (http.ts) come out as they were sent. */
export function prettyJson(value: unknown): string {
  return JSON.stringify(value, null, 2) ?? "null";
}

/** An argument as a POSIX shell would need it, so a suggested command can be pasted as is. */
export function shellQuote(arg: string): string {
  return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", `'\\''`)}'`;
}

/** How the operator ran the CLI (`npm run ops --`, or `jobfence ops` from the package): what its suggestions start with. */
export function programOf(io: { readonly program?: string }): string {
  return io.program ?? PROGRAM;
}

/** A command line the operator can paste: `npm run ops -- dead-letters …`. */
export function suggest(args: readonly string[], program: string = PROGRAM): string {
  return [program, "dead-letters", ...args.map(shellQuote)].join(" ");
}
