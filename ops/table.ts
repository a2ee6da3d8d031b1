/**
 * The one table renderer: every command that prints rows (lists, counts, samples, a dead
 * letter's fields, its attempts) prints them through this, so all output aligns and escapes alike.
 */
import { clean, truncate, width } from "./text.ts";

export interface Column {
  readonly header: string;
  /** Longer cells are cut with "…" (tables never wrap). */
  readonly max?: number;
  readonly align?: "left" | "right";
}

export interface TableOptions {
  /** Print the header row. @default true */
  readonly header?: boolean;
  /** Put before every line, e.g. "  " for a table under a heading. @default "" */
  readonly indent?: string;
}

/**
 * Aligned columns, two spaces apart, no trailing spaces. Every cell goes through {@link clean},
 * so a value from a dead letter cannot carry control characters into the terminal.
 */
export function table(
  columns: readonly Column[],
  rows: readonly (readonly unknown[])[],
  options: TableOptions = {},
): string[] {
  const cells = rows.map((row) =>
    columns.map((column, i) => {
      const text = clean(row[i]);
      return column.max === undefined ? text : truncate(text, column.max);
    }),
  );
  const showHeader = options.header ?? true;
  const widths = columns.map((column, i) =>
    Math.max(showHeader ? width(column.header) : 0, ...cells.map((row) => width(row[i] ?? ""))),
  );
  const indent = options.indent ?? "";
  const line = (values: readonly string[]) =>
    indent +
    values
      .map((value, i) => {
        const pad = " ".repeat(Math.max(0, (widths[i] ?? 0) - width(value)));
        return columns[i]?.align === "right" ? pad + value : value + pad;
      })
      .join("  ")
      .trimEnd();
  return [...(showHeader ? [line(columns.map((c) => c.header))] : []), ...cells.map(line)];
}
