import { cli } from './testStack';

/** Stops the shared test stack; EVALRL_KEEP_TEST_STACK=1 leaves it up to look at what a test stored. */
export default async function globalTeardown() {
  if (process.env.EVALRL_KEEP_TEST_STACK !== '1') await cli(['down']);
}
