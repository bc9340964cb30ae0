import fs from 'node:fs';
import { cli, TEST_STACK_ENV } from './testStack';

/** Brings the shared test stack up from nothing: a fresh data folder every run. */
export default async function globalSetup() {
  await cli(['down']).catch(() => undefined);
  fs.rmSync(TEST_STACK_ENV.EVALRL_DATA_DIR, { recursive: true, force: true });
  await cli(['up']);
}
