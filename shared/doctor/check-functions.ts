/**
 * SECURITY DEFINER functions, in every schema: each pins its `search_path`, with pg_temp last (else
 * a caller's path, or a temporary table the caller created, decides what the owner's rights run), and PUBLIC may not execute
 * one (a function created without `REVOKE ALL … FROM PUBLIC` may be called by every role). Pure.
 */
import type { CatalogSnapshot } from "../db/catalog.ts";
import { CHECK, type Finding } from "./findings.ts";

/** Every definer-function finding of `snapshot`. */
export function checkDefinerFunctions(snapshot: CatalogSnapshot): Finding[] {
  const findings: Finding[] = [];
  const definers = snapshot.functions.filter((f) => f.securityDefiner);
  for (const f of definers) {
    const path = f.settings.find((setting) => setting.startsWith("search_path="));
    const todo = `ALTER FUNCTION ${f.signature} SET search_path = pg_catalog, ${f.schema}, pg_temp (and in the migration that creates it)`;
    if (path === undefined) {
      findings.push({
        check: CHECK.definerSearchPath,
        where: `function ${f.signature}`,
        what: `runs with ${f.owner}'s rights (SECURITY DEFINER) under the caller's search_path`,
        todo,
      });
    } else if (!/(^|[=,\s])pg_temp$/.test(path.trim())) {
      // Unless pg_temp is named, it is searched first for tables: a caller's temporary table named
      // like one the function reads would stand in for it, with the owner's rights.
      findings.push({
        check: CHECK.definerSearchPath,
        where: `function ${f.signature}`,
        what: `runs with ${f.owner}'s rights (SECURITY DEFINER) and its ${path} does not name pg_temp last, so a caller's temporary table can shadow the tables it reads`,
        todo,
      });
    }
  }
  const signatures = new Set(definers.map((f) => f.signature));
  for (const p of snapshot.privileges) {
    if (p.target !== "function" || p.grantee !== "PUBLIC" || !signatures.has(p.object)) continue;
    findings.push({
      check: CHECK.definerPublicExecute,
      where: `function ${p.object}`,
      what: "runs with its owner's rights (SECURITY DEFINER) and every role may execute it (EXECUTE to PUBLIC)",
      todo: `REVOKE ALL ON FUNCTION ${p.object} FROM PUBLIC, and grant EXECUTE to the one role that needs it`,
    });
  }
  return findings;
}
