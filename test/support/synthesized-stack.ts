/**
 * The reference stack synthesized once per test run, with real esbuild bundling, for every file
 * that needs its bundles (bundling each function is most of a synthesis: about 15 s on two cores).
 * The first file to ask synthesizes it into the run's directory (run-setup.ts) while any other
 * waits for it; tests of the construct tree build an unbundled stack of their own, which is cheap.
 */
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { App } from "aws-cdk-lib";
import { Template } from "aws-cdk-lib/assertions";
import { inject } from "vitest";
import { JobfenceStack, type JobfenceStackProps } from "../../infra/reference-stack.ts";

/** The id of the shared stack: its template is `<id>.template.json` in the assembly. */
export const REFERENCE_STACK_ID = "Jobfence";

/** The props the shared stack is synthesized with (a test building its own stack uses the same). */
export const REFERENCE_STACK_PROPS = Object.freeze({
  jwtIssuer: "https://auth.example.com",
  jwtAudience: "jobfence-ops",
  betterStackEndpoint: "https://in.logs.betterstack.com",
  betterStackSecretName: "jobfence/betterstack",
  alarmEmails: ["oncall@example.com"],
  emailProviderUrl: "https://email.example.com",
}) satisfies Omit<JobfenceStackProps, "env">;

/** How long a file waits for another to finish the synthesis before giving up. */
export const SYNTHESIS_WAIT_MS = 300_000;
const POLL_MS = 200;

/** The synthesized reference stack: its template, and the directory of each function's bundle. */
export interface SynthesizedStack {
  readonly template: Template;
  /** The cloud assembly's directory (each bundle is an `asset.<hash>` folder in it). */
  readonly assemblyDirectory: string;
  /** The bundle directory of the Lambda function whose description is `description`. */
  bundleOf(description: string): string;
}

interface Outcome {
  readonly templateFile?: string;
  readonly error?: string;
}

let synthesized: Promise<SynthesizedStack> | undefined;

/** The run's synthesized reference stack: built by the first caller of the run, read by the others. */
export function synthesizedReferenceStack(): Promise<SynthesizedStack> {
  synthesized ??= synthesizeOnce(join(inject("runDirectory"), "reference-stack"));
  return synthesized;
}

async function synthesizeOnce(directory: string): Promise<SynthesizedStack> {
  const assemblyDirectory = join(directory, "cdk.out");
  const outcomeFile = join(directory, "outcome.json");
  let outcome: Outcome;
  if (await claim(directory)) {
    try {
      const app = new App({ outdir: assemblyDirectory });
      new JobfenceStack(app, REFERENCE_STACK_ID, REFERENCE_STACK_PROPS);
      const artifact = app.synth().getStackArtifact(REFERENCE_STACK_ID);
      outcome = { templateFile: artifact.templateFile };
    } catch (error) {
      outcome = { error: error instanceof Error ? (error.stack ?? error.message) : String(error) };
    }
    // Renamed into place, so a waiting file never reads half of it.
    await writeFile(`${outcomeFile}.partial`, JSON.stringify(outcome));
    await rename(`${outcomeFile}.partial`, outcomeFile);
  } else {
    outcome = await waitFor(outcomeFile);
  }
  if (!outcome.templateFile) throw new Error(`synthesizing the reference stack failed:\n${outcome.error}`);
  const template = Template.fromJSON(
    JSON.parse(await readFile(join(assemblyDirectory, outcome.templateFile), "utf8")),
  );
  return {
    template,
    assemblyDirectory,
    bundleOf(description) {
      const functions = Object.values(
        template.findResources("AWS::Lambda::Function", { Properties: { Description: description } }),
      );
      if (functions.length !== 1) {
        throw new Error(
          `${functions.length} functions of the reference stack are described "${description}"`,
        );
      }
      const key = String(functions[0]?.Properties.Code.S3Key);
      return join(assemblyDirectory, `asset.${key.replace(/\.zip$/, "")}`);
    },
  };
}

/** Whether this process is the one to synthesize (creating the directory is the lock). */
async function claim(directory: string): Promise<boolean> {
  try {
    await mkdir(directory);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw error;
  }
}

async function waitFor(outcomeFile: string): Promise<Outcome> {
  const deadline = Date.now() + SYNTHESIS_WAIT_MS;
  for (;;) {
    const text = await readFile(outcomeFile, "utf8").catch(() => undefined);
    if (text) return JSON.parse(text) as Outcome;
    if (Date.now() > deadline) {
      throw new Error(
        `another test file did not finish synthesizing the reference stack in ${SYNTHESIS_WAIT_MS} ms`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}
