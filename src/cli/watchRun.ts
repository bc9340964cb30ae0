import cliProgress from 'cli-progress';
import type { Config } from '../config';
import { createPool } from '../db/pool';
import { RunClient } from '../runs/runClient';
import type { RunStatus } from '../workflows/trainingRun';
import { describeRun, duration, sparkline } from './runFormat';

/** Redraws the run's progress until it ends; reward and success histories come from PostgreSQL. */
export async function watchRun(config: Config, runId: string, intervalMs = 2000): Promise<RunStatus> {
  const pool = createPool(config, 1);
  const runs = await RunClient.connect(config);
  const interactive = process.stdout.isTTY;
  const bars = new cliProgress.MultiBar(
    {
      format: '{stage} |{bar}| step {value}/{total} {phase}  reward {reward}  success {success}',
      hideCursor: true,
      clearOnComplete: false,
      noTTYOutput: !interactive,
      notTTYSchedule: intervalMs,
    },
    cliProgress.Presets.shades_classic,
  );
  const stageBars = new Map<string, cliProgress.SingleBar>();
  const header = bars.create(1, 0, {}, { format: '{line}' });
  let s: RunStatus;
  try {
    for (;;) {
      s = await runs.status(runId);
      const history = await pool.query<{ stage: string; reward: number; success: number }>(
        `SELECT stage, (metrics->>'reward/mean')::float AS reward, (metrics->>'success/rate')::float AS success
         FROM step_metrics WHERE run_id = $1 ORDER BY stage, step`,
        [runId],
      );
      header.update(0, {
        line: `run ${runId}: ${s.state}, phase ${s.phase}, ETA ${duration(s.etaSeconds)}${s.blocked ? ` — BLOCKED: ${s.blocked.error}` : ''}`,
      });
      for (const [stage, st] of Object.entries(s.stages)) {
        if (!st) continue;
        const rows = history.rows.filter((r) => r.stage === stage);
        const payload = {
          stage: stage.padEnd(11),
          phase: st.phase.padEnd(10),
          reward: sparkline(rows.map((r) => r.reward)),
          success: sparkline(rows.map((r) => r.success)),
        };
        const bar = stageBars.get(stage) ?? bars.create(st.totalSteps, st.step, payload);
        stageBars.set(stage, bar);
        bar.setTotal(st.totalSteps);
        bar.update(st.step, payload);
      }
      if (s.state === 'done' || s.state === 'cancelled') break;
      await new Promise((r) => setTimeout(r, intervalMs));
    }
  } finally {
    bars.stop();
    await runs.close();
    await pool.end();
  }
  console.log(describeRun(s).join('\n'));
  return s;
}
