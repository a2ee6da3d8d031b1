/** What `npm run release` checks before it proves and tags a version. Pure. */

/** Why this tree cannot be released as `version`, or nothing. */
export function releaseProblems(
  version: string,
  changelog: string,
  status: string,
  tags: readonly string[],
): string[] {
  const problems: string[] = [];
  if (!/^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?$/.test(version))
    problems.push(`package.json's version "${version}" is not a semantic version`);
  if (status !== "") problems.push(`the working tree has changes: commit or stash them first\n${status}`);
  const entry = new RegExp(`^## ${version.replaceAll(".", "\\.")}(?:\\s|$)`, "m");
  if (!entry.test(changelog))
    problems.push(`CHANGELOG.md has no "## ${version}" entry: say what the release changes`);
  if (tags.includes(`v${version}`)) problems.push(`tag v${version} exists: bump the version in package.json`);
  return problems;
}
