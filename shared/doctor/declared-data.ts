/**
 * What a consumer declares it works on outside `core`: the service's own tables (made by the
 * service's migration tool, not by jobfence), the privileges its group role is granted on each,
 * and whether other consumers share them. The doctor checks the database against it
 * (check-declared-data.ts): a privilege nobody declared, a declared table that is missing, a
 * declared privilege the role lacks, and sharing that a holder did not declare.
 *
 * Declared in the consumer's definition (`data`), so a service's own deployment and the CDK
 * construct that takes the definition carry it with no registry. Validated here, pure.
 */
import { z } from "zod";
import { CONSUMER_NAME } from "../config/fields.ts";
import { ConfigurationError } from "../errors/configuration.ts";

/** The privileges a consumer's role may be declared to hold on a table, view or sequence. */
export const RELATION_PRIVILEGES = [
  "SELECT",
  "INSERT",
  "UPDATE",
  "DELETE",
  "TRUNCATE",
  "REFERENCES",
  "TRIGGER",
  /** Sequences: nextval and currval (a `serial` column's INSERT needs it). */
  "USAGE",
] as const;
export type RelationPrivilege = (typeof RELATION_PRIVILEGES)[number];

/**
 * Who else may hold privileges on a declared table: `true` for any consumer (declared shared),
 * or the names of the consumers that may.
 * @default not shared: no other consumer's role may hold a privilege on it
 */
export type Sharing = true | readonly string[];

/** A table (or view, or sequence) the consumer works on. */
export interface TableUse {
  /** What its role is granted on it; each must be held (the service's migrations grant it). */
  readonly privileges: readonly RelationPrivilege[];
  /** @default not shared */
  readonly shared?: Sharing;
}

/** A schema the consumer works on whole: whatever its role is granted in it is declared. */
export interface SchemaUse {
  /** @default not shared */
  readonly shared?: Sharing;
}

/** The `data` of a consumer's definition. */
export interface DataDeclaration {
  /** By schema-qualified name (`billing.invoices`). @default none */
  readonly tables?: Readonly<Record<string, TableUse>>;
  /** By name (`billing`): every object in it, functions included. @default none */
  readonly schemas?: Readonly<Record<string, SchemaUse>>;
}

/** A consumer's declaration, as the doctor is given it. */
export interface DeclaredConsumerData {
  readonly consumer: string;
  readonly data: DataDeclaration;
}

/** An unquoted PostgreSQL identifier: what the catalog read names an object by (`billing.invoices`). */
const IDENTIFIER = /^[a-z_][a-z0-9_$]{0,62}$/;
const JOBFENCE_SCHEMAS = ["core"];

const consumerName = z
  .string()
  .regex(CONSUMER_NAME, "must be a consumer name (lowercase letters, digits, dashes)");
const sharing = z.union([
  z.literal(true),
  z.array(consumerName).min(1, "name at least one consumer, or give true"),
]);
/** Why `name` cannot be a declared schema's name, or undefined. */
function schemaNameProblem(name: string): string | undefined {
  if (!IDENTIFIER.test(name)) return "must be a lowercase unquoted schema name";
  return JOBFENCE_SCHEMAS.includes(name)
    ? "core is jobfence's own: its privileges are not declared"
    : undefined;
}

/** Why `name` cannot be a declared table's name, or undefined. */
function tableNameProblem(name: string): string | undefined {
  const parts = name.split(".");
  if (parts.length !== 2) return "must be schema-qualified: schema.table";
  if (!parts.every((part) => IDENTIFIER.test(part)))
    return "must be lowercase unquoted identifiers: schema.table";
  return JOBFENCE_SCHEMAS.includes(parts[0] as string)
    ? "core is jobfence's own: its privileges are not declared"
    : undefined;
}

const tableUse = z
  .object({
    privileges: z
      .array(z.enum(RELATION_PRIVILEGES))
      .min(1, "name at least one privilege")
      .refine((p) => new Set(p).size === p.length, "names a privilege twice"),
    shared: sharing.optional(),
  })
  .strict();
const schemaUse = z.object({ shared: sharing.optional() }).strict();

/** The schema of a definition's `data`, also used for the doctor function's JSON. */
export const dataDeclarationSchema = z
  .object({
    tables: z.record(z.string(), tableUse).optional(),
    schemas: z.record(z.string(), schemaUse).optional(),
  })
  .strict()
  .superRefine((data, ctx) => {
    for (const { path, message } of keyProblems(data)) ctx.addIssue({ code: "custom", path, message });
  });

/** The problems of the tables' and schemas' names of `data` (an object, or anything). */
function keyProblems(data: unknown): { path: string[]; message: string }[] {
  const keys = (field: string) => {
    const value =
      typeof data === "object" && data !== null ? (data as Record<string, unknown>)[field] : undefined;
    return typeof value === "object" && value !== null ? Object.keys(value) : [];
  };
  return [
    ...keys("tables").map((t) => ({ path: ["tables", t], message: tableNameProblem(t) })),
    ...keys("schemas").map((n) => ({ path: ["schemas", n], message: schemaNameProblem(n) })),
  ].filter((p): p is { path: string[]; message: string } => p.message !== undefined);
}

/** The schema of a list of consumers' declarations (the doctor function's environment). */
export const declaredConsumerDataSchema = z.array(
  z.object({ consumer: consumerName, data: dataDeclarationSchema }).strict(),
);

/** Every problem of `consumer`'s `data`, one line each; empty when it is sound. Pure. */
export function dataDeclarationProblems(consumer: string, data: unknown): string[] {
  const parsed = dataDeclarationSchema.safeParse(data);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => ({ path: i.path, message: i.message }));
    // The names are checked after the shape: when the shape is refused, check them here.
    if (!parsed.error.issues.some((i) => i.code === "custom")) issues.push(...keyProblems(data));
    return issues.map((i) => `consumer ${consumer}'s data${pathOf(i.path)}: ${i.message}`);
  }
  const problems: string[] = [];
  const schemas = Object.keys(parsed.data.schemas ?? {});
  for (const [table, use] of Object.entries(parsed.data.tables ?? {})) {
    if (schemas.includes(table.split(".")[0] as string)) {
      problems.push(`consumer ${consumer}'s data declares table ${table} and its whole schema: keep one`);
    }
    if (Array.isArray(use.shared) && use.shared.includes(consumer)) {
      problems.push(`consumer ${consumer}'s data shares ${table} with itself: name the other consumers`);
    }
  }
  return problems;
}

/** Throws one ConfigurationError listing every problem of `consumer`'s `data`. */
export function assertDataDeclaration(consumer: string, data: unknown): DataDeclaration {
  const problems = dataDeclarationProblems(consumer, data);
  if (problems.length > 0) throw new ConfigurationError(`consumer ${consumer} data`, problems);
  return data as DataDeclaration;
}

function pathOf(path: readonly PropertyKey[]): string {
  return path.map((p) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`)).join("");
}

/** The schemas `data` names: its tables' and its whole ones, sorted. */
export function declaredSchemas(data: DataDeclaration): string[] {
  const names = [
    ...Object.keys(data.tables ?? {}).map((t) => t.split(".")[0] as string),
    ...Object.keys(data.schemas ?? {}),
  ];
  return [...new Set(names)].sort();
}
