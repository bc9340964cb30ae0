import { spawn, type SpawnOptions } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * A background service that `evalrl up` starts and `evalrl down` stops. Its pid file under the data
 * directory is the proof that we started it: `down` never touches a process without one.
 */
export interface ManagedProcess {
  name: string;
  pidFile: string;
  logFile: string;
}

export function managedProcess(dataDir: string, name: string): ManagedProcess {
  return {
    name,
    pidFile: path.join(dataDir, 'run', `${name}.pid`),
    logFile: path.join(dataDir, 'logs', `${name}.log`),
  };
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The pid recorded for this process, if it is still running. */
export function runningPid(proc: ManagedProcess): number | undefined {
  if (!fs.existsSync(proc.pidFile)) return undefined;
  const pid = Number(fs.readFileSync(proc.pidFile, 'utf8').trim());
  return Number.isInteger(pid) && pid > 0 && isAlive(pid) ? pid : undefined;
}

/** What every service we start may see of our environment: where programs, home and temp are, the locale. */
const BASE_ENV = ['PATH', 'HOME', 'USER', 'LOGNAME', 'LANG', 'LANGUAGE', 'TZ', 'TMPDIR', 'LC_*'];

/**
 * A child's environment: only the allowlisted variables of `env` (names; `PREFIX*` for a family) — never the
 * whole environment, which holds the teacher key, the model server token, DATABASE_URL… — plus `set`.
 */
export function childEnv(
  pass: readonly string[] = [],
  set: Record<string, string> = {},
  env: NodeJS.ProcessEnv = process.env,
): Record<string, string> {
  const allowed = [...BASE_ENV, ...pass];
  const ok = (name: string) =>
    allowed.some((a) => (a.endsWith('*') ? name.startsWith(a.slice(0, -1)) : name === a));
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) if (value !== undefined && ok(name)) out[name] = value;
  return { ...out, ...set };
}

export interface StartOptions extends Pick<SpawnOptions, 'uid' | 'gid' | 'cwd'> {
  /** Variables of ours the service needs besides BASE_ENV (see childEnv). */
  passEnv?: readonly string[];
  /** Variables set for it. */
  setEnv?: Record<string, string>;
}

/**
 * Starts the command detached from this process (it outlives the CLI), logging to the process's log file,
 * with an allowlisted environment (childEnv).
 */
export function startDetached(
  proc: ManagedProcess,
  command: string,
  args: string[],
  { passEnv, setEnv, ...options }: StartOptions = {},
): number {
  fs.mkdirSync(path.dirname(proc.pidFile), { recursive: true });
  fs.mkdirSync(path.dirname(proc.logFile), { recursive: true });
  const log = fs.openSync(proc.logFile, 'a');
  const env = childEnv(passEnv, setEnv);
  const child = spawn(command, args, { ...options, env, detached: true, stdio: ['ignore', log, log] });
  fs.closeSync(log);
  if (child.pid === undefined) throw new Error(`${proc.name}: could not start ${command}`);
  child.unref();
  fs.writeFileSync(proc.pidFile, `${child.pid}\n`);
  return child.pid;
}

/** Stops a process we started (SIGTERM, then SIGKILL after the grace period) and removes its pid file. */
export async function stopManaged(
  proc: ManagedProcess,
  signal: NodeJS.Signals = 'SIGTERM',
  graceMs = 20_000,
) {
  const pid = runningPid(proc);
  if (pid !== undefined) {
    process.kill(pid, signal);
    const deadline = Date.now() + graceMs;
    while (isAlive(pid) && Date.now() < deadline) await sleep(100);
    if (isAlive(pid)) process.kill(pid, 'SIGKILL');
    while (isAlive(pid)) await sleep(50);
  }
  fs.rmSync(proc.pidFile, { force: true });
  return pid !== undefined;
}

export function portOpen(host: string, port: number, timeoutMs = 1000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const done = (open: boolean) => {
      socket.destroy();
      resolve(open);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/**
 * Who holds a service's port, settled before starting it: `ours` when our pid file names a live process (it
 * may still be starting after an interrupted `up`: the caller waits for it), `free` when nothing listens;
 * otherwise an error that names the holder and what to do (`hint`).
 */
export async function claimPort(
  proc: ManagedProcess,
  host: string,
  port: number,
  hint: string,
): Promise<'ours' | 'free'> {
  if (runningPid(proc) !== undefined) return 'ours';
  if (!(await portOpen(host, port))) return 'free';
  const holder = portHolder(port);
  const evalrls = holder?.includes('evalrl')
    ? " It looks like evalrl's own service of another data folder: `evalrl down` with that EVALRL_DATA_DIR stops it."
    : '';
  throw new Error(
    `port ${port} is taken by ${holder ?? 'a process'} that this data folder's evalrl did not start; ${hint}.${evalrls}`,
  );
}

/** The process listening on a local TCP port, as `pid N (command line)`; null where /proc cannot tell. */
export function portHolder(port: number): string | null {
  const hex = `:${port.toString(16).toUpperCase().padStart(4, '0')}`;
  const listening = new Set(
    ['tcp', 'tcp6']
      .flatMap((table) => readOr(`/proc/net/${table}`, '').split('\n').slice(1))
      .map((line) => line.trim().split(/\s+/))
      .filter((c) => c[1]?.endsWith(hex) && c[3] === '0A') // 0A: LISTEN
      .map((c) => `socket:[${c[9]}]`),
  );
  if (listening.size === 0) return null;
  for (const pid of fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    const fds = tryOr(() => fs.readdirSync(`/proc/${pid}/fd`), []);
    if (fds.some((fd) => listening.has(tryOr(() => fs.readlinkSync(`/proc/${pid}/fd/${fd}`), '')))) {
      const command = readOr(`/proc/${pid}/cmdline`, '').split('\0').join(' ').trim();
      return `pid ${pid} (${command.slice(0, 300)})`;
    }
  }
  return null;
}

function tryOr<T>(read: () => T, fallback: T): T {
  try {
    return read();
  } catch {
    return fallback;
  }
}
const readOr = (file: string, fallback: string) => tryOr(() => fs.readFileSync(file, 'utf8'), fallback);

/**
 * For a service of ours that is already running (claimPort said `ours`): waits until it is healthy and says
 * true, or — one that never gets healthy (wedged by an interrupted `up`) — stops it and says false, so that
 * the caller starts it anew instead of failing the same way at every `up`.
 */
export async function reuseIfHealthy(proc: ManagedProcess, ready: () => Promise<void>): Promise<boolean> {
  try {
    await ready();
    return true;
  } catch (err) {
    console.warn(
      `${proc.name}: our running one is not healthy (${(err as Error).message}); starting it anew`,
    );
    await stopManaged(proc, 'SIGTERM', 5_000);
    return false;
  }
}

/** Polls `check` until it succeeds; on timeout the error names the service and points at its log. */
export async function waitUntil(
  what: string,
  check: () => Promise<boolean>,
  timeoutMs: number,
  logFile?: string,
) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check().catch(() => false)) return;
    await sleep(250);
  }
  throw new Error(
    `${what} did not become healthy within ${timeoutMs / 1000}s${logFile ? `; see ${logFile}` : ''}`,
  );
}

/**
 * Starts a process's peak resident memory (VmHWM) again from its current size, so that a peak read later is
 * that of what ran in between. False where the kernel does not allow it (not Linux, another user's process).
 */
export function resetPeakResident(pid: number): boolean {
  try {
    fs.writeFileSync(`/proc/${pid}/clear_refs`, '5');
    return true;
  } catch {
    return false;
  }
}

/** A process's peak resident memory (VmHWM) in GiB, as the kernel counts it; null where /proc is absent. */
export function peakResidentGib(pid: number): number | null {
  try {
    const line = fs
      .readFileSync(`/proc/${pid}/status`, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('VmHWM:'));
    return line ? Number(line.split(/\s+/)[1]) / 2 ** 20 : null;
  } catch {
    return null;
  }
}
