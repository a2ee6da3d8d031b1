/** Lambda entry point of the award-points consumer; configured from the environment at init. */
import { createConsumer } from "../../shared/index.ts";
import { awardPointsConsumer } from "./consumer.ts";

export const handler = createConsumer(awardPointsConsumer);
