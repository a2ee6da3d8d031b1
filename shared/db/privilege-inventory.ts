/**
 * The privilege inventory (docs/schema.md, "Privilege inventory"): every privilege the roles a
 * deployment creates hold in the database, read from the live catalog, one entry per object,
 * privilege and holder; and the section of docs/schema.md that lists them with why each is held
 * and the cross-consumer test that covers it.
 *
 * The catalog side is `inventoryEntries` (pure, over `readCatalog`'s snapshot plus default
 * privileges and large objects); the document side parses and renders the section between its
 * markers. `npm run inventory` (scripts/inventory.ts) regenerates the section, keeping the why and
 * the test of every entry that still exists; test/integration/privilege-inventory.test.ts fails
 * when the two disagree or an entry's test does not exist.
 */

import { type CatalogSnapshot, readCatalog } from "./catalog.ts";
import { signatureSql } from "./catalog-reach.ts";
import type { Queryable } from "./queryable.ts";

/** The roles every deployment creates, besides one group role per consumer. */
export const SHARED_INVENTORY_ROLES = ["jobfence_consumer", "jobfence_ops", "jobfence_cleanup"] as const;

/** The holder of a definer function nobody but its owner may call (a trigger's, a helper's). */
export const OWNER_ONLY = "owner only";

/** One privilege one holder has on one object, as the catalog says. */
export interface InventoryKey {
  /** `core.hold_fence(text,text)`, `core.dead_letters`, `schema core`, `database`, `role jobfence_consumer`. */
  readonly object: string;
  /** `EXECUTE · SECURITY DEFINER`, `INSERT (body, consumer, …)`, `policy consumer_own_fences FOR ALL`. */
  readonly privilege: string;
  /** A role name, `PUBLIC`, or {@link OWNER_ONLY}. */
  readonly heldBy: string;
}

/** An entry of the document: the key, why the holder has it, and the test that covers it. */
export interface InventoryEntry extends InventoryKey {
  readonly why: string;
  /** The title of the test (an `it(…)` in test/) that tries the privilege as another consumer, or `—`. */
  readonly test: string;
}

/** What a new entry's why and test say until a person fills them in. */
export const UNFILLED = "(to fill in)";

/** The key as one string, for comparisons and messages. */
export function keyOf(entry: InventoryKey): string {
  return `${entry.object} | ${entry.privilege} | ${entry.heldBy}`;
}

/** Privileges the snapshot does not carry: default privileges and large objects, for the holders. */
export interface ExtraPrivileges {
  readonly defaultPrivileges: readonly InventoryKey[];
  readonly largeObjects: readonly InventoryKey[];
  /** Functions an extension installed (`similarity(text,text)` → `pg_trgm`): one entry per extension. */
  readonly extensionFunctions: ReadonlyMap<string, string>;
}

const GRANTEE = "CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee)::text END";

// Default privileges someone set for objects created later (ALTER DEFAULT PRIVILEGES), and large
// objects' ACLs: jobfence creates neither, so each one found is an entry to explain.
const DEFAULT_PRIVILEGES_SQL = `
  SELECT 'default privileges of ' || pg_get_userbyid(d.defaclrole)
         || coalesce(' in schema ' || d.defaclnamespace::regnamespace::text, '')
         || ' on ' || CASE d.defaclobjtype WHEN 'r' THEN 'tables' WHEN 'S' THEN 'sequences' WHEN 'f' THEN 'functions'
                                           WHEN 'T' THEN 'types' WHEN 'n' THEN 'schemas' ELSE d.defaclobjtype::text END AS object,
         a.privilege_type AS privilege, ${GRANTEE} AS "heldBy"
    FROM pg_default_acl d, aclexplode(d.defaclacl) a`;

const LARGE_OBJECTS_SQL = `
  SELECT 'large object ' || l.oid::text AS object, a.privilege_type AS privilege, ${GRANTEE} AS "heldBy"
    FROM pg_largeobject_metadata l, aclexplode(l.lomacl) a
   WHERE a.grantee <> l.lomowner`;

// The same text as readCatalog's signatures: read with its search path (pg_catalog, public).
const EXTENSION_FUNCTIONS_SQL = `
  SELECT ${signatureSql("p", "n")} AS signature, e.extname AS extension
    FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid JOIN pg_proc p ON p.oid = d.objid
    JOIN pg_namespace n ON n.oid = p.pronamespace
   WHERE d.classid = 'pg_proc'::regclass AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'`;

/** Reads what {@link inventoryEntries} needs beyond `readCatalog`'s snapshot. */
export async function readExtraPrivileges(client: Queryable): Promise<ExtraPrivileges> {
  const { rows: path } = await client.query<{ path: string }>(
    "SELECT current_setting('search_path') AS path",
  );
  await client.query("SELECT set_config('search_path', 'pg_catalog, public', false)");
  try {
    const functions = await client.query<{ signature: string; extension: string }>(EXTENSION_FUNCTIONS_SQL);
    return {
      defaultPrivileges: (await client.query<InventoryKey>(DEFAULT_PRIVILEGES_SQL)).rows,
      largeObjects: (await client.query<InventoryKey>(LARGE_OBJECTS_SQL)).rows,
      extensionFunctions: new Map(functions.rows.map((r) => [r.signature, r.extension])),
    };
  } finally {
    await client.query("SELECT set_config('search_path', $1, false)", [path[0]?.path ?? ""]);
  }
}

/** How the inventory names an extension's functions, all of which it lists as one object. */
export function extensionObject(extension: string): string {
  return `extension ${extension}'s functions`;
}

/**
 * The holders the inventory covers: PUBLIC (every login has what it holds), the shared roles, and
 * each registered consumer's group role. A consumer's login holds exactly PUBLIC's, its group role's
 * and (through it) `jobfence_consumer`'s: `core.provision_login` refuses a user with privileges or
 * memberships of its own.
 */
export function inventoryHolders(snapshot: CatalogSnapshot): string[] {
  const consumers = (snapshot.consumerRoles ?? []).map((c) => c.role);
  return ["PUBLIC", ...SHARED_INVENTORY_ROLES, ...[...consumers].sort()];
}

/** Every privilege the holders have, from the catalog, sorted by object, holder and privilege. */
export function inventoryEntries(snapshot: CatalogSnapshot, extra: ExtraPrivileges): InventoryKey[] {
  const holders = new Set(inventoryHolders(snapshot));
  const definers = new Set(snapshot.functions.filter((f) => f.securityDefiner).map((f) => f.signature));
  const keys = new Map<string, InventoryKey>();
  const add = (key: InventoryKey) => keys.set(keyOf(key), key);

  const columns = new Map<string, { object: string; privilege: string; heldBy: string; names: string[] }>();
  for (const p of snapshot.privileges) {
    if (!holders.has(p.grantee)) continue;
    const grant = p.grantable ? " WITH GRANT OPTION" : "";
    switch (p.target) {
      case "database":
        // The database's name differs between deployments (and test databases): one name for it.
        add({ object: "database", privilege: `${p.privilege}${grant}`, heldBy: p.grantee });
        break;
      case "schema":
        add({ object: `schema ${p.object}`, privilege: `${p.privilege}${grant}`, heldBy: p.grantee });
        break;
      case "function": {
        const extension = extra.extensionFunctions.get(p.object);
        if (extension !== undefined && !definers.has(p.object)) {
          add({ object: extensionObject(extension), privilege: `${p.privilege}${grant}`, heldBy: p.grantee });
          break;
        }
        const definer = definers.has(p.object) ? " · SECURITY DEFINER" : "";
        add({ object: p.object, privilege: `${p.privilege}${definer}${grant}`, heldBy: p.grantee });
        break;
      }
      case "column": {
        const id = `${p.object}|${p.privilege}${grant}|${p.grantee}`;
        const entry = columns.get(id) ?? {
          object: p.object,
          privilege: `${p.privilege}${grant}`,
          heldBy: p.grantee,
          names: [],
        };
        entry.names.push(p.column ?? "?");
        columns.set(id, entry);
        break;
      }
      default:
        add({ object: p.object, privilege: `${p.privilege}${grant}`, heldBy: p.grantee });
    }
  }
  for (const c of columns.values()) {
    add({
      object: c.object,
      privilege: `${c.privilege} (${[...c.names].sort().join(", ")})`,
      heldBy: c.heldBy,
    });
  }
  // A definer function none of the holders may call still runs for them when it is a trigger's.
  const callable = new Set(
    snapshot.privileges.filter((p) => p.target === "function" && holders.has(p.grantee)).map((p) => p.object),
  );
  for (const signature of definers) {
    if (!callable.has(signature))
      add({ object: signature, privilege: "SECURITY DEFINER", heldBy: OWNER_ONLY });
  }
  for (const policy of snapshot.policies) {
    for (const role of policy.roles) {
      add({
        object: policy.table,
        privilege: `policy ${policy.name} FOR ${policy.command}${policy.permissive ? "" : " (restrictive)"}`,
        heldBy: role,
      });
    }
  }
  for (const m of snapshot.memberships) {
    if (holders.has(m.member)) {
      add({
        object: `role ${m.role}`,
        privilege: `MEMBER${m.adminOption ? " WITH ADMIN OPTION" : ""}`,
        heldBy: m.member,
      });
    }
  }
  for (const key of [...extra.defaultPrivileges, ...extra.largeObjects]) {
    if (holders.has(key.heldBy)) add(key);
  }
  return [...keys.values()].sort(compareKeys);
}

function compareKeys(a: InventoryKey, b: InventoryKey): number {
  return cmp(a.object, b.object) || cmp(a.heldBy, b.heldBy) || cmp(a.privilege, b.privilege);
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Reads the inventory of the database `client` is connected to (any role that may read the catalog). */
export async function readInventory(client: Queryable): Promise<InventoryKey[]> {
  return inventoryEntries(await readCatalog(client), await readExtraPrivileges(client));
}

/** The markers around the generated section of docs/schema.md. */
export const INVENTORY_START =
  "<!-- privilege-inventory:start (npm run inventory writes this table; edit only the why and test columns) -->";
/** The end marker. */
export const INVENTORY_END = "<!-- privilege-inventory:end -->";

const HEADER = ["object", "privilege", "held by", "why", "cross-consumer test"];

/** The rows of the document's section, in its order; throws when the markers are missing or misplaced. */
export function parseInventorySection(document: string): InventoryEntry[] {
  const start = document.indexOf(INVENTORY_START);
  const end = document.indexOf(INVENTORY_END);
  if (start < 0 || end < start) {
    throw new Error(
      `docs/schema.md has no privilege inventory between ${INVENTORY_START} and ${INVENTORY_END}`,
    );
  }
  const lines = document
    .slice(start + INVENTORY_START.length, end)
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l.startsWith("|"));
  return lines.slice(2).map((line) => {
    const cells = splitRow(line);
    if (cells.length !== HEADER.length)
      throw new Error(`privilege inventory row has ${cells.length} cells: ${line}`);
    const [object, privilege, heldBy, why, test] = cells.map(unformat) as [
      string,
      string,
      string,
      string,
      string,
    ];
    return { object, privilege, heldBy, why, test };
  });
}

/** Splits a Markdown table row on the pipes that are not escaped. */
function splitRow(line: string): string[] {
  const cells: string[] = [];
  let cell = "";
  for (let i = 1; i < line.length; i++) {
    const ch = line[i];
    if (ch === "\\" && line[i + 1] === "|") {
      cell += "|";
      i++;
    } else if (ch === "|") {
      cells.push(cell.trim());
      cell = "";
    } else {
      cell += ch;
    }
  }
  return cells;
}

/** A cell's text without its code span. */
function unformat(cell: string): string {
  return cell.startsWith("`") && cell.endsWith("`") && cell.length >= 2 ? cell.slice(1, -1) : cell;
}

function cell(text: string, code: boolean): string {
  const escaped = text.replaceAll("|", "\\|");
  return code && text !== "—" && text !== UNFILLED ? `\`${escaped}\`` : escaped;
}

/**
 * The section for `keys`: each keeps the why and test of the entry of `previous` with its key, or
 * {@link UNFILLED} for a new one. Returns the section and the keys that were added and dropped.
 */
export function renderInventorySection(
  keys: readonly InventoryKey[],
  previous: readonly InventoryEntry[],
): { section: string; added: InventoryKey[]; dropped: InventoryEntry[] } {
  const known = new Map(previous.map((e) => [keyOf(e), e]));
  const current = new Set(keys.map(keyOf));
  const added: InventoryKey[] = [];
  const rows = keys.map((k) => {
    const before = known.get(keyOf(k));
    if (!before) added.push(k);
    const why = before?.why ?? UNFILLED;
    const test = before?.test ?? UNFILLED;
    return `| ${cell(k.object, true)} | ${cell(k.privilege, false)} | ${cell(k.heldBy, false)} | ${cell(why, false)} | ${cell(test, true)} |`;
  });
  const section = [
    INVENTORY_START,
    "",
    `| ${HEADER.join(" | ")} |`,
    `| ${HEADER.map(() => "---").join(" | ")} |`,
    ...rows,
    "",
    INVENTORY_END,
  ].join("\n");
  return { section, added, dropped: previous.filter((e) => !current.has(keyOf(e))) };
}

/** `document` with its section replaced by `section`. */
export function replaceInventorySection(document: string, section: string): string {
  const start = document.indexOf(INVENTORY_START);
  const end = document.indexOf(INVENTORY_END);
  if (start < 0 || end < start) {
    throw new Error(
      `docs/schema.md has no privilege inventory between ${INVENTORY_START} and ${INVENTORY_END}`,
    );
  }
  return document.slice(0, start) + section + document.slice(end + INVENTORY_END.length);
}
