/**
 * Ownership: the migrator owns every object in `core` (an owner may alter, drop and grant what it
 * owns, and bypasses row-level security on it), and no jobfence role or login owns an object
 * anywhere in the database. Pure.
 */
import type { CatalogSnapshot } from "../db/catalog.ts";
import { sqlIdentifier } from "../db/catalog-description.ts";
import { CHECK, type Finding } from "./findings.ts";
import { classifyRoles } from "./role-kinds.ts";

/** Every ownership finding of `snapshot`. */
export function checkOwnership(snapshot: CatalogSnapshot): Finding[] {
  const kinds = classifyRoles(snapshot);
  const migrator = kinds.migrator;
  const objects = [
    ...snapshot.schemas.map((s) => ({ schema: s.name, kind: "SCHEMA", name: s.name, owner: s.owner })),
    ...snapshot.relations.map((r) => ({
      schema: r.schema,
      kind: r.kind === "sequence" ? "SEQUENCE" : r.kind === "view" ? "VIEW" : "TABLE",
      name: r.name,
      owner: r.owner,
    })),
    ...snapshot.functions.map((f) => ({
      schema: f.schema,
      kind: "FUNCTION",
      name: f.signature,
      owner: f.owner,
    })),
  ];
  const findings: Finding[] = [];
  for (const o of objects) {
    const jobfenceOwner = kinds.groupRoles.has(o.owner) || kinds.logins.has(o.owner);
    const notMigrators = o.schema === "core" && migrator !== undefined && o.owner !== migrator;
    if (!jobfenceOwner && !notMigrators) continue;
    findings.push({
      check: CHECK.ownership,
      where: `${o.kind.toLowerCase()} ${o.name}`,
      what: jobfenceOwner
        ? `is owned by ${o.owner}, a jobfence role or login: an owner may alter, drop and grant it`
        : `is owned by ${o.owner}, not by the migrator ${migrator} that owns the rest of core`,
      todo: `ALTER ${o.kind} ${o.name} OWNER TO ${sqlIdentifier(migrator ?? "<the migrator>")}`,
    });
  }
  return findings;
}
