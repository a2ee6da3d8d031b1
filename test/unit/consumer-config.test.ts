import { describe, expect, it } from "vitest";
import {
  CONSUMER_DEFAULTS,
  CONSUMER_ENV,
  type ConsumerConfigInput,
  consumerConfigFromEnv,
  parseConsumerConfig,
} from "../../shared/config/consumer-config.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";

const DATABASE_URL = "postgres://consumer:secret@localhost:5432/jobfence";
const BUS = "jobfence-ops";

/** The ConfigurationError `fn` throws; fails the test when it throws anything else or nothing. */
function configurationErrorOf(fn: () => unknown): ConfigurationError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigurationError);
    return error as ConfigurationError;
  }
  throw new Error("expected a ConfigurationError");
}

/** The environment variable each problem names (the text before the first colon). */
function variablesNamed(error: ConfigurationError): string[] {
  return error.problems.map((problem) => problem.slice(0, problem.indexOf(":"))).sort();
}

describe("CONSUMER_DEFAULTS", () => {
  it("keeps fences 21 days against 4 days' retention and a 14-day backstop, waits 5 s for a fence lock and pools 2 connections", () => {
    expect(CONSUMER_DEFAULTS).toEqual({
      fenceTtlSeconds: 1_814_400,
      queueRetentionSeconds: 345_600,
      backstopRetentionSeconds: 1_209_600,
      functionTimeoutSeconds: 30,
      lockTimeoutMs: 5000,
      poolMax: 2,
      maxInterruptions: 2,
      batchingWindowSeconds: 0,
    });
    expect(CONSUMER_DEFAULTS.fenceTtlSeconds).toBe(21 * 24 * 60 * 60);
    expect(Object.isFrozen(CONSUMER_DEFAULTS)).toBe(true);
  });
});

describe("CONSUMER_ENV", () => {
  it("names one environment variable per configuration key", () => {
    expect(CONSUMER_ENV).toEqual({
      databaseUrl: "DATABASE_URL",
      dbSecretArn: "JOBFENCE_DB_SECRET_ARN",
      dbHost: "JOBFENCE_DB_HOST",
      dbPort: "JOBFENCE_DB_PORT",
      dbName: "JOBFENCE_DB_NAME",
      dbSslMode: "JOBFENCE_DB_SSLMODE",
      opsBusName: "JOBFENCE_OPS_BUS_NAME",
      queueUrl: "JOBFENCE_QUEUE_URL",
      fenceTtlSeconds: "JOBFENCE_FENCE_TTL_SECONDS",
      queueRetentionSeconds: "JOBFENCE_QUEUE_RETENTION_SECONDS",
      backstopRetentionSeconds: "JOBFENCE_BACKSTOP_RETENTION_SECONDS",
      functionTimeoutSeconds: "JOBFENCE_FUNCTION_TIMEOUT_SECONDS",
      lockTimeoutMs: "JOBFENCE_LOCK_TIMEOUT_MS",
      poolMax: "JOBFENCE_POOL_MAX",
      dbRole: "JOBFENCE_DB_ROLE",
      maxReceiveCount: "JOBFENCE_MAX_RECEIVE_COUNT",
      visibilityTimeoutSeconds: "JOBFENCE_VISIBILITY_TIMEOUT_SECONDS",
      batchingWindowSeconds: "JOBFENCE_BATCHING_WINDOW_SECONDS",
      fifo: "JOBFENCE_FIFO",
      maxInterruptions: "JOBFENCE_MAX_INTERRUPTIONS",
      recordBudgetMs: "JOBFENCE_RECORD_BUDGET_MS",
      returnReserveMs: "JOBFENCE_RETURN_RESERVE_MS",
      outboxQueues: "JOBFENCE_OUTBOX_QUEUES",
    });
  });
});

describe("parseConsumerConfig", () => {
  it("applies the defaults to what is left out", () => {
    expect(parseConsumerConfig({ databaseUrl: DATABASE_URL, opsBusName: BUS })).toEqual({
      databaseUrl: DATABASE_URL,
      opsBusName: BUS,
      fenceTtlSeconds: CONSUMER_DEFAULTS.fenceTtlSeconds,
      queueRetentionSeconds: CONSUMER_DEFAULTS.queueRetentionSeconds,
      backstopRetentionSeconds: CONSUMER_DEFAULTS.backstopRetentionSeconds,
      functionTimeoutSeconds: CONSUMER_DEFAULTS.functionTimeoutSeconds,
      lockTimeoutMs: CONSUMER_DEFAULTS.lockTimeoutMs,
      maxInterruptions: CONSUMER_DEFAULTS.maxInterruptions,
      batchingWindowSeconds: CONSUMER_DEFAULTS.batchingWindowSeconds,
      outboxQueues: {},
    });
  });

  it("keeps every value given", () => {
    const input = {
      databaseUrl: "postgresql://u@db.internal/app",
      opsBusName: "ops/bus.name-1",
      queueUrl: "https://sqs.eu-west-1.amazonaws.com/123456789012/orders",
      fenceTtlSeconds: 86_400,
      queueRetentionSeconds: 3600,
      backstopRetentionSeconds: 7200,
      functionTimeoutSeconds: 60,
      lockTimeoutMs: 250,
      poolMax: 100,
      dbRole: "jobfence_consumer",
      maxReceiveCount: 19,
      visibilityTimeoutSeconds: 360,
      batchingWindowSeconds: 5,
      fifo: true,
      maxInterruptions: 3,
      recordBudgetMs: 20_000,
      returnReserveMs: 3000,
      outboxQueues: { "notify-user": "https://sqs.eu-west-1.amazonaws.com/123456789012/notify-user" },
    };
    expect(parseConsumerConfig(input)).toEqual(input);
  });

  it("refuses an unknown key", () => {
    const input = { databaseUrl: DATABASE_URL, opsBusName: BUS, lockTimeoutSeconds: 5 };
    const error = configurationErrorOf(() => parseConsumerConfig(input));
    expect(error.problems).toHaveLength(1);
    expect(error.problems[0]).toMatch(/^\(root\):/);
    expect(error.problems[0]).toContain("lockTimeoutSeconds");
  });

  it.each([
    "mysql://u@localhost/db",
    "http://localhost:5432/db",
    "localhost:5432",
    "postgres:/missing-slash",
    " postgres://leading-space",
    "",
  ])("refuses a database URL that is not postgres:// (%j)", (databaseUrl) => {
    const error = configurationErrorOf(() => parseConsumerConfig({ databaseUrl, opsBusName: BUS }));
    expect(error.problems).toHaveLength(1);
    expect(error.problems[0]).toMatch(/^databaseUrl:/);
  });

  it.each(["postgres://h/db", "postgresql://u:p@h:5432/db?sslmode=require"])("accepts %s", (databaseUrl) => {
    expect(parseConsumerConfig({ databaseUrl, opsBusName: BUS }).databaseUrl).toBe(databaseUrl);
  });

  it.each(["", "has space", "x".repeat(257)])("refuses a bus name %j", (opsBusName) => {
    const error = configurationErrorOf(() => parseConsumerConfig({ databaseUrl: DATABASE_URL, opsBusName }));
    expect(error.problems).toHaveLength(1);
    expect(error.problems[0]).toMatch(/^opsBusName:/);
  });

  it.each<[string, Partial<ConsumerConfigInput>]>([
    ["a zero TTL", { fenceTtlSeconds: 0 }],
    ["a negative lock timeout", { lockTimeoutMs: -1 }],
    ["a fractional pool size", { poolMax: 1.5 }],
    ["a pool above 100", { poolMax: 101 }],
    ["a queue URL that is not a URL", { queueUrl: "orders" }],
    ["a role name that is not a plain identifier", { dbRole: "jobfence consumer; DROP ROLE x" }],
    ["a quoted role name", { dbRole: '"JobFence"' }],
    ["outbox queues that are not JSON", { outboxQueues: "{notify-user}" }],
    [
      "an outbox target that is not a consumer name",
      { outboxQueues: { "Notify User": "https://q.example/x" } },
    ],
    ["an outbox queue that is not a URL", { outboxQueues: { "notify-user": "notify-user" } }],
  ])("refuses %s", (_label, change) => {
    const error = configurationErrorOf(() =>
      parseConsumerConfig({ databaseUrl: DATABASE_URL, opsBusName: BUS, ...change }),
    );
    expect(error.problems).toHaveLength(1);
  });

  it("reports every problem together, naming the source", () => {
    const error = configurationErrorOf(() =>
      parseConsumerConfig(
        { databaseUrl: "mysql://x", opsBusName: "bad name", poolMax: 0 },
        "reference consumer",
      ),
    );
    expect(error.problems).toHaveLength(3);
    expect(error.message).toMatch(/^invalid reference consumer configuration/);
    for (const problem of error.problems) expect(error.message).toContain(problem);
  });

  it("names the default source 'consumer'", () => {
    const error = configurationErrorOf(() => parseConsumerConfig({ databaseUrl: "x", opsBusName: BUS }));
    expect(error.message).toMatch(/^invalid consumer configuration/);
  });
});

describe("consumerConfigFromEnv", () => {
  const minimal = { DATABASE_URL, JOBFENCE_OPS_BUS_NAME: BUS };

  it("reads the required variables and applies the defaults", () => {
    expect(consumerConfigFromEnv(minimal)).toEqual({
      databaseUrl: DATABASE_URL,
      opsBusName: BUS,
      fenceTtlSeconds: 1_814_400,
      queueRetentionSeconds: 345_600,
      backstopRetentionSeconds: 1_209_600,
      functionTimeoutSeconds: 30,
      lockTimeoutMs: 5000,
      maxInterruptions: 2,
      batchingWindowSeconds: 0,
      outboxQueues: {},
    });
  });

  it("reads every variable and turns the numeric ones into numbers", () => {
    const config = consumerConfigFromEnv({
      ...minimal,
      JOBFENCE_QUEUE_URL: "https://sqs.us-east-1.amazonaws.com/123456789012/orders.fifo",
      JOBFENCE_FENCE_TTL_SECONDS: "86400",
      JOBFENCE_QUEUE_RETENTION_SECONDS: "7200",
      JOBFENCE_BACKSTOP_RETENTION_SECONDS: "86400",
      JOBFENCE_FUNCTION_TIMEOUT_SECONDS: "15",
      JOBFENCE_LOCK_TIMEOUT_MS: "1500",
      JOBFENCE_POOL_MAX: "4",
      JOBFENCE_DB_ROLE: "jobfence_consumer",
      JOBFENCE_MAX_RECEIVE_COUNT: "100",
      JOBFENCE_VISIBILITY_TIMEOUT_SECONDS: "90",
      JOBFENCE_BATCHING_WINDOW_SECONDS: "2",
      JOBFENCE_FIFO: "true",
      JOBFENCE_MAX_INTERRUPTIONS: "3",
      JOBFENCE_RECORD_BUDGET_MS: "5000",
      JOBFENCE_RETURN_RESERVE_MS: "1500",
      JOBFENCE_OUTBOX_QUEUES:
        '{"notify-user":"https://sqs.us-east-1.amazonaws.com/123456789012/notify-user"}',
    });
    expect(config).toEqual({
      databaseUrl: DATABASE_URL,
      opsBusName: BUS,
      queueUrl: "https://sqs.us-east-1.amazonaws.com/123456789012/orders.fifo",
      fenceTtlSeconds: 86_400,
      queueRetentionSeconds: 7200,
      backstopRetentionSeconds: 86_400,
      functionTimeoutSeconds: 15,
      lockTimeoutMs: 1500,
      poolMax: 4,
      dbRole: "jobfence_consumer",
      maxReceiveCount: 100,
      visibilityTimeoutSeconds: 90,
      batchingWindowSeconds: 2,
      fifo: true,
      maxInterruptions: 3,
      recordBudgetMs: 5000,
      returnReserveMs: 1500,
      outboxQueues: { "notify-user": "https://sqs.us-east-1.amazonaws.com/123456789012/notify-user" },
    });
    expect(typeof config.lockTimeoutMs).toBe("number");
  });

  it("treats an empty variable as unset, so its default applies", () => {
    const config = consumerConfigFromEnv({
      ...minimal,
      JOBFENCE_LOCK_TIMEOUT_MS: "",
      JOBFENCE_QUEUE_URL: "",
    });
    expect(config.lockTimeoutMs).toBe(CONSUMER_DEFAULTS.lockTimeoutMs);
    expect(config.queueUrl).toBeUndefined();
  });

  it("ignores variables it does not read", () => {
    const config = consumerConfigFromEnv({ ...minimal, AWS_REGION: "eu-west-1", JOBFENCE_UNRELATED: "x" });
    expect(config).not.toHaveProperty("AWS_REGION");
    expect(Object.keys(config).sort()).toEqual([
      "backstopRetentionSeconds",
      "batchingWindowSeconds",
      "databaseUrl",
      "fenceTtlSeconds",
      "functionTimeoutSeconds",
      "lockTimeoutMs",
      "maxInterruptions",
      "opsBusName",
      "outboxQueues",
      "queueRetentionSeconds",
    ]);
  });

  it("reads process.env when given no environment", () => {
    const saved = {
      DATABASE_URL: process.env.DATABASE_URL,
      JOBFENCE_OPS_BUS_NAME: process.env.JOBFENCE_OPS_BUS_NAME,
    };
    process.env.DATABASE_URL = DATABASE_URL;
    process.env.JOBFENCE_OPS_BUS_NAME = "from-process-env";
    try {
      expect(consumerConfigFromEnv().opsBusName).toBe("from-process-env");
    } finally {
      for (const [key, value] of Object.entries(saved)) {
        if (value === undefined) delete process.env[key];
        else process.env[key] = value;
      }
    }
  });

  it("reports a missing DATABASE_URL and JOBFENCE_OPS_BUS_NAME together", () => {
    const error = configurationErrorOf(() => consumerConfigFromEnv({}));
    expect(variablesNamed(error)).toEqual(["DATABASE_URL", "JOBFENCE_OPS_BUS_NAME"]);
    expect(error.message).toMatch(/^invalid consumer environment configuration/);
  });

  it.each(["soon", "5s", "1.5", "0", "-100", " "])(
    "refuses JOBFENCE_LOCK_TIMEOUT_MS=%j, naming the variable",
    (value) => {
      const error = configurationErrorOf(() =>
        consumerConfigFromEnv({ ...minimal, JOBFENCE_LOCK_TIMEOUT_MS: value }),
      );
      expect(variablesNamed(error)).toEqual(["JOBFENCE_LOCK_TIMEOUT_MS"]);
    },
  );

  it("reports every problem at once, each naming its environment variable", () => {
    const error = configurationErrorOf(() =>
      consumerConfigFromEnv({
        DATABASE_URL: "mysql://u@h/db",
        JOBFENCE_QUEUE_URL: "orders",
        JOBFENCE_FENCE_TTL_SECONDS: "a week",
        JOBFENCE_LOCK_TIMEOUT_MS: "NaN",
        JOBFENCE_POOL_MAX: "101",
        JOBFENCE_DB_ROLE: "Bad-Role",
      }),
    );
    expect(variablesNamed(error)).toEqual([
      "DATABASE_URL",
      "JOBFENCE_DB_ROLE",
      "JOBFENCE_FENCE_TTL_SECONDS",
      "JOBFENCE_LOCK_TIMEOUT_MS",
      "JOBFENCE_OPS_BUS_NAME",
      "JOBFENCE_POOL_MAX",
      "JOBFENCE_QUEUE_URL",
    ]);
    for (const problem of error.problems) expect(problem).not.toMatch(/^(databaseUrl|poolMax|lockTimeoutMs)/);
  });
});
