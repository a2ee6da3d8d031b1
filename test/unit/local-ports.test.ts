/**
 * The local stack's ports say the same thing everywhere a user looks: README's table, the
 * configuration table of docs/local-stack.md, the defaults the stack starts with, and the line
 * `npm start` prints (issue 32, item 9).
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { LOCAL_PORT_SETTINGS, LOCAL_PORTS, type LocalPortPart, portsLine } from "../../local/ports.ts";
import { localStackConfigFromEnv } from "../../local/stack-config.ts";
import { ROOT } from "../support/repository-files.ts";

const PARTS = Object.keys(LOCAL_PORTS) as LocalPortPart[];
const read = (file: string) => readFileSync(join(ROOT, file), "utf8");

/** A markdown table's rows as cells, for the rows whose first cell is `first`. */
function rowsStartingWith(markdown: string, first: string): string[][] {
  return markdown
    .split("\n")
    .filter((line) => line.startsWith("|"))
    .map((line) =>
      line
        .slice(1, -1)
        .split("|")
        .map((cell) => cell.trim()),
    )
    .filter((cells) => cells[0] === first);
}

describe("the local stack's ports", () => {
  it("README's table lists each part's default port and the variable that moves it", () => {
    const readme = read("README.md");
    for (const part of PARTS) {
      const name = LOCAL_PORT_SETTINGS[part].part.replace(/^the /, "");
      const rows = rowsStartingWith(readme, name);
      expect(rows, `README's ports table has one row for ${name}`).toHaveLength(1);
      const [, port, setting] = rows[0] as string[];
      expect(port).toBe(String(LOCAL_PORTS[part]));
      expect(setting).toContain(`\`${LOCAL_PORT_SETTINGS[part].env}\``);
    }
    expect(readme).toContain(`the dead-letter API on \`http://127.0.0.1:${LOCAL_PORTS.api}\``);
  });

  it("docs/local-stack.md's configuration table gives the same variables and defaults", () => {
    const doc = read("docs/local-stack.md");
    const variables = PARTS.map((part) => `\`${LOCAL_PORT_SETTINGS[part].env}\``).join(", ");
    const [row, ...more] = rowsStartingWith(doc, variables);
    expect(more).toEqual([]);
    expect(row?.[1]).toBe(PARTS.map((part) => LOCAL_PORTS[part]).join(", "));
    expect(doc).toContain(`(port ${LOCAL_PORTS.postgres})`);
    expect(doc).toContain(`(port ${LOCAL_PORTS.sqs},`);
    expect(doc).toContain(`\`http://127.0.0.1:${LOCAL_PORTS.api}\``);
    expect(doc).toContain(`\`http://127.0.0.1:${LOCAL_PORTS.provider}\``);
  });

  it("the stack starts on those defaults, each variable moves its part, and the printed line names them", () => {
    expect(localStackConfigFromEnv({}, ROOT).ports).toEqual(LOCAL_PORTS);
    const moved = localStackConfigFromEnv(
      Object.fromEntries(PARTS.map((part, i) => [LOCAL_PORT_SETTINGS[part].env, String(40_001 + i)])),
      ROOT,
    );
    expect(moved.ports).toEqual({ postgres: 40_001, sqs: 40_002, api: 40_003, provider: 40_004 });
    expect(portsLine(LOCAL_PORTS)).toBe(
      "PostgreSQL 54329 (JOBFENCE_PG_PORT), SQS 9324 (JOBFENCE_SQS_PORT), API 8787 (JOBFENCE_API_PORT), provider 4568 (JOBFENCE_PROVIDER_PORT)",
    );
    expect(portsLine({ api: 8787 })).toBe("API 8787 (JOBFENCE_API_PORT)");
  });
});
