import type { Chart } from './charts';
import { describeFlag, healthFlags } from '../runs/health';
import type { ReportData } from '../store/runs';

const esc = (s: unknown) =>
  String(s).replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!,
  );
const num = (x: unknown) =>
  typeof x === 'number' ? (Number.isInteger(x) ? String(x) : x.toFixed(3)) : esc(x ?? '–');

function table(headers: string[], rows: unknown[][]): string {
  return `<table><thead><tr>${headers.map((h) => `<th>${esc(h)}</th>`).join('')}</tr></thead><tbody>${rows
    .map((r) => `<tr>${r.map((c) => `<td>${num(c)}</td>`).join('')}</tr>`)
    .join('')}</tbody></table>`;
}

/** A self-contained page: the learning signal's health, the charts inline as SVG, the evaluations, the judge's skills. */
export function reportHtml(data: ReportData, charts: Chart[]): string {
  const policy = data.evaluations.filter((e) => e.kind === 'policy');
  const rm = data.evaluations.filter((e) => e.kind === 'rewardModel');
  const flags = healthFlags(data.steps, data.evaluations);
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>evalrl run ${esc(data.runId)}</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 2em auto; max-width: 1180px; color: #222 }
table { border-collapse: collapse; margin: 0.5em 0 1.5em } td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: right }
th:first-child, td:first-child { text-align: left } .charts { display: flex; flex-wrap: wrap; gap: 1em }
figure { margin: 0 } figcaption { color: #555 }
</style></head><body>
<h1>Run ${esc(data.runId)}</h1>
<p>spec <b>${esc(data.name)}</b>, started ${esc(data.createdAt)}; ${data.steps.length} trained steps;
${data.judgements.total} judgements (${data.judgements.failed} failed).</p>
<h2>Learning signal</h2>
${flags.length ? `<ul class="flags">${flags.map((f) => `<li>${esc(describeFlag(f))}</li>`).join('')}</ul>` : '<p>No warning: groups had reward variance, samples succeeded, adapters moved.</p>'}
<h2>Evaluation</h2>
<h3>Policy (held-out questions)</h3>
${table(['evaluation', 'model', 'split', 'episodes', 'success', '± s.e.', 'I don\u2019t know', 'wrong', 'mean turns'], policy.map((e) => [e.label, e.model, e.split, e.metrics.episodes, e.metrics.successRate, e.metrics.successSe, e.metrics.idkRate, e.metrics.wrongRate, e.metrics.meanTurns]))}
<h3>Reward model (held-out labelled episodes)</h3>
${table(['evaluation', 'model', 'split', 'judgements', 'labelled correct', 'agreement', '± s.e.', 'precision', '± s.e.', 'recall', '± s.e.', 'ECE', '± s.e.', 'failures'], rm.map((e) => [e.label, e.model, e.split, e.metrics.judgements, e.metrics.positiveShare, e.metrics.agreement, e.metrics.agreementSe, e.metrics.precision, e.metrics.precisionSe, e.metrics.recall, e.metrics.recallSe, e.metrics.ece, e.metrics.eceSe, e.metrics.failures]))}
<h2>Training</h2>
<div class="charts">
${charts.map((c) => `<figure class="chart" data-chart="${esc(c.name)}">${c.svg}<figcaption>${esc(c.title)}</figcaption></figure>`).join('\n')}
</div>
<h2>Skills used by the judge</h2>
${table(['skill', 'uses'], data.skills.map((s) => [s.skill, s.uses]))}
<h2>Steps</h2>
${table(['stage', 'step', 'reward', '± std', 'success', 'kept', 'zero-var', 'failed', 'loss', 'KL', 'clip', 'update', 'lr', 'rollout s', 'train s'], data.steps.map((s) => [s.stage, s.step, s.metrics['reward/mean'], s.metrics['reward/std'], s.metrics['success/rate'], s.metrics['groups/kept'], s.metrics['groups/zero_variance'], s.metrics['samples/failed'], s.metrics['optim/loss'], s.metrics['optim/kl_ref'], s.metrics['optim/clip_fraction'], s.metrics['optim/update_norm'], s.metrics['optim/lr'], s.metrics['time/rollout_s'], s.metrics['time/train_s']]))}
</body></html>
`; // prettier-ignore
}
