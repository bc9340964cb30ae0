import { setTimeout as sleep } from 'node:timers/promises';
import { MockActivityEnvironment } from '@temporalio/testing';
import { withSampleHooks } from '../../src/activities/envs';

describe("an activity's sampling", () => {
  it('heartbeats after every model call and while one call outlasts a third of the heartbeat timeout', async () => {
    const env = new MockActivityEnvironment({ heartbeatTimeoutMs: 3000 });
    const beats: unknown[] = [];
    env.on('heartbeat', (d: unknown) => beats.push(d));
    await env.run(() =>
      withSampleHooks(async (hooks) => {
        hooks.onTurn?.(1);
        await sleep(2500); // one long model call: the keep-alive beats at 1 s and 2 s
        hooks.onTurn?.(2);
      }),
    );
    expect(beats[0]).toEqual({ turns: 1 });
    expect(beats.at(-1)).toEqual({ turns: 2 });
    expect(beats.length).toBeGreaterThanOrEqual(3);
    const after = beats.length;
    await sleep(1200);
    expect(beats).toHaveLength(after); // it stops with the work
  });

  it("passes the activity's cancellation to the model calls", async () => {
    const env = new MockActivityEnvironment();
    const run = env.run(() =>
      withSampleHooks(async (hooks) => {
        await sleep(5000, undefined, { signal: hooks.signal });
      }),
    );
    env.cancel();
    await expect(run).rejects.toThrow();
  });
});
