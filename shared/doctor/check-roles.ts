/**
 * Roles and memberships, cluster-wide. What the migrations and `core.provision_login` make:
 *
 * - group roles are NOLOGIN and unprivileged (the shared ones' attributes are in the committed
 *   description; a consumer's role is checked here), and logins in them are unprivileged too;
 * - each login is a member of exactly one group role: `jobfence_ops`, `jobfence_cleanup` or one
 *   consumer's role, never `jobfence_consumer` itself (it would act for no consumer), and without
 *   ADMIN OPTION (it could grant its role on);
 * - a consumer's role is a member of `jobfence_consumer` and of nothing else; the shared roles are
 *   members of nothing;
 * - nothing else is a member of a group role, except the migrator's ADMIN OPTION membership
 *   (PostgreSQL 16 and later give a non-superuser creator one in every role it creates).
 *
 * Pure.
 */
import type { CatalogRole, CatalogSnapshot } from "../db/catalog.ts";
import { sqlIdentifier } from "../db/catalog-description.ts";
import { CONSUMER_BASE_ROLE } from "../db/queries/provision-login.ts";
import { CHECK, type Finding } from "./findings.ts";
import { classifyRoles, membershipsOf, type RoleKinds } from "./role-kinds.ts";

const PRIVILEGED_ATTRIBUTES: ReadonlyArray<[keyof CatalogRole, string]> = [
  ["superuser", "SUPERUSER"],
  ["createDb", "CREATEDB"],
  ["createRole", "CREATEROLE"],
  ["replication", "REPLICATION"],
  ["bypassRls", "BYPASSRLS"],
];

/** Every role and membership finding of `snapshot`. */
export function checkRoles(snapshot: CatalogSnapshot): Finding[] {
  const kinds = classifyRoles(snapshot);
  return [
    ...checkAttributes(snapshot, kinds),
    ...checkLogins(snapshot, kinds),
    ...checkGroupRoles(snapshot, kinds),
    ...checkForeignMembers(snapshot, kinds),
  ];
}

function checkAttributes(snapshot: CatalogSnapshot, kinds: RoleKinds): Finding[] {
  const findings: Finding[] = [];
  for (const role of snapshot.roles) {
    const consumerRole = kinds.consumerRoles.has(role.name);
    if (!consumerRole && !kinds.logins.has(role.name)) continue;
    const wrong = PRIVILEGED_ATTRIBUTES.filter(([attribute]) => role[attribute]).map(
      ([, keyword]) => keyword,
    );
    if (consumerRole && role.canLogin) wrong.unshift("LOGIN");
    if (wrong.length === 0) continue;
    const what = consumerRole
      ? `the group role of consumer ${kinds.registered.get(role.name) ?? "(of another database)"} has ${wrong.join(", ")}: a group role is NOLOGIN and unprivileged`
      : `this login of a jobfence role has ${wrong.join(", ")}: a function's login is an unprivileged user`;
    findings.push({
      check: CHECK.roleAttributes,
      where: `role ${role.name}`,
      what,
      todo: `ALTER ROLE ${sqlIdentifier(role.name)} ${wrong.map((keyword) => `NO${keyword}`).join(" ")}`,
    });
  }
  return findings;
}

function checkLogins(snapshot: CatalogSnapshot, kinds: RoleKinds): Finding[] {
  const findings: Finding[] = [];
  for (const login of [...kinds.logins].sort()) {
    const roles = membershipsOf(snapshot, login);
    const where = `login ${login}`;
    if (roles.includes(CONSUMER_BASE_ROLE)) {
      findings.push({
        check: CHECK.loginMemberships,
        where,
        what: `is a member of ${CONSUMER_BASE_ROLE} itself, which acts for no consumer (row-level security lets it write nothing)`,
        todo: `REVOKE ${CONSUMER_BASE_ROLE} FROM ${sqlIdentifier(login)}; a consumer's login is granted that consumer's own role (core.provision_login does it on deploy)`,
      });
    }
    if (roles.length > 1) {
      findings.push({
        check: CHECK.loginMemberships,
        where,
        what: `is a member of ${roles.length} roles (${roles.join(", ")}): a login is a member of exactly one group role`,
        todo: `keep the one group role its function needs and revoke the others (REVOKE <role> FROM ${sqlIdentifier(login)}); the deploy's core.provision_login leaves exactly one`,
      });
    }
    const admin = [
      ...new Set(
        snapshot.memberships
          .filter((m) => m.member === login && m.adminOption && kinds.groupRoles.has(m.role))
          .map((m) => m.role),
      ),
    ].sort();
    for (const role of admin) {
      findings.push({
        check: CHECK.loginMemberships,
        where,
        what: `holds ${role} WITH ADMIN OPTION: it may grant the role to any other role`,
        todo: `REVOKE ADMIN OPTION FOR ${sqlIdentifier(role)} FROM ${sqlIdentifier(login)}`,
      });
    }
  }
  return findings;
}

function checkGroupRoles(snapshot: CatalogSnapshot, kinds: RoleKinds): Finding[] {
  const findings: Finding[] = [];
  const existing = new Set(snapshot.roles.map((r) => r.name));
  for (const [role, consumer] of [...kinds.registered].sort()) {
    if (!existing.has(role)) {
      findings.push({
        check: CHECK.groupRoleMemberships,
        where: `role ${role}`,
        what: `consumer ${consumer} is registered in core.consumer_roles with this group role, which does not exist`,
        todo: `run the migrations again: the runner recreates it (core.ensure_consumer_role('${consumer}'))`,
      });
    }
  }
  for (const role of [...kinds.groupRoles].sort()) {
    const memberOf = membershipsOf(snapshot, role);
    const consumerRole = kinds.consumerRoles.has(role);
    const allowed = consumerRole ? [CONSUMER_BASE_ROLE] : [];
    if (consumerRole && !memberOf.includes(CONSUMER_BASE_ROLE)) {
      findings.push({
        check: CHECK.groupRoleMemberships,
        where: `role ${role}`,
        what: `the group role of consumer ${kinds.registered.get(role)} is not a member of ${CONSUMER_BASE_ROLE}: its login has none of the core privileges`,
        todo: `GRANT ${CONSUMER_BASE_ROLE} TO ${sqlIdentifier(role)} (or run the migrations again: core.ensure_consumer_role does it)`,
      });
    }
    for (const other of memberOf.filter((r) => !allowed.includes(r))) {
      findings.push({
        check: CHECK.groupRoleMemberships,
        where: `role ${role}`,
        what: `is a member of ${other}, so every login in it holds ${other}'s privileges too: ${
          consumerRole
            ? `a consumer's role is a member of ${CONSUMER_BASE_ROLE} only`
            : "a shared role is a member of nothing"
        }`,
        todo: `REVOKE ${sqlIdentifier(other)} FROM ${sqlIdentifier(role)}`,
      });
    }
  }
  return findings;
}

function checkForeignMembers(snapshot: CatalogSnapshot, kinds: RoleKinds): Finding[] {
  const findings = new Map<string, Finding>();
  for (const m of snapshot.memberships) {
    if (!kinds.groupRoles.has(m.role)) continue;
    // Logins and group roles are checked above; the migrator administers the roles it created.
    if (kinds.logins.has(m.member) || kinds.groupRoles.has(m.member)) continue;
    if (m.member === kinds.migrator && m.adminOption) continue;
    const key = `${m.member} ${m.role}`;
    if (findings.has(key)) continue;
    findings.set(key, {
      check: CHECK.foreignMembers,
      where: `role ${m.member}`,
      what:
        `is a member of ${m.role}${m.adminOption ? " WITH ADMIN OPTION (it may grant the role on)" : ""}, so it may use ${m.role}'s privileges: ` +
        "only logins (one group role each), consumers' roles (of jobfence_consumer) and the migrator's administration may be",
      todo: `REVOKE ${sqlIdentifier(m.role)} FROM ${sqlIdentifier(m.member)}`,
    });
  }
  return [...findings.values()].sort((a, b) => (a.where < b.where ? -1 : a.where > b.where ? 1 : 0));
}
