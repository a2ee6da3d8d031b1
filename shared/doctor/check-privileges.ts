/**
 * Privileges outside what the committed description of `core` lists, checked without a list of
 * consumers or their tables:
 *
 * - the shared roles (ops, cleanup, the base consumer role) hold nothing outside `core`;
 * - logins hold nothing directly, only through their group role;
 * - PUBLIC holds nothing on the tables of a consumer's schema, nor (but for `public`) the schema;
 * - only the migrator creates objects: no consumer's role or PUBLIC holds CREATE on a schema, and
 *   no jobfence role, login or PUBLIC holds CREATE on the database.
 *
 * (A privilege in `core` to anyone, a consumer's role included, is a difference from the
 * description: `check-catalog.ts`; a consumer's role's privileges elsewhere are checked against what
 * its consumer declares: `check-declared-data.ts`.) Pure.
 */
import type { CatalogPrivilege, CatalogSnapshot } from "../db/catalog.ts";
import { sqlIdentifier } from "../db/catalog-description.ts";
import { CONSUMER_BASE_ROLE } from "../db/queries/provision-login.ts";
import { CHECK, type Finding } from "./findings.ts";
import { classifyRoles } from "./role-kinds.ts";

/** The statement that revokes `p`. */
export function revokeStatement(p: CatalogPrivilege): string {
  const grantee = sqlIdentifier(p.grantee);
  switch (p.target) {
    case "column":
      return `REVOKE ${p.privilege} (${p.column}) ON ${p.object} FROM ${grantee}`;
    case "table":
      return `REVOKE ${p.privilege} ON ${p.object} FROM ${grantee}`;
    default:
      return `REVOKE ${p.privilege} ON ${p.target.toUpperCase()} ${p.object} FROM ${grantee}`;
  }
}

/** Where a privilege is, as a finding names it. */
function whereOf(p: CatalogPrivilege): string {
  return p.target === "column" ? `column ${p.object}.${p.column}` : `${p.target} ${p.object}`;
}

function holds(p: CatalogPrivilege): string {
  return `${p.grantee} holds ${p.privilege}${p.grantable ? " WITH GRANT OPTION" : ""}`;
}

/** Every privilege finding of `snapshot` outside `core`'s description. */
export function checkPrivileges(snapshot: CatalogSnapshot): Finding[] {
  const kinds = classifyRoles(snapshot);
  const findings: Finding[] = [];
  const inSchemas = snapshot.privileges.filter((p) => p.target !== "database");

  for (const p of inSchemas) {
    if (p.schema !== "core" && kinds.shared.has(p.grantee)) {
      findings.push({
        check: CHECK.sharedRoleOutsideCore,
        where: whereOf(p),
        what:
          `${holds(p)} outside core: a shared role's privileges are in core only, and every login in it ` +
          `inherits this one${p.grantee === CONSUMER_BASE_ROLE ? " (every consumer's, for the base role)" : ""}`,
        todo: `${revokeStatement(p)}; a consumer's tables are granted to that consumer's own role`,
      });
    }
    if (kinds.logins.has(p.grantee)) {
      findings.push({
        check: CHECK.loginPrivileges,
        where: whereOf(p),
        what: `${holds(p)} directly: a login holds only what its group role grants`,
        todo: `${revokeStatement(p)}; grant what its function needs to the group role, in a migration`,
      });
    }
  }

  // A consumer's schema: one where a consumer's role holds anything.
  const consumerSchemas = new Set(
    inSchemas.filter((p) => p.schema !== "core" && kinds.consumerRoles.has(p.grantee)).map((p) => p.schema),
  );
  for (const p of inSchemas) {
    if (p.grantee !== "PUBLIC" || !consumerSchemas.has(p.schema)) continue;
    const onTable = p.target === "table" || p.target === "column" || p.target === "sequence";
    const onSchema = p.target === "schema" && p.schema !== "public";
    if (!onTable && !onSchema) continue;
    findings.push({
      check: CHECK.publicPrivileges,
      where: whereOf(p),
      what: `${holds(p)} in ${p.schema}, a consumer's schema: every role, each other consumer's included, has it`,
      todo: `${revokeStatement(p)}; a consumer's migrations grant its tables to its own role only`,
    });
  }

  for (const p of snapshot.privileges) {
    if (p.privilege !== "CREATE") continue;
    const onDatabase =
      p.target === "database" &&
      (p.grantee === "PUBLIC" || kinds.groupRoles.has(p.grantee) || kinds.logins.has(p.grantee));
    // CREATE in core is a difference from the description, a shared role's or a login's elsewhere is above.
    const onSchema =
      p.target === "schema" &&
      p.schema !== "core" &&
      (p.grantee === "PUBLIC" || kinds.consumerRoles.has(p.grantee));
    if (!onDatabase && !onSchema) continue;
    findings.push({
      check: CHECK.createPrivileges,
      where: whereOf(p),
      what: `${holds(p)}: it may create ${onDatabase ? "schemas" : "objects"} here, and only the migrator runs DDL`,
      todo: revokeStatement(p),
    });
  }
  return findings;
}
