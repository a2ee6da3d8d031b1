/**
 * `core` against the committed description of what the migrations create: every fact the live
 * database lacks, has besides, or has changed (a fact with the same key, another text), each
 * with what to do. Privileges to any role, RLS, policies, definer settings, the shared roles'
 * attributes, and the definitions themselves. Pure.
 */
import {
  CATALOG_SECTIONS,
  type CatalogDescription,
  type CatalogSection,
  factKey,
  parsePrivilegeLine,
} from "../db/catalog-description.ts";
import { CHECK, type Finding } from "./findings.ts";

const PRIVILEGE_SECTIONS: ReadonlySet<CatalogSection> = new Set([
  "table privileges",
  "column privileges",
  "function privileges",
  "schema privileges",
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

/** The GRANT or REVOKE of a privilege line, when it has that shape. */
function privilegeStatement(
  section: CatalogSection,
  line: string,
  verb: "GRANT" | "REVOKE",
): string | undefined {
  const p = parsePrivilegeLine(line);
  if (!p) return undefined;
  const kind =
    section === "function privileges" ? "FUNCTION " : section === "schema privileges" ? "SCHEMA " : "";
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

function missing(section: CatalogSection, line: string): Finding {
  const where = `core ${section}`;
  if (PRIVILEGE_SECTIONS.has(section)) {
    return {
      check: CHECK.coreCatalog,
      where,
      what: `the migrations grant ${line}; the database does not`,
      todo: privilegeStatement(section, line, "GRANT") ?? MIGRATION_FIX,
    };
  }
  if (section === "row level security") {
    const table = line.slice(0, line.indexOf(":"));
    return {
      check: CHECK.coreCatalog,
      where,
      what: `row-level security is off on ${table}: every role with a privilege on it reaches every row`,
      todo: `ALTER TABLE ${table} ENABLE ROW LEVEL SECURITY`,
    };
  }
  return {
    check: CHECK.coreCatalog,
    where,
    what: `missing: ${line}`,
    todo:
      section === "policies" ? `re-create the policy as its migration does (CREATE POLICY …)` : MIGRATION_FIX,
  };
}

function extra(section: CatalogSection, line: string): Finding {
  const where = `core ${section}`;
  if (PRIVILEGE_SECTIONS.has(section)) {
    const revoke = privilegeStatement(section, line, "REVOKE");
    return {
      check: CHECK.coreCatalog,
      where,
      what: `${line}: not granted by the migrations`,
      todo: revoke ? `${revoke}; ${NEW_MIGRATION}` : NEW_MIGRATION,
    };
  }
  const todo: Partial<Record<CatalogSection, string>> = {
    policies: `DROP POLICY ${line.slice(line.indexOf(" ") + 1, line.indexOf(":"))} ON ${line.slice(0, line.indexOf(" "))}; ${NEW_MIGRATION}`,
    functions: `DROP FUNCTION ${line.slice(0, line.lastIndexOf(" "))}; ${NEW_MIGRATION}`,
  };
  return {
    check: CHECK.coreCatalog,
    where,
    what: `not made by the migrations: ${line}`,
    todo: todo[section] ?? `undo it; ${NEW_MIGRATION}`,
  };
}

function changed(section: CatalogSection, expected: string, actual: string): Finding {
  const where = `core ${section}`;
  const what = `expected ${expected}, found ${actual}`;
  const todo: Partial<Record<CatalogSection, string>> = {
    roles: alterRole(expected),
    functions:
      "the function was replaced by hand: re-create it from its latest migration (CREATE OR REPLACE FUNCTION …)",
    "security definer functions": alterFunction(expected),
    "row level security": `ALTER TABLE ${expected.slice(0, expected.indexOf(":"))} ${expected.includes("FORCED") ? "FORCE" : "NO FORCE"} ROW LEVEL SECURITY`,
    policies: "re-create the policy as its migration does (DROP POLICY, then CREATE POLICY …)",
  };
  return { check: CHECK.coreCatalog, where, what, todo: todo[section] ?? MIGRATION_FIX };
}

/** Every difference between the `expected` description of `core` and the `actual` one. */
export function checkCoreCatalog(expected: CatalogDescription, actual: CatalogDescription): Finding[] {
  const findings: Finding[] = [];
  for (const section of CATALOG_SECTIONS) {
    const want = new Set(expected[section]);
    const have = new Set(actual[section]);
    const lacking = [...want].filter((line) => !have.has(line));
    const besides = [...have].filter((line) => !want.has(line));
    // A fact whose key is on both sides changed rather than disappeared and appeared.
    const besidesByKey = new Map<string, string>();
    for (const line of besides) {
      const key = factKey(section, line);
      if (key !== undefined) besidesByKey.set(key, line);
    }
    const paired = new Set<string>();
    for (const line of lacking) {
      const key = factKey(section, line);
      const now = key === undefined ? undefined : besidesByKey.get(key);
      if (now !== undefined && !paired.has(now)) {
        paired.add(now);
        findings.push(changed(section, line, now));
      } else {
        findings.push(missing(section, line));
      }
    }
    for (const line of besides) if (!paired.has(line)) findings.push(extra(section, line));
  }
  return findings;
}
