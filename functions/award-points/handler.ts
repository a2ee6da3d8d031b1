/**
 * Lambda entry point of the award-points consumer, configured from the environment at init. Generated
 * from the consumer registry (functions/consumers.ts): the synth and the local stack refuse any
 * other text here. Rewrite it with `npm run new-consumer -- --entries`.
 */
import { createConsumer } from "../../shared/index.ts";
import { awardPointsConsumer } from "./consumer.ts";

export const handler = createConsumer(awardPointsConsumer);
