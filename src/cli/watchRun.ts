import cliProgress from 'cli-progress';
import type { Config } from '../config';
import type { RunStatus } from '../contract';
import { createPool } from '../db/pool';
import { describeFlag, healthFlags, type HealthFlag } from '../runs/health';
import { RunClient } from '../runs/runClient';
import { createStore } from '../store';
import { describeRun, duration, sparkline } from './runFormat';

/**
 * Follows a run until it ends. On a terminal: a bar per stage with its phase and reward and success
 * sparklines, redrawn in place. Elsewhere (a log file, CI): one line each time something changes. Reward
 * histories and health flags come from PostgreSQL.
 */
export async function watchRun(config: Config, runId: string, intervalMs = 2000): Promise<RunStatus> {
  const pool = createPool(config, 1);
  const store = createStore(pool);
  const runs = await RunClient.connect(config);
  const bars = process.stdout.isTTY
    ? new cliProgress.MultiBar(
        {
          format: '{stage} |{bar}| step {value}/{total} {phase}  reward {reward}  success {success}',
          hideCursor: true,
          clearOnComplete: false,
        },
        cliProgress.Presets.shades_classic,
      )
    : null;
  const header = bars?.create(1, 0, {}, { format: '{line}' });
  const flagsBar = bars?.create(1, 0, { line: '' }, { format: '{line}' });
  const stageBars = new Map<string, cliProgress.SingleBar>();
  let lastLine = '';
  const shown = new Set<string>(); // health flags already printed
  let s: RunStatus;
  let health: HealthFlag[] = [];
  try {
    for (;;) {
      s = await runs.status(runId);
      const history = await store.runs.stepHistory(runId);
      health = healthFlags(history, s.evaluations);
      const flags = health.map(describeFlag);
      const head = `run ${runId}: ${s.state}, phase ${s.phase}, ETA ${duration(s.etaSeconds)}${s.blocked ? ` — BLOCKED: ${s.blocked.error}` : ''}`;
      const stages = Object.entries(s.stages).flatMap(([stage, st]) => {
        if (!st) return [];
        const rows = history.filter((r) => r.stage === stage);
        return [
          {
            stage,
            st,
            reward: sparkline(rows.map((r) => r.metrics['reward/mean'])),
            success: sparkline(rows.map((r) => r.metrics['success/rate'])),
          },
        ];
      });
      if (bars) {
        header!.update(0, { line: head });
        flagsBar!.update(0, { line: flags.map((f) => `! ${f}`).join('\n') });
        for (const { stage, st, reward, success } of stages) {
          const payload = { stage: stage.padEnd(15), phase: st.phase.padEnd(10), reward, success };
          const bar = stageBars.get(stage) ?? bars.create(st.totalSteps, st.step, payload);
          stageBars.set(stage, bar);
          bar.setTotal(st.totalSteps);
          bar.update(st.step, payload);
        }
      } else {
        const line = [
          head,
          ...stages.map(({ stage, st }) => `${stage} ${st.step}/${st.totalSteps} ${st.phase}`),
        ].join(' | ');
        const time = new Date().toISOString().slice(11, 19);
        if (line !== lastLine) console.log(`${time} ${line}`);
        for (const flag of flags.filter((f) => !shown.has(f))) console.log(`${time}   ! ${flag}`);
        flags.forEach((f) => shown.add(f));
        lastLine = line;
      }
      if (s.state === 'done' || s.state === 'cancelled') break;
      await new Promise((r) => setTimeout(r, intervalMs));
    }
  } finally {
    bars?.stop();
    await runs.close();
    await pool.end();
  }
  console.log(describeRun(s, health).join('\n'));
  return s;
}
