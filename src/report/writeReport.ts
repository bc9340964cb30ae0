import fs from 'node:fs';
import path from 'node:path';
import type pg from 'pg';
import { createStore } from '../store';
import { reportCharts } from './charts';
import { reportHtml } from './html';

/** Writes `DIR/report.html` (self-contained) and `DIR/charts/NAME.png`; returns their paths. */
export async function writeReport(pool: pg.Pool, runId: string, dir: string) {
  const data = await createStore(pool).runs.reportData(runId);
  if (!data) throw new Error(`unknown run ${runId}: \`evalrl run list\` shows the runs`);
  const charts = await reportCharts(data);
  fs.mkdirSync(path.join(dir, 'charts'), { recursive: true });
  const pngs = charts.map((c) => {
    const file = path.join(dir, 'charts', `${c.name}.png`);
    fs.writeFileSync(file, c.png);
    return file;
  });
  const html = path.join(dir, 'report.html');
  fs.writeFileSync(html, reportHtml(data, charts));
  return { html, pngs };
}
