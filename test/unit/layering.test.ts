/**
 * Dependencies point one way. `functions/`, `infra/`, `local/`, `testing/` and the rest use the
 * library in `shared/`; the library imports none of them, so a Lambda bundle never carries CDK,
 * the local emulators or the testing kit. And no module imports itself back: no import cycle
 * among the repository's TypeScript files, and no two of the library's folders that import each
 * other.
 *
 * The graph is read from the code's own import statements (static, type-only, re-exports and
 * `import("…")` with a literal), as text: a small scanner skips comments, strings, template
 * literals and regular expressions, so an import written inside generated code or a comment is not
 * taken for one. Only relative specifiers make edges; packages are outside the graph.
 */
import { readFileSync } from "node:fs";
import { dirname, join, posix } from "node:path";
import { describe, expect, it } from "vitest";
import { ROOT, repositoryFiles } from "../support/repository-files.ts";

/** Cycles that stay for now, each by the files it ties (sorted), with who removes it. */
const ALLOWED_CYCLES: readonly (readonly string[])[] = [];

/**
 * Folders of the library that still import each other (each pair sorted): a cycle one level up,
 * between the files of two concepts, that no file-level cycle shows. The list may only shrink:
 * a pair that no longer imports each other must leave it.
 */
const FOLDERS_STILL_IMPORTING_EACH_OTHER: readonly (readonly [string, string])[] = [];

// ---------------------------------------------------------------------------------------------
// The scanner

/** A token of TypeScript source that the import reader needs: a word, a string, or a punctuator. */
type Token =
  | { readonly kind: "word"; readonly text: string; readonly line: number }
  | { readonly kind: "string"; readonly text: string; readonly line: number }
  | { readonly kind: "punct"; readonly text: string; readonly line: number };

/** Words after which a `/` starts a regular expression, not a division. */
const REGEX_AFTER_WORDS = new Set([
  "return",
  "typeof",
  "instanceof",
  "in",
  "of",
  "new",
  "delete",
  "void",
  "throw",
  "case",
  "do",
  "else",
  "yield",
  "await",
]);

/**
 * The words, strings and punctuators of `source`, without comments, template literal text (the
 * `${…}` parts are read as code) or regular expression literals.
 */
function tokenize(source: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  let line = 1;
  // One entry per open `${`: the brace depth inside it, so its closing `}` resumes the template.
  const templates: number[] = [];
  const isWordChar = (c: string) => /[\w$]/.test(c);
  const advanceTo = (end: number) => {
    for (let k = i; k < end; k++) if (source.charCodeAt(k) === 10) line++;
    i = end;
  };
  /** Skips template text from `i` (just after a backtick or a closing `}`) to its end or `${`. */
  const templateText = () => {
    let k = i;
    while (k < source.length) {
      const c = source[k];
      if (c === "\\") k += 2;
      else if (c === "`") {
        advanceTo(k + 1);
        return;
      } else if (c === "$" && source[k + 1] === "{") {
        advanceTo(k + 2);
        templates.push(0);
        return;
      } else k++;
    }
    advanceTo(source.length);
  };
  const regexAllowed = () => {
    const last = tokens.at(-1);
    if (last === undefined) return true;
    if (last.kind === "word") return REGEX_AFTER_WORDS.has(last.text);
    if (last.kind === "string") return false;
    return !(last.text === ")" || last.text === "]" || last.text === "}");
  };
  while (i < source.length) {
    const c = source[i] as string;
    const next = source[i + 1];
    if (c === "\n") {
      line++;
      i++;
    } else if (/\s/.test(c)) {
      i++;
    } else if (c === "/" && next === "/") {
      const end = source.indexOf("\n", i);
      advanceTo(end === -1 ? source.length : end);
    } else if (c === "/" && next === "*") {
      const end = source.indexOf("*/", i + 2);
      advanceTo(end === -1 ? source.length : end + 2);
    } else if (c === "'" || c === '"') {
      let k = i + 1;
      let text = "";
      while (k < source.length && source[k] !== c && source[k] !== "\n") {
        if (source[k] === "\\") {
          text += source.slice(k, k + 2);
          k += 2;
        } else text += source[k++];
      }
      tokens.push({ kind: "string", text, line });
      advanceTo(k + 1);
    } else if (c === "`") {
      i++;
      templateText();
      tokens.push({ kind: "string", text: "", line });
    } else if (c === "}" && templates.length > 0 && templates.at(-1) === 0) {
      templates.pop();
      i++;
      templateText();
      tokens.push({ kind: "string", text: "", line });
    } else if (c === "/" && regexAllowed()) {
      let k = i + 1;
      let inClass = false;
      while (k < source.length && source[k] !== "\n") {
        const r = source[k];
        if (r === "\\") k++;
        else if (r === "[") inClass = true;
        else if (r === "]") inClass = false;
        else if (r === "/" && !inClass) break;
        k++;
      }
      k++;
      while (k < source.length && /[a-z]/i.test(source[k] as string)) k++;
      tokens.push({ kind: "punct", text: "/…/", line });
      advanceTo(k);
    } else if (isWordChar(c)) {
      let k = i + 1;
      while (k < source.length && isWordChar(source[k] as string)) k++;
      tokens.push({ kind: "word", text: source.slice(i, k), line });
      i = k;
    } else {
      if (templates.length > 0) {
        if (c === "{") templates[templates.length - 1] = (templates.at(-1) as number) + 1;
        if (c === "}") templates[templates.length - 1] = (templates.at(-1) as number) - 1;
      }
      tokens.push({ kind: "punct", text: c, line });
      i++;
    }
  }
  return tokens;
}

/** Tokens that may stand between `import`/`export` and `from`: names, `type`, `as`, `*`, braces, commas. */
function isClauseToken(token: Token): boolean {
  return token.kind === "word" || (token.kind === "punct" && ["{", "}", ",", "*"].includes(token.text));
}

/** One module specifier a file names, with its line. */
interface ImportSpecifier {
  readonly specifier: string;
  readonly line: number;
}

/**
 * Every module specifier `source` imports or re-exports: `import … from "x"`, `import "x"`,
 * `import type …`, `export … from "x"` and `import("x")`.
 */
function importSpecifiers(source: string): ImportSpecifier[] {
  const tokens = tokenize(source);
  const found: ImportSpecifier[] = [];
  for (let t = 0; t < tokens.length; t++) {
    const token = tokens[t] as Token;
    if (token.kind !== "word" || (token.text !== "import" && token.text !== "export")) continue;
    const before = tokens[t - 1];
    if (before?.kind === "punct" && before.text === ".") continue; // a property named import
    const next = tokens[t + 1];
    if (token.text === "import" && next?.kind === "string") {
      found.push({ specifier: next.text, line: next.line });
      continue;
    }
    if (token.text === "import" && next?.kind === "punct" && next.text === "(") {
      const argument = tokens[t + 2];
      const close = tokens[t + 3];
      if (argument?.kind === "string" && close?.kind === "punct" && /[),]/.test(close.text)) {
        found.push({ specifier: argument.text, line: argument.line });
      }
      continue;
    }
    // import/export clause … from "x": only names, braces, commas and stars stand before `from`.
    for (let k = t + 1; k < tokens.length; k++) {
      const clause = tokens[k] as Token;
      const after = tokens[k + 1];
      if (clause.kind === "word" && clause.text === "from" && after?.kind === "string") {
        found.push({ specifier: after.text, line: after.line });
        break;
      }
      if (!isClauseToken(clause)) break;
      // `export const x`, `export function f`, `export default …` end the search at their next token.
      if (k === t + 1 && clause.kind === "word" && !["type", "from"].includes(clause.text)) {
        if (token.text === "export") break;
      }
    }
  }
  return found;
}

// ---------------------------------------------------------------------------------------------
// The graph

/** A relative import of one repository file by another. */
interface Edge {
  readonly from: string;
  readonly to: string;
  readonly line: number;
}

/** The repository's TypeScript files and the relative imports between them. */
function moduleGraph(): { files: string[]; edges: Edge[] } {
  const files = repositoryFiles()
    .filter((file) => file.endsWith(".ts"))
    .sort();
  const known = new Set(files);
  const edges: Edge[] = [];
  for (const file of files) {
    const source = readFileSync(join(ROOT, file), "utf8");
    for (const { specifier, line } of importSpecifiers(source)) {
      if (!specifier.startsWith("./") && !specifier.startsWith("../")) continue;
      const to = posix.normalize(posix.join(dirname(file), specifier));
      edges.push({ from: file, to, line });
      if (!known.has(to) && to.endsWith(".ts") && !to.startsWith("../")) {
        throw new Error(`${file}:${line} imports ${specifier}, which is not a file of the repository`);
      }
    }
  }
  return { files, edges };
}

/** The strongly connected components of more than one node (Tarjan), each sorted, in node order. */
function cyclesOf(nodes: readonly string[], next: (node: string) => readonly string[]): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const components: string[][] = [];
  let counter = 0;
  const visit = (node: string) => {
    index.set(node, counter);
    low.set(node, counter);
    counter++;
    stack.push(node);
    onStack.add(node);
    for (const target of next(node)) {
      if (!index.has(target)) {
        visit(target);
        low.set(node, Math.min(low.get(node) as number, low.get(target) as number));
      } else if (onStack.has(target)) {
        low.set(node, Math.min(low.get(node) as number, index.get(target) as number));
      }
    }
    if (low.get(node) === index.get(node)) {
      const component: string[] = [];
      let member: string;
      do {
        member = stack.pop() as string;
        onStack.delete(member);
        component.push(member);
      } while (member !== node);
      if (component.length > 1 || next(node).includes(node)) components.push(component.sort());
    }
  };
  for (const node of nodes) if (!index.has(node)) visit(node);
  return components.sort((a, b) => (a[0] as string).localeCompare(b[0] as string));
}

/**
 * The library's folder a file of `shared/` belongs to: its folder (`shared/db/queries`), or the
 * file itself when it stands directly in `shared/` (`shared/errors.ts`).
 */
function libraryUnit(file: string): string {
  const folder = dirname(file);
  return folder === "shared" ? file : folder;
}

/** Whether one unit holds the other (`shared/db` and `shared/db/queries`): one concept's inside. */
function nested(a: string, b: string): boolean {
  return a.startsWith(`${b}/`) || b.startsWith(`${a}/`);
}

const GRAPH = moduleGraph();

/** The edges of the graph, grouped by importing file. */
const IMPORTS = new Map<string, Edge[]>();
for (const edge of GRAPH.edges) IMPORTS.set(edge.from, [...(IMPORTS.get(edge.from) ?? []), edge]);

/** `a -> b (line)` for each edge between two members of `members`, to show what ties a cycle. */
function ties(members: readonly string[], unit: (file: string) => string = (f) => f): string[] {
  const inside = new Set(members);
  return GRAPH.edges
    .filter((e) => inside.has(unit(e.from)) && inside.has(unit(e.to)) && unit(e.from) !== unit(e.to))
    .map((e) => `${e.from}:${e.line} -> ${e.to}`);
}

describe("layering", () => {
  it("reads the repository's TypeScript files and their imports", () => {
    expect(GRAPH.files).toContain("shared/index.ts");
    expect(GRAPH.files).toContain("test/unit/layering.test.ts");
    expect(GRAPH.edges.some((e) => e.from === "shared/index.ts" && e.to === "shared/consumer.ts")).toBe(true);
  });

  it("the library in shared/ imports nothing from outside shared/ but packages", () => {
    const outward = GRAPH.edges
      .filter((e) => e.from.startsWith("shared/") && !e.to.startsWith("shared/"))
      .map((e) => `${e.from}:${e.line} imports ${e.to}`);
    expect(outward).toEqual([]);
  });

  it("no import cycle among the repository's TypeScript files, but the ones allowed by name", () => {
    const cycles = cyclesOf(GRAPH.files, (file) => (IMPORTS.get(file) ?? []).map((e) => e.to));
    const allowed = new Set(ALLOWED_CYCLES.map((files) => files.join(" ")));
    const found = cycles
      .filter((files) => !allowed.has(files.join(" ")))
      .map((files) => ({ files, ties: ties(files) }));
    expect(found).toEqual([]);
    const gone = ALLOWED_CYCLES.filter((files) => !cycles.some((c) => c.join(" ") === files.join(" ")));
    expect(gone, "these cycles are gone: remove them from ALLOWED_CYCLES").toEqual([]);
  });

  it("no two folders of the library import each other, but the pairs still listed", () => {
    const library = GRAPH.edges.filter((e) => e.from.startsWith("shared/") && e.to.startsWith("shared/"));
    const unitEdges = new Set(library.map((e) => `${libraryUnit(e.from)} ${libraryUnit(e.to)}`));
    const pairs = new Set<string>();
    for (const pair of unitEdges) {
      const [a, b] = pair.split(" ") as [string, string];
      if (a < b && !nested(a, b) && unitEdges.has(`${b} ${a}`)) pairs.add(`${a} ${b}`);
    }
    const listed = new Set(FOLDERS_STILL_IMPORTING_EACH_OTHER.map((pair) => pair.join(" ")));
    const found = [...pairs]
      .filter((pair) => !listed.has(pair))
      .map((pair) => ({ pair, ties: ties(pair.split(" "), libraryUnit) }));
    expect(found).toEqual([]);
    const gone = [...listed].filter((pair) => !pairs.has(pair));
    expect(gone, "these folders no longer import each other: remove them from the list").toEqual([]);
  });

  it("reads imports the way TypeScript does, and cycles as they are", () => {
    const source = [
      'import a from "./a.ts";',
      "import {",
      "  type B,",
      "  c as d,",
      '} from "../b.ts";',
      'import type { E } from "./e.ts";',
      'import "./side-effect.ts";',
      'export * as f from "./f.ts";',
      'export { type G } from "./g.ts";',
      'const h = await import("./h.ts");',
      '// import x from "./comment.ts";',
      '/* export * from "./block.ts"; */',
      "const s = \"import y from './string.ts'\";",
      "const t = `",
      'import z from "./template.ts";',
      // biome-ignore lint/suspicious/noTemplateCurlyInString: the scanner's input, a template literal's source
      '${"x" + `${1}`}`;',
      "const r = /[\"'`]/g.test(s) ? 1 / 2 : 3;",
      'export const from = "./not-an-import.ts";',
      "export default import.meta.url;",
      'import last from "./last.ts";',
    ].join("\n");
    expect(importSpecifiers(source)).toEqual([
      { specifier: "./a.ts", line: 1 },
      { specifier: "../b.ts", line: 5 },
      { specifier: "./e.ts", line: 6 },
      { specifier: "./side-effect.ts", line: 7 },
      { specifier: "./f.ts", line: 8 },
      { specifier: "./g.ts", line: 9 },
      { specifier: "./h.ts", line: 10 },
      { specifier: "./last.ts", line: 20 },
    ]);
    const graph: Record<string, string[]> = {
      a: ["b"],
      b: ["c", "a"],
      c: ["d"],
      d: ["c"],
      e: ["a"],
      f: ["f"],
    };
    expect(cyclesOf(Object.keys(graph), (n) => graph[n] ?? [])).toEqual([["a", "b"], ["c", "d"], ["f"]]);
  });
});

describe("jobfence/cdk (infra/cdk.ts)", () => {
  /** The files `entry` reaches through relative imports (type-only ones too), itself included. */
  const reachableFrom = (entry: string): Set<string> => {
    const seen = new Set([entry]);
    const queue = [entry];
    for (let file = queue.shift(); file !== undefined; file = queue.shift()) {
      for (const { to } of IMPORTS.get(file) ?? []) {
        if (!seen.has(to)) {
          seen.add(to);
          queue.push(to);
        }
      }
    }
    return seen;
  };
  const REGISTRY = ["functions/consumers.ts", "functions/registry.ts"];

  it("reaches nothing that imports this repository's consumer registry", () => {
    const reached = reachableFrom("infra/cdk.ts");
    expect(reached.has("infra/constructs/job-consumer.ts")).toBe(true);
    const offending = GRAPH.edges
      .filter((e) => reached.has(e.from) && REGISTRY.includes(e.to))
      .map((e) => `${e.from}:${e.line} imports ${e.to}`);
    expect(offending).toEqual([]);
  });

  it("bundles jobfence's own functions from entries that reach nothing of the registry", () => {
    // Every entry the constructs name by jobfenceEntry("<name>"): what a user's app deploys.
    const named = [...reachableFrom("infra/cdk.ts")]
      .filter((file) => file.startsWith("infra/") && file.endsWith(".ts"))
      .flatMap((file) =>
        [...readFileSync(join(ROOT, file), "utf8").matchAll(/jobfenceEntry\(\s*"([a-z-]+)"\s*\)/g)].map(
          (m) => m[1] as string,
        ),
      );
    const entries = [...new Set(named)].sort().map((name) => `functions/${name}/handler.ts`);
    expect(entries).toEqual(
      expect.arrayContaining([
        "functions/backstop-drain/handler.ts",
        "functions/doctor/handler.ts",
        "functions/migrate/handler.ts",
      ]),
    );
    const offending = entries.flatMap((entry) => {
      expect(GRAPH.files, entry).toContain(entry);
      const reached = reachableFrom(entry);
      return GRAPH.edges
        .filter((e) => reached.has(e.from) && REGISTRY.includes(e.to))
        .map((e) => `${entry}: ${e.from}:${e.line} imports ${e.to}`);
    });
    expect(offending).toEqual([]);
  });

  it("is the only way the reference stack reaches the constructs, as a user's app does", () => {
    const outside = (IMPORTS.get("infra/reference-stack.ts") ?? [])
      .filter((e) => e.to.startsWith("infra/") && e.to !== "infra/cdk.ts")
      .map((e) => `infra/reference-stack.ts:${e.line} imports ${e.to}`);
    expect(outside).toEqual([]);
    expect((IMPORTS.get("infra/reference-stack.ts") ?? []).map((e) => e.to)).toContain("infra/cdk.ts");
  });
});
