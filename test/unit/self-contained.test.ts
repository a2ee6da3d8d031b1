/**
 * The repository carries its own contract (docs/design.md) and never points outside itself: no
 * file cites documents that only exist beside the repository (the old product specification, its
 * seed documents, the toolchain and style notes), no markdown link or relative path leaves the
 * repository, and every relative link in a markdown file reaches a file (and heading) that exists.
 *
 * The files are the repository's own, as test/support/repository-files.ts lists them.
 */
import { existsSync, readFileSync } from "node:fs";
import { dirname, isAbsolute, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { isFile, ROOT, repositoryFiles } from "../support/repository-files.ts";

/**
 * Strings that can only mean something outside the repository. The patterns are spelled with
 * character classes so that this file does not match them itself.
 */
const OUTSIDE_REFERENCES: readonly { readonly pattern: RegExp; readonly what: string }[] = [
  { pattern: /\bS[P]EC\b/g, what: "the old product specification (cite docs/design.md instead)" },
  { pattern: /\bseed[s]\//g, what: "the seed documents beside the repository" },
  { pattern: /\bTOOLCHAI[N]\.md\b/g, what: "the toolchain notes beside the repository" },
  { pattern: /\bSTYL[E]\.md\b/g, what: "the style notes beside the repository" },
];

/**
 * Applied migrations whose comments still cite the old specification by section. They cannot be
 * edited: the migration runner records each applied file's SHA-256 and refuses to run against a
 * database where a recorded migration's file has changed (docs/schema.md, "Migration runner"), so
 * changing a comment would stop every deployed database from migrating. Their sections map onto
 * docs/design.md; new migrations must not add to this list.
 */
const APPLIED_MIGRATIONS_CITING_THE_OLD_SPEC: readonly string[] = [
  "shared/db/migrations/0001_processed_jobs.sql",
  "shared/db/migrations/0002_dead_letters.sql",
  "shared/db/migrations/0003_roles.sql",
  "shared/db/migrations/0005_fence_cleanup.sql",
  "shared/db/migrations/0006_login_provisioning.sql",
  "shared/db/migrations/0007_identity_lengths.sql",
  "shared/db/migrations/0008_fingerprints_and_stored_bodies.sql",
  "shared/db/migrations/0009_attempt_ledger.sql",
  "shared/db/migrations/0011_failure_groups.sql",
  "shared/db/migrations/0012_bulk_operations.sql",
  "shared/db/migrations/0013_dead_letter_writes_hold_fences.sql",
];

/** A fenced code block, from its opening fence to its closing one (or the end of the file). */
const FENCED_BLOCK = /^ {0,3}(`{3,}|~{3,})[^\n]*\n[\s\S]*?(?:^ {0,3}\1[`~]*[ \t]*$|(?![\s\S]))/gm;

/** An inline code span: a run of backticks, text not crossing a blank line, the same run again. */
const CODE_SPAN = /(`+)(?!`)(?:[^\n]|\n(?![ \t]*\n))*?[^`\n]\1(?!`)/g;

/** `text` with each match of `pattern` blanked out: same length, newlines kept, so lines still match. */
function blankOut(text: string, pattern: RegExp): string {
  return text.replace(pattern, (s) => s.replace(/[^\n]/g, " "));
}

/** The repository's text files and their content; a file holding a NUL byte counts as binary. */
function textFiles(): Map<string, string> {
  const texts = new Map<string, string>();
  for (const file of repositoryFiles()) {
    const bytes = readFileSync(join(ROOT, file));
    if (!bytes.includes(0)) texts.set(file, bytes.toString("utf8"));
  }
  return texts;
}

/** Whether `path` (absolute) is the repository root or inside it. */
function insideRepository(path: string): boolean {
  const rel = relative(ROOT, path);
  return rel === "" || (!rel.startsWith("..") && !isAbsolute(rel));
}

/** The line (1-based) of `index` in `text`. */
function lineOf(text: string, index: number): number {
  let line = 1;
  for (let i = 0; i < index; i++) if (text.charCodeAt(i) === 10) line++;
  return line;
}

/**
 * Markdown with fenced code blocks and inline code spans blanked out (same length, newlines kept),
 * so that code examples are not read as links and line numbers still match.
 */
function proseOf(markdown: string): string {
  return blankOut(blankOut(markdown, FENCED_BLOCK), CODE_SPAN);
}

/** The anchors GitHub gives a markdown file's headings (and explicit `<a id>`/`<a name>` anchors). */
function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const line of blankOut(markdown, FENCED_BLOCK).split("\n")) {
    const heading = /^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$/.exec(line);
    if (heading) {
      const text = (heading[1] ?? "")
        .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1")
        .replace(/<[^>]*>/g, "")
        .toLowerCase();
      const slug = text.replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, "").replace(/ /g, "-");
      const count = seen.get(slug) ?? 0;
      seen.set(slug, count + 1);
      anchors.add(count === 0 ? slug : `${slug}-${count}`);
    }
    for (const explicit of line.matchAll(/<a\s+(?:[^>]*\s)?(?:id|name)="([^"]+)"/g)) {
      if (explicit[1]) anchors.add(explicit[1]);
    }
  }
  return anchors;
}

/** Every link target of a markdown file's prose, with its line. */
function linksOf(markdown: string): { target: string; line: number }[] {
  const prose = proseOf(markdown);
  const links: { target: string; line: number }[] = [];
  const patterns = [
    // [text](target "title") and ![alt](target)
    /!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^\s)>]+)>?(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)/g,
    // [label]: target
    /^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)/gm,
    // <a href="target">, <img src="target">
    /<(?:a|img)\s[^>]*?(?:href|src)="([^"]+)"/g,
  ];
  for (const pattern of patterns) {
    for (const match of prose.matchAll(pattern)) {
      if (match[1]) links.push({ target: match[1], line: lineOf(prose, match.index ?? 0) });
    }
  }
  return links;
}

/** What is wrong with a link from `file`, or null when it reaches a file (and anchor) in the repository. */
function brokenLink(file: string, target: string, anchorCache: Map<string, Set<string>>): string | null {
  if (/^[a-z][a-z0-9+.-]*:/i.test(target)) return null; // https:, mailto:, urn:, …
  const hash = target.indexOf("#");
  const pathPart = (hash === -1 ? target : target.slice(0, hash)).replace(/\?.*$/, "");
  const anchor = hash === -1 ? "" : target.slice(hash + 1);
  let decoded: string;
  try {
    decoded = decodeURIComponent(pathPart);
  } catch {
    return "is not a valid URL";
  }
  const absolute =
    decoded === ""
      ? join(ROOT, file)
      : decoded.startsWith("/")
        ? join(ROOT, decoded)
        : resolve(ROOT, dirname(file), decoded);
  if (!insideRepository(absolute)) return `resolves outside the repository (${absolute})`;
  if (!existsSync(absolute)) return `names ${relative(ROOT, absolute)}, which does not exist`;
  if (anchor !== "" && absolute.endsWith(".md")) {
    const key = relative(ROOT, absolute);
    let anchors = anchorCache.get(key);
    if (anchors === undefined) {
      anchors = anchorsOf(readFileSync(absolute, "utf8"));
      anchorCache.set(key, anchors);
    }
    let wanted: string;
    try {
      wanted = decodeURIComponent(anchor).toLowerCase();
    } catch {
      return "has an anchor that is not valid URL encoding";
    }
    if (!anchors.has(wanted)) return `names the heading #${anchor}, which ${key} does not have`;
  }
  return null;
}

/**
 * Relative paths written out in a markdown file's prose (`../x`, as text or in inline code) that
 * climb out of the repository.
 */
function climbingPaths(file: string, markdown: string): { path: string; line: number }[] {
  const text = blankOut(markdown, FENCED_BLOCK);
  const found: { path: string; line: number }[] = [];
  for (const match of text.matchAll(/(?<![\w./-])((?:\.\.\/)+[\w.\-/]*)/g)) {
    const path = match[1] ?? "";
    if (!insideRepository(resolve(ROOT, dirname(file), path)))
      found.push({ path, line: lineOf(text, match.index ?? 0) });
  }
  return found;
}

const FILES = textFiles();
const MARKDOWN = [...FILES].filter(([file]) => file.endsWith(".md"));

describe("the repository is self-contained", () => {
  it("finds the repository's files", () => {
    expect(FILES.has("README.md")).toBe(true);
    expect(FILES.has("docs/design.md")).toBe(true);
    expect(FILES.has("test/unit/self-contained.test.ts")).toBe(true);
    expect([...FILES.keys()].some((file) => file.startsWith("node_modules/"))).toBe(false);
  });

  it("no file cites a document that lives outside the repository", () => {
    const exempt = new Set(APPLIED_MIGRATIONS_CITING_THE_OLD_SPEC);
    const found: string[] = [];
    for (const [file, text] of FILES) {
      if (exempt.has(file)) continue;
      for (const { pattern, what } of OUTSIDE_REFERENCES) {
        for (const match of text.matchAll(pattern)) {
          found.push(`${file}:${lineOf(text, match.index ?? 0)}: "${match[0]}" refers to ${what}`);
        }
      }
    }
    expect(found).toEqual([]);
  });

  it("the applied migrations exempted above exist and still need it", () => {
    const stale = APPLIED_MIGRATIONS_CITING_THE_OLD_SPEC.filter((file) => {
      const text = FILES.get(file);
      return text === undefined || !OUTSIDE_REFERENCES.some(({ pattern }) => new RegExp(pattern).test(text));
    });
    expect(stale, "remove these from APPLIED_MIGRATIONS_CITING_THE_OLD_SPEC").toEqual([]);
  });

  it("every relative link in a markdown file reaches a file (and heading) inside the repository", () => {
    const anchorCache = new Map<string, Set<string>>();
    const broken: string[] = [];
    for (const [file, text] of MARKDOWN) {
      for (const { target, line } of linksOf(text)) {
        const problem = brokenLink(file, target, anchorCache);
        if (problem !== null) broken.push(`${file}:${line}: (${target}) ${problem}`);
      }
    }
    expect(broken).toEqual([]);
  });

  it("no markdown file names a relative path that climbs out of the repository", () => {
    const found = MARKDOWN.flatMap(([file, text]) =>
      climbingPaths(file, text).map(({ path, line }) => `${file}:${line}: ${path}`),
    );
    expect(found).toEqual([]);
  });

  it("every docs/ page a file names exists", () => {
    const missing: string[] = [];
    for (const [file, text] of FILES) {
      for (const match of text.matchAll(/(?<![\w./-])docs\/[\w.-]+\.(?:md|json)\b/g)) {
        if (!FILES.has(match[0]) && !isFile(join(ROOT, match[0])))
          missing.push(`${file}:${lineOf(text, match.index ?? 0)}: ${match[0]}`);
      }
    }
    expect(missing).toEqual([]);
  });

  it("the README points readers at the design document", () => {
    expect(FILES.get("README.md")).toMatch(/\]\(docs\/design\.md\)/);
  });

  it("reads links, anchors and code the way GitHub renders them", () => {
    const page = [
      "# Title",
      "## 2. The `core.x` table — notes",
      "## Title",
      "See [a](other.md#2-the-corex-table--notes) and [b](#title-1).",
      "Code: `[not](a-link.md)`",
      "```md",
      "[also not](a-link.md)",
      "# not a heading",
      "```",
      "[ref]: ../../outside.md",
    ].join("\n");
    expect([...anchorsOf(page)]).toEqual(["title", "2-the-corex-table--notes", "title-1"]);
    expect(linksOf(page).map((l) => [l.target, l.line])).toEqual([
      ["other.md#2-the-corex-table--notes", 4],
      ["#title-1", 4],
      ["../../outside.md", 10],
    ]);
    expect(climbingPaths("guide/page.md", page).map((p) => p.path)).toEqual(["../../outside.md"]);
    expect(brokenLink("guide/page.md", "../../outside.md", new Map())).toMatch(/outside the repository/);
    expect(brokenLink("guide/page.md", "https://example.com/x", new Map())).toBeNull();
    expect(brokenLink("README.md", "docs/design.md#2-the-job-envelope", new Map())).toBeNull();
    expect(brokenLink("README.md", "docs/design.md#no-such-heading", new Map())).toMatch(/does not have/);
    expect(brokenLink("README.md", "no-such-page.md", new Map())).toMatch(/does not exist/);
  });
});
