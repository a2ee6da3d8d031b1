/**
 * Privileges every consumer holds without being granted them, checked against what each declares:
 *
 * - PUBLIC's privileges outside `core` and PostgreSQL's schemas on a table, sequence, column or
 *   schema: every consumer role may use one (on a relation, when it may use its schema), so one a
 *   consumer does not declare is a finding, naming the consumers. (`USAGE` on schema `public` is
 *   PostgreSQL's default; EXECUTE on a function that is not SECURITY DEFINER runs with the caller's
 *   own rights, and a definer one executable by PUBLIC is `definer-public-execute`.)
 * - privileges on PostgreSQL's own objects (pg_catalog, information_schema) that initdb did not
 *   set (`pg_init_privs`), held by a consumer's role or PUBLIC, and any privilege on a large object
 *   (outside every schema, so no consumer declares one) held by a consumer's role or PUBLIC.
 *
 * Pure.
 */
import type { CatalogPrivilege, CatalogSnapshot } from "../db/catalog.ts";
import { revokeStatement } from "./check-privileges.ts";
import { type Consumers, declaredSharing } from "./consumer-coverage.ts";
import { CHECK, type Finding } from "./findings.ts";

const RELATIONS: ReadonlySet<CatalogPrivilege["target"]> = new Set(["table", "sequence", "column"]);

function whereOf(p: CatalogPrivilege): string {
  return p.target === "column" ? `column ${p.object}.${p.column}` : `${p.target} ${p.object}`;
}

/** Every finding of privileges consumers hold through PUBLIC, or on PostgreSQL's own objects. */
export function checkPublicReach(snapshot: CatalogSnapshot, consumers: Consumers): Finding[] {
  const roles = [...consumers.consumerOf].filter(([role]) => consumers.kinds.consumerRoles.has(role));
  const owners = new Map(snapshot.schemas.map((s) => [s.name, s.owner]));
  const usable = (role: string, schema: string) =>
    owners.get(schema) === role ||
    snapshot.privileges.some(
      (p) =>
        p.target === "schema" &&
        p.object === schema &&
        p.privilege === "USAGE" &&
        (p.grantee === role || p.grantee === "PUBLIC"),
    );
  // PUBLIC's privileges in a schema where a consumer's role holds anything are `public-privileges` already.
  const consumerSchemas = new Set(
    snapshot.privileges.filter((p) => consumers.kinds.consumerRoles.has(p.grantee)).map((p) => p.schema),
  );
  const findings: Finding[] = [];
  for (const p of snapshot.privileges) {
    if (p.grantee !== "PUBLIC" || p.schema === "core" || p.target === "database") continue;
    if (consumerSchemas.has(p.schema) && p.object !== "public") continue;
    // CREATE is `create-privileges`; USAGE on `public` is PostgreSQL's default.
    const onSchema = p.target === "schema" && p.privilege !== "CREATE" && p.object !== "public";
    if (!onSchema && !RELATIONS.has(p.target)) continue;
    const reaching = roles
      .filter(([role]) => onSchema || usable(role, p.schema))
      .filter(
        ([role, consumer]) =>
          declaredSharing(consumers.coverage.get(consumer), { ...p, grantee: role }) === null,
      )
      .map(([, consumer]) => consumer)
      .sort();
    if (reaching.length === 0) continue;
    findings.push({
      check: CHECK.publicReach,
      where: whereOf(p),
      what:
        `PUBLIC holds ${p.privilege}, so every role has it: consumer${reaching.length === 1 ? "" : "s"} ` +
        `${reaching.join(", ")} may use it and ${reaching.length === 1 ? "does" : "do"} not declare it`,
      todo: `${revokeStatement(p)}, granting it to the role of each consumer that needs it (declared in its data)`,
    });
  }
  const consumerRoles = new Map(roles);
  for (const p of snapshot.reach.systemPrivileges) {
    const consumer = consumerRoles.get(p.grantee);
    if (consumer === undefined && p.grantee !== "PUBLIC") continue;
    const who = consumer === undefined ? "every consumer (PUBLIC holds it)" : `consumer ${consumer}`;
    findings.push({
      check: CHECK.systemPrivileges,
      where: whereOf(p),
      what:
        p.target === "large object"
          ? `${p.grantee} holds ${p.privilege}: a large object is outside every schema, so ${who} reaches data no consumer declares`
          : `${p.grantee} holds ${p.privilege} on PostgreSQL's own ${p.target}, granted after the database was made: ${who} reaches the server's or other roles' data through it`,
      todo: revokeStatement(p),
    });
  }
  return findings;
}
