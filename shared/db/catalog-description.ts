/**
 * The description of the schema `core` that the migrations create: its definitions, definer
 * functions, row-level security and policies, every privilege granted in it, and the attributes of
 * the shared group roles, as sections of one-line facts. Pure: a catalog snapshot in
 * (`catalog.ts`), text out and back.
 *
 * The committed `core-catalog.txt` beside this module is that description for a freshly migrated
 * database: the schema snapshot test proves it equal to one (on PostgreSQL 15 and 18) and
 * `npm run schema:snapshot` rewrites it after an intended change, so it is reviewed with the
 * migration. The doctor compares a live database's description with it.
 */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type {
  CatalogFunction,
  CatalogPolicy,
  CatalogPrivilege,
  CatalogRelation,
  CatalogRole,
  CatalogSnapshot,
} from "./catalog.ts";
import { CONSUMER_BASE_ROLE, SHARED_ROLES } from "./queries/provision-login.ts";

/** The sections, in the order the text lists them. */
export const CATALOG_SECTIONS = [
  "columns",
  "constraints",
  "indexes",
  "triggers",
  "functions",
  "security definer functions",
  "row level security",
  "policies",
  "table privileges",
  "column privileges",
  "function privileges",
  "schema privileges",
  "roles",
] as const;
export type CatalogSection = (typeof CATALOG_SECTIONS)[number];

/** One-line facts by section. */
export type CatalogDescription = Readonly<Record<CatalogSection, readonly string[]>>;

/** The roles whose attributes the description holds: every deployment's, unlike consumers' roles. */
export const DESCRIBED_ROLES: readonly string[] = [CONSUMER_BASE_ROLE, ...SHARED_ROLES];

/** The committed description of a freshly migrated `core`. */
export const EXPECTED_CORE_CATALOG_FILE = fileURLToPath(new URL("./core-catalog.txt", import.meta.url));

/** Code-point order: the same on every machine, whatever the database's collation. */
function byCodePoint(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** A role name as SQL writes it: plain when it can be, else double-quoted. */
export function sqlIdentifier(name: string): string {
  return name === "PUBLIC" || /^[a-z_][a-z0-9_$]*$/.test(name) ? name : `"${name.replaceAll('"', '""')}"`;
}

/**
 * A privilege as one line: `<object> <PRIVILEGE> TO <grantee>[ WITH GRANT OPTION]`, the object a
 * column's as `core.dead_letters (status)`.
 */
export function privilegeLine(p: CatalogPrivilege): string {
  const object = p.column === undefined ? p.object : `${p.object} (${p.column})`;
  return `${object} ${p.privilege} TO ${sqlIdentifier(p.grantee)}${p.grantable ? " WITH GRANT OPTION" : ""}`;
}

/** The parts of a {@link privilegeLine}; undefined for a line of another shape. */
export function parsePrivilegeLine(
  line: string,
): { object: string; column?: string; privilege: string; grantee: string; grantable: boolean } | undefined {
  const match = /^(.+) (\S+) TO ("(?:[^"]|"")*"|\S+)( WITH GRANT OPTION)?$/.exec(line);
  if (!match) return undefined;
  const [, target = "", privilege = "", grantee = "", grantable] = match;
  const column = /^(\S+) \((.+)\)$/.exec(target);
  return {
    object: column ? (column[1] as string) : target,
    ...(column ? { column: column[2] as string } : {}),
    privilege,
    grantee,
    grantable: grantable !== undefined,
  };
}

/** The description of `core` in `snapshot`. */
export function describeCore(snapshot: CatalogSnapshot): CatalogDescription {
  const core = <T extends { readonly schema: string }>(rows: readonly T[]) =>
    rows.filter((row) => row.schema === "core");
  const sorted = (lines: string[]) => lines.sort(byCodePoint);
  const privileges = core(snapshot.privileges);
  const ofTarget = (...targets: CatalogPrivilege["target"][]) =>
    sorted(privileges.filter((p) => targets.includes(p.target)).map(privilegeLine));
  return {
    ...snapshot.definitions,
    "security definer functions": sorted(
      core(snapshot.functions)
        .filter((f) => f.securityDefiner)
        .map(definerLine),
    ),
    "row level security": sorted(
      core(snapshot.relations)
        .filter((r) => r.rowSecurity || r.forceRowSecurity)
        .map(rowSecurityLine),
    ),
    policies: sorted(snapshot.policies.filter((p) => p.table.startsWith("core.")).map(policyLine)),
    "table privileges": ofTarget("table", "sequence"),
    "column privileges": ofTarget("column"),
    "function privileges": ofTarget("function"),
    "schema privileges": ofTarget("schema"),
    roles: sorted(snapshot.roles.filter((r) => DESCRIBED_ROLES.includes(r.name)).map(roleLine)),
  };
}

// One line per fact, as both the core description and a consumer's (consumer-catalog.ts) print it.

/** A SECURITY DEFINER function and the settings it pins. */
export function definerLine(f: CatalogFunction): string {
  return `${f.signature}: ${f.settings.length > 0 ? f.settings.map((s) => `SET ${s}`).join("; ") : "no SET"}`;
}

/** A table's row-level security. */
export function rowSecurityLine(r: CatalogRelation): string {
  return `${r.name}: ${[r.rowSecurity ? "ENABLED" : "", r.forceRowSecurity ? "FORCED" : ""].filter(Boolean).join(", ")}`;
}

/** A row-level security policy. */
export function policyLine(p: CatalogPolicy): string {
  return (
    `${p.table} ${p.name}: ${p.permissive ? "PERMISSIVE" : "RESTRICTIVE"} FOR ${p.command} ` +
    `TO ${p.roles.map(sqlIdentifier).join(", ")}` +
    (p.using === null ? "" : ` USING ${p.using}`) +
    (p.withCheck === null ? "" : ` WITH CHECK ${p.withCheck}`)
  );
}

/** A role's attributes. */
export function roleLine(r: CatalogRole): string {
  const flag = (on: boolean) => String(on);
  return (
    `${r.name} login=${flag(r.canLogin)} super=${flag(r.superuser)} createdb=${flag(r.createDb)} ` +
    `createrole=${flag(r.createRole)} replication=${flag(r.replication)} bypassrls=${flag(r.bypassRls)}`
  );
}

/**
 * What identifies a fact across a change, for the sections where a fact can change rather than only
 * appear or disappear: a column's name, a constraint's, an index's, a trigger's, a function's
 * signature, a table's row-level security, a policy's table and name, a role's name. Privileges
 * have none: each is a fact of its own.
 */
export function factKey(section: CatalogSection, line: string): string | undefined {
  const upTo = (separator: string, keep = 0) => {
    const at = line.indexOf(separator);
    return at < 0 ? undefined : line.slice(0, at + keep);
  };
  switch (section) {
    case "columns":
    case "roles":
      return upTo(" ");
    case "constraints":
    case "row level security":
    case "policies":
      return upTo(": ");
    case "indexes":
      return /^CREATE (?:UNIQUE )?INDEX (\S+) /.exec(line)?.[1];
    case "triggers":
      return /^CREATE (?:CONSTRAINT )?TRIGGER (\S+) /.exec(line)?.[1];
    case "functions":
      return line.lastIndexOf(" ") < 0 ? undefined : line.slice(0, line.lastIndexOf(" "));
    case "security definer functions":
      return upTo("): ", 1);
    default:
      return undefined;
  }
}

/** The description as the committed text: `## <section>`, its lines, a blank line. */
export function renderCatalogDescription(description: CatalogDescription): string {
  return CATALOG_SECTIONS.flatMap((section) => [`## ${section}`, ...description[section], ""]).join("\n");
}

/** Reads the committed text back; throws on a section it does not know. */
export function parseCatalogDescription(text: string): CatalogDescription {
  return parseSections(text, CATALOG_SECTIONS, "catalog description");
}

/**
 * The `## <section>` blocks of a description's text (this one's, or a consumer's in
 * consumer-catalog.ts), every section of `known` present; throws on another section, or a line
 * before the first, naming `what` was read.
 */
export function parseSections<S extends string>(
  text: string,
  known: readonly S[],
  what: string,
): Record<S, string[]> {
  const sections = Object.fromEntries(known.map((s) => [s, [] as string[]])) as Record<S, string[]>;
  let current: S | undefined;
  for (const line of text.split("\n")) {
    if (line.startsWith("## ")) {
      const title = line.slice(3);
      if (!(known as readonly string[]).includes(title)) {
        throw new Error(`${what}: unknown section "${title}"`);
      }
      current = title as S;
    } else if (line !== "") {
      if (current === undefined) throw new Error(`${what}: a line before any section: ${line}`);
      sections[current].push(line);
    }
  }
  return sections;
}

/** The committed description of a freshly migrated `core` (`core-catalog.txt`). */
export function loadExpectedCoreCatalog(file: string = EXPECTED_CORE_CATALOG_FILE): CatalogDescription {
  return parseCatalogDescription(readFileSync(file, "utf8"));
}
