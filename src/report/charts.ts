import { Resvg } from '@resvg/resvg-js';
import * as vega from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';
import type { ReportData } from '../store/runs';

export interface Chart {
  name: string;
  title: string;
  svg: string;
  png: Buffer;
}

const WIDTH = 520;
const HEIGHT = 220;

/** One line per stage over steps, with an optional ± band. */
function perStep(title: string, rows: object[], y: string, band?: [string, string]): TopLevelSpec {
  const x = { field: 'step', type: 'quantitative' as const, axis: { tickMinStep: 1, format: 'd' } };
  const color = { field: 'stage', type: 'nominal' as const };
  return {
    title,
    width: WIDTH,
    height: HEIGHT,
    data: { values: rows },
    layer: [
      ...(band
        ? [
            {
              mark: { type: 'area' as const, opacity: 0.2 },
              encoding: {
                x,
                y: { field: band[0], type: 'quantitative' as const, title: y },
                y2: { field: band[1] },
                color,
              },
            },
          ]
        : []),
      {
        mark: { type: 'line' as const, point: true },
        encoding: { x, y: { field: y, type: 'quantitative' as const }, color },
      },
    ],
  };
}

async function render(name: string, title: string, spec: TopLevelSpec): Promise<Chart> {
  const view = new vega.View(vega.parse(compile(spec).spec), { renderer: 'none' });
  const svg = await view.toSVG();
  view.finalize();
  const png = Buffer.from(
    new Resvg(svg, { background: 'white', font: { loadSystemFonts: true } }).render().asPng(),
  );
  return { name, title, svg, png };
}

/** The report's charts, as inline SVG (for the HTML) and PNG (files beside it). */
export async function reportCharts(data: ReportData): Promise<Chart[]> {
  const rows = data.steps.map((s) => ({
    stage: s.stage,
    step: s.step,
    reward: s.metrics['reward/mean'],
    low: s.metrics['reward/mean'] - s.metrics['reward/std'],
    high: s.metrics['reward/mean'] + s.metrics['reward/std'],
    success: s.metrics['success/rate'],
    loss: s.metrics['optim/loss'],
    kl: s.metrics['optim/kl_ref'],
    clip: s.metrics['optim/clip_fraction'],
  }));
  const long = (fields: string[]) =>
    data.steps.flatMap((s) =>
      fields.map((f) => ({ stage: s.stage, step: s.step, metric: f, value: s.metrics[f] ?? 0 })),
    );
  const charts: [string, string, TopLevelSpec][] = [
    ['reward', 'Reward mean ± std per step', perStep('Reward mean ± std', rows, 'reward', ['low', 'high'])],
    [
      'success',
      'Success rate (policy) and agreement with the labels (reward model) per step',
      perStep('Success rate / RM agreement', rows, 'success'),
    ],
    ['loss', 'Loss per step', perStep('Loss', rows, 'loss')],
    ['kl', 'KL to the base model per step', perStep('KL', rows, 'kl')],
    ['clip', 'Clip fraction per step', perStep('Clip fraction', rows, 'clip')],
    [
      'timing',
      'Phase timing per step (seconds)',
      {
        title: 'Phase timing',
        width: WIDTH,
        height: HEIGHT,
        data: { values: long(['time/rollout_s', 'time/train_s']) },
        mark: 'bar',
        encoding: {
          x: { field: 'step', type: 'ordinal' },
          y: { field: 'value', type: 'quantitative', title: 'seconds' },
          color: { field: 'metric', type: 'nominal' },
          column: { field: 'stage', type: 'nominal' },
        },
      } as TopLevelSpec,
    ],
    [
      'skills',
      'Skills used by the judge',
      {
        title: 'Skills used by the judge',
        width: WIDTH,
        height: HEIGHT,
        data: { values: data.skills },
        mark: 'bar',
        encoding: {
          y: { field: 'skill', type: 'nominal', sort: '-x' },
          x: { field: 'uses', type: 'quantitative' },
        },
      },
    ],
  ];
  return Promise.all(charts.map(([name, title, spec]) => render(name, title, spec)));
}
