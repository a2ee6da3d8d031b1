/**
 * What a consumer reaches beyond its own privileges, which it must declare like them (the rule is
 * "a consumer reaches X through Y, which runs as Z"):
 *
 * - a SECURITY DEFINER function outside core its role may execute (granted to it, not to PUBLIC:
 *   that is `definer-public-execute`), owned by another role: it runs with its owner's rights, and
 *   what it touches cannot be read from the catalogs;
 * - a view (not `security_invoker`) its role holds privileges on, owned by another role: it reads
 *   its relations with its owner's rights, so each must be one the consumer may reach; and so for a
 *   rule on a table its role holds privileges on (its actions run as the table's owner);
 * - a SECURITY DEFINER trigger function, owned by another role, of a table its role may write (an
 *   ordinary trigger function runs with the writer's own rights, so reaches nothing more);
 * - a foreign key whose ON DELETE (ON UPDATE) action is CASCADE, SET NULL or SET DEFAULT, to a table
 *   its role may delete from (update): the action changes the referencing table's rows with that
 *   table's owner's rights, so that table must be one the consumer may reach;
 * - an inheritance child of a table its role may read or write (a query on a parent reads and
 *   changes its children with the parent's privileges only): each must be one the consumer may
 *   reach. A partition in its parent's schema is part of the table the service made.
 *
 * "May reach": in its own schema, in what it declares, and not in another consumer's own schema
 * unless that consumer declares it shared with it (consumer-coverage.ts). Objects in `core` are
 * jobfence's, described and checked by the catalog check. Pure.
 */
import type { CatalogSnapshot } from "../db/catalog.ts";
import { sqlIdentifier } from "../db/catalog-description.ts";
import type { CatalogForeignKey } from "../db/catalog-reach.ts";
import { type Consumers, privilegesOn, reachProblem } from "./consumer-coverage.ts";
import { CHECK, type Finding } from "./findings.ts";

const WRITES = ["INSERT", "UPDATE", "DELETE", "TRUNCATE"];
const READS_OR_WRITES = ["SELECT", "UPDATE", "DELETE", "TRUNCATE", "INSERT"];
const ACTS: ReadonlySet<string> = new Set(["CASCADE", "SET NULL", "SET DEFAULT"]);

const outsideCore = (name: string) => !name.startsWith("core.");
const schemaOf = (name: string) => name.split(".")[0] as string;

/** Every reach finding of `snapshot` for `consumers`' roles that exist. */
export function checkReach(snapshot: CatalogSnapshot, consumers: Consumers): Finding[] {
  const roles = [...consumers.consumerOf].filter(([role]) => consumers.kinds.consumerRoles.has(role));
  return roles.flatMap(([role, consumer]) => [
    ...definerFunctions(snapshot, role, consumer),
    ...views(snapshot, consumers, role, consumer),
    ...rules(snapshot, consumers, role, consumer),
    ...definerTriggers(snapshot, role, consumer),
    ...foreignKeyActions(snapshot, consumers, role, consumer),
    ...inheritedChildren(snapshot, consumers, role, consumer),
  ]);
}

function definerFunctions(snapshot: CatalogSnapshot, role: string, consumer: string): Finding[] {
  const executable = new Set(
    snapshot.privileges
      .filter((p) => p.target === "function" && p.grantee === role && p.privilege === "EXECUTE")
      .map((p) => p.object),
  );
  return snapshot.functions
    .filter(
      (f) => f.securityDefiner && f.schema !== "core" && f.owner !== role && executable.has(f.signature),
    )
    .map((f) => ({
      check: CHECK.reachAsAnotherRole,
      where: `function ${f.signature}`,
      what:
        `consumer ${consumer} reaches whatever it touches through it (${role} holds EXECUTE), and it runs as ` +
        `${f.owner} (SECURITY DEFINER): what ${f.owner} may do there, ${consumer} does, beyond what it declares`,
      todo: `ALTER FUNCTION ${f.signature} SECURITY INVOKER, granting ${role} what it needs (declared in ${consumer}'s data), or REVOKE EXECUTE ON FUNCTION ${f.signature} FROM ${sqlIdentifier(role)}`,
    }));
}

function views(snapshot: CatalogSnapshot, consumers: Consumers, role: string, consumer: string): Finding[] {
  const findings: Finding[] = [];
  for (const view of snapshot.reach.views) {
    if (view.securityInvoker || view.owner === role || !outsideCore(view.name)) continue;
    const held = privilegesOn(snapshot, role, view.name);
    if (held.size === 0) continue;
    for (const relation of view.reads) {
      const problem = reachProblem(consumers, consumer, relation);
      if (problem === undefined) continue;
      findings.push({
        check: CHECK.reachAsAnotherRole,
        where: `view ${view.name}`,
        what:
          `consumer ${consumer} reaches ${relation} through it (${role} holds ${[...held].sort().join(", ")}), ` +
          `and it reads ${relation} as its owner ${view.owner} (not security_invoker): ${problem}`,
        todo: `ALTER VIEW ${view.name} SET (security_invoker = true), granting ${role} what it needs on ${relation} (declared in ${consumer}'s data), or revoke ${role}'s privileges on ${view.name}`,
      });
    }
  }
  return findings;
}

function rules(snapshot: CatalogSnapshot, consumers: Consumers, role: string, consumer: string): Finding[] {
  const findings: Finding[] = [];
  for (const rule of snapshot.reach.rules) {
    if (rule.owner === role || !outsideCore(rule.table)) continue;
    const held = privilegesOn(snapshot, role, rule.table);
    if (held.size === 0) continue;
    for (const relation of rule.reads) {
      const problem = reachProblem(consumers, consumer, relation);
      if (problem === undefined) continue;
      findings.push({
        check: CHECK.reachAsAnotherRole,
        where: `rule ${rule.name} on ${rule.table}`,
        what:
          `consumer ${consumer} reaches ${relation} through it (${role} holds ${[...held].sort().join(", ")} on ${rule.table}), ` +
          `and a rule's actions run as the table's owner ${rule.owner}: ${problem}`,
        todo: `DROP RULE ${rule.name} ON ${rule.table} (a trigger, SECURITY INVOKER, does the same with ${role}'s own rights), or declare ${relation} in ${consumer}'s data`,
      });
    }
  }
  return findings;
}

function definerTriggers(snapshot: CatalogSnapshot, role: string, consumer: string): Finding[] {
  const findings: Finding[] = [];
  for (const t of snapshot.reach.triggers) {
    if (!t.securityDefiner || t.functionOwner === role || !outsideCore(t.table)) continue;
    const writes = [...privilegesOn(snapshot, role, t.table)].filter((p) => WRITES.includes(p)).sort();
    if (writes.length === 0) continue;
    findings.push({
      check: CHECK.reachAsAnotherRole,
      where: `trigger ${t.name} on ${t.table}`,
      what:
        `consumer ${consumer} writes ${t.table} (${role} holds ${writes.join(", ")}), and this trigger runs ` +
        `${t.function} as ${t.functionOwner} (SECURITY DEFINER): whatever it writes elsewhere, ${consumer} writes through it`,
      todo: `ALTER FUNCTION ${t.function} SECURITY INVOKER, granting ${role} what the trigger writes (declared in ${consumer}'s data), or drop the trigger`,
    });
  }
  return findings;
}

/** The actions of `fk` a role holding `held` on its referenced table sets off. */
function actionsOf(fk: CatalogForeignKey, held: ReadonlySet<string>): string[] {
  return [
    ...(held.has("DELETE") && ACTS.has(fk.onDelete) ? [`ON DELETE ${fk.onDelete}`] : []),
    ...(held.has("UPDATE") && ACTS.has(fk.onUpdate) ? [`ON UPDATE ${fk.onUpdate}`] : []),
  ];
}

function foreignKeyActions(
  snapshot: CatalogSnapshot,
  consumers: Consumers,
  role: string,
  consumer: string,
): Finding[] {
  const findings: Finding[] = [];
  const owners = new Map(snapshot.relations.map((r) => [r.name, r.owner]));
  for (const fk of snapshot.reach.foreignKeys) {
    if (!outsideCore(fk.table) || owners.get(fk.table) === role) continue;
    const actions = actionsOf(fk, privilegesOn(snapshot, role, fk.references));
    if (actions.length === 0) continue;
    const problem = reachProblem(consumers, consumer, fk.table);
    if (problem === undefined) continue;
    findings.push({
      check: CHECK.reachAsAnotherRole,
      where: `table ${fk.table}`,
      what:
        `consumer ${consumer} changes its rows through foreign key ${fk.name} (${actions.join(", ")}) when it ` +
        `changes ${fk.references}, and the action runs as its owner ${owners.get(fk.table) ?? "?"}: ${problem}`,
      todo: `make ${fk.name} ON DELETE / ON UPDATE NO ACTION (or RESTRICT), or declare ${fk.table} in ${consumer}'s data, or revoke ${role}'s DELETE and UPDATE on ${fk.references}`,
    });
  }
  return findings;
}

function inheritedChildren(
  snapshot: CatalogSnapshot,
  consumers: Consumers,
  role: string,
  consumer: string,
): Finding[] {
  const findings: Finding[] = [];
  const childrenOf = new Map<string, { child: string; partition: boolean }[]>();
  for (const i of snapshot.reach.inheritance) {
    childrenOf.set(i.parent, [...(childrenOf.get(i.parent) ?? []), i]);
  }
  for (const parent of childrenOf.keys()) {
    if (!outsideCore(parent)) continue;
    const held = [...privilegesOn(snapshot, role, parent)].filter((p) => READS_OR_WRITES.includes(p)).sort();
    if (held.length === 0) continue;
    // Every descendant, through children of children: a query on the parent reaches them all.
    const queue = [...(childrenOf.get(parent) ?? [])].map((c) => ({ ...c, via: parent }));
    const seen = new Set<string>();
    while (queue.length > 0) {
      const { child, partition, via } = queue.shift() as { child: string; partition: boolean; via: string };
      if (seen.has(child)) continue;
      seen.add(child);
      queue.push(...(childrenOf.get(child) ?? []).map((c) => ({ ...c, via: child })));
      const problem = reachProblem(consumers, consumer, child);
      if (problem === undefined) continue;
      const holder = consumers.ownSchemas.get(schemaOf(child));
      const othersOwn = holder !== undefined && holder !== consumer;
      if (partition && schemaOf(child) === schemaOf(via) && !othersOwn) continue;
      findings.push({
        check: CHECK.inheritedReach,
        where: `table ${child}`,
        what:
          `consumer ${consumer} reaches it through ${parent} (${role} holds ${held.join(", ")}), of which it is ` +
          `${partition ? "a partition" : "an inheritance child"}: a query on a parent reads and changes its children with the parent's privileges only, so ${problem}`,
        todo: `${partition ? `ALTER TABLE ${via} DETACH PARTITION ${child}` : `ALTER TABLE ${child} NO INHERIT ${via}`}, or declare ${child} in ${consumer}'s data, or revoke ${role}'s privileges on ${parent}`,
      });
    }
  }
  return findings;
}
