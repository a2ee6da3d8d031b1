/**
 * `core` against the committed description of what the migrations create: every fact the live
 * database lacks, has besides, or has changed (a fact with the same key, another text), each
 * with what to do. Privileges to any role, RLS, policies, definer settings, the shared roles'
 * attributes, and the definitions themselves. Each registered consumer's schemas likewise,
 * against its committed `schema.txt` (shared/db/consumer-catalog.ts), with the same comparison.
 * Pure.
 */
import {
  CATALOG_SECTIONS,
  type CatalogDescription,
  type CatalogSection,
  factKey,
  parsePrivilegeLine,
} from "../db/catalog-description.ts";
import {
  CONSUMER_SCHEMA_SECTIONS,
  type ConsumerSchemaDescription,
  type ConsumerSchemaSection,
  consumerFactKey,
} from "../db/consumer-catalog.ts";
import { CHECK, type CheckId, type Finding } from "./findings.ts";

/** A section of either description. */
type Section = CatalogSection | ConsumerSchemaSection;

const PRIVILEGE_SECTIONS: ReadonlySet<Section> = new Set([
  "table privileges",
  "column privileges",
  "function privileges",
  "schema privileges",
  "role privileges elsewhere",
]);

/** Each role attribute of the description's `roles` lines, as ALTER ROLE writes it. */
const ROLE_KEYWORDS: Readonly<Record<string, string>> = {
  login: "LOGIN",
  super: "SUPERUSER",
  createdb: "CREATEDB",
  createrole: "CREATEROLE",
  replication: "REPLICATION",
  bypassrls: "BYPASSRLS",
};

const MIGRATION_FIX = "restore it as the migrations made it (see shared/db/migrations/)";
const NEW_MIGRATION =
  "if it is wanted, make it a migration and refresh the description (npm run schema:snapshot)";
const RUN_MIGRATIONS =
  "run the migrations: a deploy runs them, by hand `jobfence migrate` (`npm run migrate` in the jobfence repository)";

/** Whose description is compared, as the findings name it. */
interface Subject {
  readonly check: CheckId;
  /** What each finding's `where` starts with: `core`, `consumer award-points`. */
  readonly where: string;
  /** Who makes what the description holds: `the migrations`, `the migrations of award-points`. */
  readonly by: string;
  /** What to do about a fact changed or gone, when nothing more precise applies. */
  readonly fix: string;
  /** What to do about a fact the migrations do not make, after undoing it. */
  readonly newMigration: string;
}

const CORE: Subject = {
  check: CHECK.coreCatalog,
  where: "core",
  by: "the migrations",
  fix: MIGRATION_FIX,
  newMigration: NEW_MIGRATION,
};

function consumerSubject(consumer: string): Subject {
  return {
    check: CHECK.consumerSchema,
    where: `consumer ${consumer}`,
    by: `the migrations of ${consumer}`,
    fix: `restore it as the migrations of ${consumer} made it (see its migrations/ folder)`,
    newMigration: `if it is wanted, make it a migration of ${consumer} and refresh its description (npm run schema:snapshot)`,
  };
}

/** A consumer's `role` line naming a membership: its role and the role it is a member of. */
function membership(line: string): { member: string; of: string; admin: boolean } | undefined {
  const match = /^(\S+) member of (\S+)( WITH ADMIN OPTION)?$/.exec(line);
  return match
    ? { member: match[1] as string, of: match[2] as string, admin: match[3] !== undefined }
    : undefined;
}

/**
 * The GRANT or REVOKE of a privilege line, when it has that shape. Outside a consumer's schemas the
 * object's kind is read from its name: a signature is a function's, a bare name a schema's; the
 * database's privileges (named `DATABASE`, not by the environment's name) get none.
 */
function privilegeStatement(section: Section, line: string, verb: "GRANT" | "REVOKE"): string | undefined {
  const p = parsePrivilegeLine(line);
  if (!p) return undefined;
  let kind =
    section === "function privileges" ? "FUNCTION " : section === "schema privileges" ? "SCHEMA " : "";
  if (section === "role privileges elsewhere" && p.column === undefined) {
    if (p.object === "DATABASE") return undefined;
    kind = p.object.endsWith(")") ? "FUNCTION " : p.object.includes(".") ? "" : "SCHEMA ";
  }
  const what = p.column === undefined ? p.privilege : `${p.privilege} (${p.column})`;
  const preposition = verb === "GRANT" ? "TO" : "FROM";
  const option = verb === "GRANT" && p.grantable ? " WITH GRANT OPTION" : "";
  return `${verb} ${what} ON ${kind}${p.object} ${preposition} ${p.grantee}${option}`;
}

/** ALTER ROLE back to an expected `roles` line's attributes. */
function alterRole(expected: string): string {
  const [name = "", ...attributes] = expected.split(" ");
  const keywords = attributes.map((a) => {
    const [key = "", value] = a.split("=");
    const keyword = ROLE_KEYWORDS[key] ?? key.toUpperCase();
    return value === "true" ? keyword : `NO${keyword}`;
  });
  return `ALTER ROLE ${name} ${keywords.join(" ")}`;
}

/** ALTER FUNCTION back to an expected `security definer functions` line's settings. */
function alterFunction(expected: string): string {
  const at = expected.indexOf("): ");
  const settings = expected.slice(at + 3);
  const actions = settings === "no SET" ? "RESET ALL" : settings.split("; ").join(" ");
  return `ALTER FUNCTION ${expected.slice(0, at + 1)} ${actions}`;
}

function missing(subject: Subject, section: Section, line: string): Finding {
  const { check, by } = subject;
  const where = `${subject.where} ${section}`;
  if (PRIVILEGE_SECTIONS.has(section)) {
    return {
      check,
      where,
      what: `${by} grant ${line}; the database does not`,
      todo: privilegeStatement(section, line, "GRANT") ?? subject.fix,
    };
  }
  if (section === "row level security") {
    const table = line.slice(0, line.indexOf(":"));
    return {
      check,
      where,
      what: `row-level security is off on ${table}: every role with a privilege on it reaches every row`,
      todo: `ALTER TABLE ${table} ENABLE ROW LEVEL SECURITY`,
    };
  }
  const member = section === "role" ? membership(line) : undefined;
  const todo =
    section === "policies"
      ? `re-create the policy as its migration does (CREATE POLICY …)`
      : member
        ? `GRANT ${member.of} TO ${member.member}${member.admin ? " WITH ADMIN OPTION" : ""}`
        : section === "role"
          ? consumerFactKey("role", line) === "attributes"
            ? alterRole(line)
            : RUN_MIGRATIONS
          : subject.fix;
  return { check, where, what: `missing: ${line}`, todo };
}

function extra(subject: Subject, section: Section, line: string): Finding {
  const { check, by, newMigration } = subject;
  const where = `${subject.where} ${section}`;
  if (PRIVILEGE_SECTIONS.has(section)) {
    const revoke = privilegeStatement(section, line, "REVOKE");
    return {
      check,
      where,
      what: `${line}: not granted by ${by}`,
      todo: revoke ? `${revoke}; ${newMigration}` : newMigration,
    };
  }
  const member = section === "role" ? membership(line) : undefined;
  const todo: Partial<Record<Section, string>> = {
    policies: `DROP POLICY ${line.slice(line.indexOf(" ") + 1, line.indexOf(":"))} ON ${line.slice(0, line.indexOf(" "))}; ${newMigration}`,
    functions: `DROP FUNCTION ${line.slice(0, line.lastIndexOf(" "))}; ${newMigration}`,
    ...(member ? { role: `REVOKE ${member.of} FROM ${member.member}; ${newMigration}` } : {}),
  };
  return {
    check,
    where,
    what: `not made by ${by}: ${line}`,
    todo: todo[section] ?? `undo it; ${newMigration}`,
  };
}

function changed(subject: Subject, section: Section, expected: string, actual: string): Finding {
  const where = `${subject.where} ${section}`;
  const what = `expected ${expected}, found ${actual}`;
  const role =
    consumerFactKey("role", expected) === "attributes" && !actual.endsWith(" missing")
      ? alterRole(expected)
      : RUN_MIGRATIONS;
  const todo: Partial<Record<Section, string>> = {
    roles: alterRole(expected),
    role,
    functions:
      "the function was replaced by hand: re-create it from its latest migration (CREATE OR REPLACE FUNCTION …)",
    "security definer functions": alterFunction(expected),
    "row level security": `ALTER TABLE ${expected.slice(0, expected.indexOf(":"))} ${expected.includes("FORCED") ? "FORCE" : "NO FORCE"} ROW LEVEL SECURITY`,
    policies: "re-create the policy as its migration does (DROP POLICY, then CREATE POLICY …)",
  };
  return { check: subject.check, where, what, todo: todo[section] ?? subject.fix };
}

/** One difference between two descriptions. */
type Difference<S extends string> =
  | { readonly kind: "missing"; readonly section: S; readonly line: string }
  | { readonly kind: "extra"; readonly section: S; readonly line: string }
  | { readonly kind: "changed"; readonly section: S; readonly expected: string; readonly actual: string };

/**
 * Every difference between `expected` and `actual`, section by section: a line only expected is
 * missing, one only found is extra, unless `keyOf` gives both the same key: then the fact changed.
 */
function differences<S extends string>(
  sections: readonly S[],
  expected: Readonly<Record<S, readonly string[]>>,
  actual: Readonly<Record<S, readonly string[]>>,
  keyOf: (section: S, line: string) => string | undefined,
): Difference<S>[] {
  const found: Difference<S>[] = [];
  for (const section of sections) {
    const want = new Set(expected[section]);
    const have = new Set(actual[section]);
    const lacking = [...want].filter((line) => !have.has(line));
    const besides = [...have].filter((line) => !want.has(line));
    // A fact whose key is on both sides changed rather than disappeared and appeared.
    const besidesByKey = new Map<string, string>();
    for (const line of besides) {
      const key = keyOf(section, line);
      if (key !== undefined) besidesByKey.set(key, line);
    }
    const paired = new Set<string>();
    for (const line of lacking) {
      const key = keyOf(section, line);
      const now = key === undefined ? undefined : besidesByKey.get(key);
      if (now !== undefined && !paired.has(now)) {
        paired.add(now);
        found.push({ kind: "changed", section, expected: line, actual: now });
      } else {
        found.push({ kind: "missing", section, line });
      }
    }
    for (const line of besides) if (!paired.has(line)) found.push({ kind: "extra", section, line });
  }
  return found;
}

function findingOf(subject: Subject, d: Difference<Section>): Finding {
  switch (d.kind) {
    case "missing":
      return missing(subject, d.section, d.line);
    case "extra":
      return extra(subject, d.section, d.line);
    case "changed":
      return changed(subject, d.section, d.expected, d.actual);
  }
}

/** Every difference between the `expected` description of `core` and the `actual` one. */
export function checkCoreCatalog(expected: CatalogDescription, actual: CatalogDescription): Finding[] {
  return differences(CATALOG_SECTIONS, expected, actual, factKey).map((d) => findingOf(CORE, d));
}

/** A `role` line about the consumer's registration in core.consumer_roles. */
const isRegistration = (line: string) => consumerFactKey("role", line) === "registration";

/**
 * Every difference between a consumer's committed description (`expected`, its `schema.txt`) and
 * the live one (`actual`), each finding naming the consumer. With `registryReadable` false (the
 * doctor's role may not read core.consumer_roles) whether the role is registered is not compared.
 */
export function checkConsumerSchema(
  expected: ConsumerSchemaDescription,
  actual: ConsumerSchemaDescription,
  options: { readonly registryReadable?: boolean } = {},
): Finding[] {
  const comparable = (d: ConsumerSchemaDescription) =>
    options.registryReadable === false
      ? { ...d.sections, role: d.sections.role.filter((line) => !isRegistration(line)) }
      : d.sections;
  return differences(CONSUMER_SCHEMA_SECTIONS, comparable(expected), comparable(actual), consumerFactKey).map(
    (d) => findingOf(consumerSubject(actual.consumer), d),
  );
}

/** A registered consumer whose description was never committed: nothing to compare its schemas with. */
export function missingConsumerSchema(consumer: string, file: string): Finding {
  return {
    check: CHECK.consumerSchema,
    where: `consumer ${consumer}`,
    what: `has no committed description of its schema (${file}): its schemas are not compared`,
    todo: "run `npm run schema:snapshot`, which writes it, review it and commit it",
  };
}
