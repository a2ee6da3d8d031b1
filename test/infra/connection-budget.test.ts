/**
 * The connection budget: every consumer and backstop-drain invocation holds its pool's
 * connections, and so does a sending consumer's outbox relay, so the reference stack refuses
 * consumers whose worst case exceeds the budget it declares, and refuses provisioned pollers, which
 * scale furthest, without one.
 */
import { Template } from "aws-cdk-lib/assertions";
import { describe, expect, it } from "vitest";
import { CONSUMERS, type ConsumerDeployment } from "../../functions/consumers.ts";
import { type ConsumerConnections, validateConnectionBudget } from "../../infra/connection-budget.ts";
import { JobfenceStack } from "../../infra/reference-stack.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { testApp } from "./support.ts";

const awardPoints = CONSUMERS.find((c) => c.definition.name === "award-points") as ConsumerDeployment;
/** award-points' follow-up target: maxConcurrency 2 × 2 + its drain's 2 × 2 = 8 connections, no relay. */
const notifyUser = CONSUMERS.find((c) => c.definition.name === "notify-user") as ConsumerDeployment;
/**
 * 10 pollers reach 100 invocations: 100 × 2 + the drain's 2 × 2 + the outbox relay's 1 × 1 = 205
 * connections, and notify-user's 8: 213.
 */
const provisioned: ConsumerDeployment = {
  ...awardPoints,
  maxConcurrency: 100,
  provisionedPollers: { minimumPollers: 2, maximumPollers: 10 },
};

function stackWith(consumers: readonly ConsumerDeployment[], connectionBudget?: number): JobfenceStack {
  return new JobfenceStack(testApp(), "Budget", {
    jwtIssuer: "https://auth.example.com",
    jwtAudience: "jobfence-ops",
    betterStackEndpoint: "https://in.logs.betterstack.com",
    betterStackSecretName: "jobfence/betterstack",
    emailProviderUrl: "https://email.example.com",
    consumers,
    ...(connectionBudget !== undefined ? { connectionBudget } : {}),
  });
}

function problemsOf(thunk: () => unknown): readonly string[] {
  try {
    thunk();
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigurationError);
    return (error as ConfigurationError).problems;
  }
  throw new Error("expected a ConfigurationError");
}

describe("connection budget of the reference stack", () => {
  it("refuses provisioned pollers when no budget is declared", () => {
    expect(problemsOf(() => stackWith([provisioned, notifyUser]))).toEqual([
      expect.stringMatching(
        /^consumer "award-points" uses provisioned pollers, which can run up to maxConcurrency 100 invocations at once, each holding 2 database connections: declare connectionBudget/,
      ),
    ]);
  });

  it("refuses provisioned pollers whose worst case exceeds the budget, with the arithmetic", () => {
    expect(problemsOf(() => stackWith([provisioned, notifyUser], 212))).toEqual([
      expect.stringMatching(
        /^the consumers, their backstop drains and outbox relays can hold 100 × 2 \(award-points\) \+ 2 × 2 \(its backstop drain\) \+ 1 × 1 \(its outbox relay\) \+ 2 × 2 \(notify-user\) \+ 2 × 2 \(its backstop drain\) = 213 database connections at once .*over connectionBudget 212: .*lower maxConcurrency \(with provisioned pollers, maximumPollers first\), or raise connectionBudget/,
      ),
    ]);
  });

  it("accepts provisioned pollers within the budget, and deploys them", () => {
    const stack = stackWith([provisioned, notifyUser], 213);
    Template.fromStack(stack).hasResourceProperties("AWS::Lambda::EventSourceMapping", {
      ProvisionedPollerConfig: { MinimumPollers: 2, MaximumPollers: 10 },
    });
  });

  it("checks a consumer in on-demand mode too, once a budget is declared", () => {
    // award-points: maxConcurrency 4 × 2 + 2 × 2 + its relay's 1 × 1 = 13; notify-user's 8: 21.
    expect(problemsOf(() => stackWith([awardPoints, notifyUser], 20))).toEqual([
      expect.stringMatching(/= 21 database connections at once .*over connectionBudget 20/),
    ]);
    expect(() => stackWith([awardPoints, notifyUser], 21)).not.toThrow();
  });
});

describe("validateConnectionBudget", () => {
  const of = (
    consumer: string,
    concurrency: number,
    provisionedMode = false,
    relayConcurrency = 0,
  ): ConsumerConnections => ({
    consumer,
    concurrency,
    poolMax: 2,
    drainConcurrency: 2,
    drainPoolMax: 2,
    relayConcurrency,
    relayPoolMax: 1,
    total: concurrency * 2 + 4 + relayConcurrency,
    provisioned: provisionedMode,
    managedInstances: false,
  });

  it("sums every consumer and drain against the budget", () => {
    const consumers = [of("a", 10), of("b", 20)];
    expect(validateConnectionBudget(consumers, 68)).toEqual([]);
    expect(validateConnectionBudget(consumers, 67)).toEqual([
      expect.stringContaining(
        "10 × 2 (a) + 2 × 2 (its backstop drain) + 20 × 2 (b) + 2 × 2 (its backstop drain) = 68 database connections",
      ),
    ]);
  });

  it("counts a sending consumer's outbox relay, one connection, and names it", () => {
    const consumers = [of("a", 10, false, 1), of("b", 20)];
    expect(validateConnectionBudget(consumers, 69)).toEqual([]);
    expect(validateConnectionBudget(consumers, 68)).toEqual([
      expect.stringContaining(
        "10 × 2 (a) + 2 × 2 (its backstop drain) + 1 × 1 (its outbox relay) + 20 × 2 (b) + 2 × 2 (its backstop drain) = 69 database connections",
      ),
    ]);
  });

  it("checks nothing without a budget unless a consumer is provisioned, and refuses a budget that is no count", () => {
    expect(validateConnectionBudget([of("a", 1000)], undefined)).toEqual([]);
    expect(validateConnectionBudget([of("a", 20, true), of("b", 4)], undefined)).toHaveLength(1);
    for (const bad of [0, -5, 2.5, Number.NaN]) {
      expect(validateConnectionBudget([of("a", 4)], bad), String(bad)).toEqual([
        expect.stringMatching(/^connectionBudget must be a whole number of connections, at least 1/),
      ]);
    }
  });
});
