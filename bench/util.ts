import fs from 'node:fs';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { repoRoot } from '../src/paths';

/** A small seeded PRNG, so every run of a benchmark makes the same data and queries. */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

/** Writes bench/results/NAME.json (committed with the change that moved the figures). */
export function writeResult(name: string, figures: Record<string, unknown>) {
  const file = path.join(repoRoot(), 'bench', 'results', `${name}.json`);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(
    file,
    JSON.stringify({ ...figures, measured_at: new Date().toISOString() }, null, 2) + '\n',
  );
  console.log(`wrote ${path.relative(process.cwd(), file)}`);
}

/** Adds figures to bench/results/NAME.json, keeping the ones another benchmark wrote there. */
export function mergeResult(name: string, figures: Record<string, unknown>) {
  const file = path.join(repoRoot(), 'bench', 'results', `${name}.json`);
  const existing = fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, 'utf8')) : {};
  fs.writeFileSync(file, JSON.stringify({ ...existing, ...figures }, null, 2) + '\n');
  console.log(`updated ${path.relative(process.cwd(), file)}`);
}

/** CPU seconds (user + system) a process has used, with those of its children, running and exited (Linux /proc). */
export function processTreeCpuSeconds(pid: number): number {
  const ticks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }));
  const stat = (p: string) => {
    const fields = fs.readFileSync(`/proc/${p}/stat`, 'utf8').split(') ')[1].split(' ');
    return {
      ppid: Number(fields[1]),
      self: Number(fields[11]) + Number(fields[12]),
      exited: Number(fields[13]) + Number(fields[14]),
    };
  };
  const root = stat(String(pid));
  let total = root.self + root.exited;
  for (const p of fs.readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      const child = stat(p);
      if (child.ppid === pid) total += child.self;
    } catch {
      // the process ended while the list was read: its time is in the parent's `exited` from now on
    }
  }
  return total / ticks;
}
