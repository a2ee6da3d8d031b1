/**
 * Lambda entry point of the notify-user consumer, configured from the environment at init. Generated
 * from the consumer registry (functions/consumers.ts): the synth and the local stack refuse any
 * other text here. Rewrite it with `npm run new-consumer -- --entries`.
 */
import { createConsumer } from "../../shared/index.ts";
import { notifyUserConsumer } from "./consumer.ts";

export const handler = createConsumer(notifyUserConsumer);
