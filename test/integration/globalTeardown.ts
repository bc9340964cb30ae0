import { cli } from './testStack';

export default async function globalTeardown() {
  await cli(['down']);
}
