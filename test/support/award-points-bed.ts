/**
 * A database, the SQS emulator and award-points' queues (its own and notify-user's), for tests
 * that build award-points with the real `createConsumer` themselves: a step of their own before
 * its work, their own configuration. Each handler builds its own pool, as a deployed one does.
 */

import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import type { ConsumerConfigInput } from "../../shared/config/consumer-config.ts";
import type { Transaction, WorkJob } from "../../shared/consumer.ts";
import { createConsumer, type HostedConsumer } from "../../shared/consumer.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { createTestQueue } from "../../testing/queue.ts";
import { startTestServices, TEST_OPS_BUS, type TestServices } from "../../testing/services.ts";
import { createTestDatabase, type TestDatabase } from "./database.ts";

type AwardJob = WorkJob<{ user_id: string; points: number }>;

/** What the bed holds, and how to build award-points on it. */
export interface AwardPointsBed {
  readonly db: TestDatabase;
  readonly services: TestServices;
  readonly queueUrl: string;
  readonly notifyUrl: string;
  /** award-points, with `before` run on its transaction ahead of its own work, configured with `configure` besides the bed's. */
  consumer(options?: {
    before?: (job: AwardJob, tx: Transaction<Record<string, never>>) => Promise<unknown>;
    configure?: Partial<ConsumerConfigInput>;
  }): HostedConsumer;
  /** Ends every handler's pool, stops the services, drops the database. */
  close(): Promise<void>;
}

export async function awardPointsBed(): Promise<AwardPointsBed> {
  const [db, services] = await Promise.all([createTestDatabase(), startTestServices()]);
  const queueUrl = (await createTestQueue(services.sqs, services.emulator.endpoint, "award-points")).url;
  const notifyUrl = (await createTestQueue(services.sqs, services.emulator.endpoint, "notify-user")).url;
  const handlers: HostedConsumer[] = [];
  return {
    db,
    services,
    queueUrl,
    notifyUrl,
    consumer({ before, configure = {} } = {}) {
      const handler = createConsumer(
        {
          ...awardPointsConsumer,
          work: async (job, tx) => {
            await before?.(job, tx as unknown as Transaction<Record<string, never>>);
            await awardPointsConsumer.work(job, tx);
          },
        },
        {
          config: {
            databaseUrl: db.url,
            dbRole: consumerRoleName("award-points"),
            opsBusName: TEST_OPS_BUS,
            queueUrl,
            outboxQueues: { "notify-user": notifyUrl },
            ...configure,
          },
          sqs: services.sqs,
          eventBridge: services.eventBridge,
        },
      );
      handlers.push(handler);
      return handler;
    },
    async close() {
      await Promise.all(handlers.map((h) => h.pool.end()));
      await services.stop();
      await db.drop();
    },
  };
}
