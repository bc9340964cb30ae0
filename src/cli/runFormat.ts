import type { RunStatus } from '../contract';
import type { RunSummary } from '../runs/runClient';
import { describeFlag, type HealthFlag } from '../runs/health';

const TICKS = '▁▂▃▄▅▆▇█';

/** A one-line chart of a series (min to max over its own range). */
export function sparkline(values: number[]): string {
  if (values.length === 0) return '';
  const lo = Math.min(...values);
  const span = Math.max(...values) - lo || 1;
  return values.map((v) => TICKS[Math.round(((v - lo) / span) * (TICKS.length - 1))]).join('');
}

export function duration(seconds: number | null): string {
  if (seconds == null) return '–';
  const s = Math.round(seconds);
  return s >= 3600
    ? `${Math.floor(s / 3600)}h${Math.floor((s % 3600) / 60)}m`
    : s >= 60
      ? `${Math.floor(s / 60)}m${s % 60}s`
      : `${s}s`;
}

const fmt = (x: number | undefined) => (x == null ? '–' : Math.abs(x) >= 100 ? x.toFixed(0) : x.toFixed(3));

/** The human-readable status of a run, with the learning signal's health flags. */
export function describeRun(s: RunStatus, flags: HealthFlag[] = []): string[] {
  const lines = [`run ${s.runId} (${s.name}): ${s.state}, phase ${s.phase}, ETA ${duration(s.etaSeconds)}`];
  if (s.blocked)
    lines.push(
      `  BLOCKED in ${s.blocked.phase}: ${s.blocked.error}`,
      '  → fix the cause, then `evalrl run retry ' + s.runId + '` (or cancel)',
    );
  for (const [stage, st] of Object.entries(s.stages)) {
    if (!st) continue;
    const m = st.latest ?? {};
    lines.push(
      `  ${stage}: step ${st.step}/${st.totalSteps}, ${st.phase}; reward ${fmt(m['reward/mean'])} ± ${fmt(m['reward/std'])}, success ${fmt(m['success/rate'])}, loss ${fmt(m['optim/loss'])}, lr ${m['optim/lr'] ?? '–'}, ${duration(st.secondsPerStep)}/step`,
    );
  }
  for (const e of s.evaluations)
    lines.push(
      `  eval ${e.label} (${e.model}): ` +
        (e.kind === 'policy'
          ? `success ${fmt(e.metrics.successRate)} ± ${fmt(e.metrics.successSe)} (n ${e.metrics.episodes}), IDK ${fmt(e.metrics.idkRate)}, wrong ${fmt(e.metrics.wrongRate)}, turns ${fmt(e.metrics.meanTurns)}`
          : `agreement ${fmt(e.metrics.agreement)} ± ${fmt(e.metrics.agreementSe)} (n ${e.metrics.judgements}), precision ${fmt(e.metrics.precision)}, recall ${fmt(e.metrics.recall)}, ECE ${fmt(e.metrics.ece)}, failed ${e.metrics.failures}`),
    );
  const ckpt = Object.entries(s.checkpoints).map(([a, n]) => `${a}@step-${n}`);
  if (ckpt.length) lines.push(`  checkpoints: ${ckpt.join(', ')}`);
  for (const f of flags) lines.push(`  ! ${describeFlag(f)}`);
  return lines;
}

/**
 * Runs still open on the stack, which a new job would run beside (a killed `demo` leaves its runs open: they
 * are durable, and the next job's workers pick them up and share the model server with them).
 */
export function openRunsWarning(runs: RunSummary[]): string[] {
  const open = runs.filter((r) => r.workflowStatus === 'RUNNING');
  if (open.length === 0) return [];
  return [
    `! ${open.length} run(s) of an earlier job are still open on this stack; they will resume beside this one and share its model server:`,
    ...open.map(
      (r) => `    ${r.runId}  ${r.state}, ${r.stage ?? '–'} step ${r.step ?? '–'}, started ${r.startedAt}`,
    ),
    '  end them with `evalrl run cancel RUN_ID` (or let them finish; `evalrl run list` shows them)',
  ];
}
