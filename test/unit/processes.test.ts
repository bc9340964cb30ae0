import { execFileSync, spawn } from 'node:child_process';
import { transformFileSync } from '@swc/core';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import {
  claimPort,
  isAlive,
  managedProcess,
  peakResidentGib,
  portHolder,
  resetPeakResident,
  reuseIfHealthy,
  runningPid,
  startDetached,
} from '../../src/stack/processes';
import { MODEL_SERVER_ENV } from '../../src/stack/modelServer';

/** A listener of this test process on a free loopback port. */
async function listen(): Promise<{ server: net.Server; port: number }> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as net.AddressInfo).port };
}

describe('a service port', () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'evalrl-ports-'));
  const proc = managedProcess(dataDir, 'temporal');

  it('is named with the process that listens on it', async () => {
    const { server, port } = await listen();
    try {
      expect(portHolder(port)).toMatch(new RegExp(`^pid ${process.pid} \\(.*node`));
    } finally {
      server.close();
    }
  });

  it('held by a stranger is refused, naming the holder and what to do', async () => {
    const { server, port } = await listen();
    try {
      await expect(claimPort(proc, '127.0.0.1', port, 'set X to use it')).rejects.toThrow(
        new RegExp(`port ${port} is taken by pid ${process.pid} .*; set X to use it\\.`),
      );
    } finally {
      server.close();
    }
  });

  it('held by our own live process is ours, even before it answers', async () => {
    const { server, port } = await listen();
    try {
      fs.mkdirSync(path.dirname(proc.pidFile), { recursive: true });
      fs.writeFileSync(proc.pidFile, `${process.pid}\n`);
      await expect(claimPort(proc, '127.0.0.1', port, 'hint')).resolves.toBe('ours');
    } finally {
      fs.rmSync(proc.pidFile);
      server.close();
    }
  });

  it('with no listener is free', async () => {
    const { server, port } = await listen();
    await new Promise((resolve) => server.close(resolve));
    await expect(claimPort(proc, '127.0.0.1', port, 'hint')).resolves.toBe('free');
    expect(portHolder(port)).toBeNull();
  });
});

describe('our own running service', () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'evalrl-reuse-'));
  const proc = managedProcess(dataDir, 'wedged');

  it('is reused when it gets healthy, and stopped (to be started anew) when it never does', async () => {
    const pid = startDetached(proc, 'sleep', ['60']);
    await expect(reuseIfHealthy(proc, async () => {})).resolves.toBe(true);
    expect(runningPid(proc)).toBe(pid);
    const never = async () => {
      throw new Error('did not become healthy within 1s');
    };
    await expect(reuseIfHealthy(proc, never)).resolves.toBe(false);
    expect(isAlive(pid)).toBe(false);
    expect(fs.existsSync(proc.pidFile)).toBe(false);
  });
});

describe('a started service', () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'evalrl-env-'));
  // startDetached in a process of its own, whose real environment holds our secrets (jest's process.env is a
  // copy that a spawned child never sees).
  const compiled = path.join(dataDir, 'processes.js');
  fs.writeFileSync(
    compiled,
    transformFileSync(path.join(__dirname, '../../src/stack/processes.ts'), {
      jsc: { target: 'es2022', parser: { syntax: 'typescript' } },
      module: { type: 'commonjs' },
    }).code,
  );
  const ours = {
    PATH: process.env.PATH,
    HOME: os.homedir(),
    LC_ALL: 'C',
    EVALRL_TEACHER_API_KEY: 'sk-teacher-0123456789',
    DATABASE_URL: 'postgres://u:pw@db/evalrl',
    EVALRL_MODEL_SERVER_TOKEN: 'token-0123456789abcdef',
  };
  const start = (name: string, options: object): Record<string, string> => {
    const script = `const p = require(${JSON.stringify(compiled)});
      console.log(p.startDetached(p.managedProcess(${JSON.stringify(dataDir)}, ${JSON.stringify(name)}), 'sleep', ['60'], ${JSON.stringify(options)}));`;
    const pid = Number(execFileSync(process.execPath, ['-e', script], { env: ours }).toString());
    try {
      return Object.fromEntries(
        fs
          .readFileSync(`/proc/${pid}/environ`, 'utf8')
          .split('\0')
          .filter(Boolean)
          .map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
      );
    } finally {
      process.kill(pid, 'SIGKILL');
    }
  };

  it('sees only the variables it needs, never the secrets of ours (issue 47)', () => {
    const plain = start('plain', {});
    expect(plain.PATH).toBe(ours.PATH);
    expect(plain.LC_ALL).toBe('C');
    expect(plain.EVALRL_TEACHER_API_KEY).toBeUndefined();
    expect(plain.DATABASE_URL).toBeUndefined();
    expect(plain.EVALRL_MODEL_SERVER_TOKEN).toBeUndefined();

    const server = start('model-server', { passEnv: MODEL_SERVER_ENV, setEnv: { PYTHONUNBUFFERED: '1' } });
    expect(server.EVALRL_MODEL_SERVER_TOKEN).toBe(ours.EVALRL_MODEL_SERVER_TOKEN);
    expect(server.PYTHONUNBUFFERED).toBe('1');
    expect(server.EVALRL_TEACHER_API_KEY).toBeUndefined();
    expect(server.DATABASE_URL).toBeUndefined();
  });
});

describe("a process's peak resident memory", () => {
  it('starts again from its current size when reset, so that a reused server reports this job alone', async () => {
    // A child that touches 300 MB, frees it and says so: its peak stays, its size falls back.
    const child = spawn(process.execPath, [
      '--expose-gc',
      '-e',
      "let b = Buffer.alloc(300e6, 1); b = null; gc(); console.log('freed'); setTimeout(() => {}, 60000);",
    ]);
    try {
      await new Promise((resolve) => child.stdout.once('data', resolve));
      const before = peakResidentGib(child.pid!)!;
      expect(before).toBeGreaterThan(0.25);
      expect(resetPeakResident(child.pid!)).toBe(true);
      expect(peakResidentGib(child.pid!)!).toBeLessThan(before - 0.2);
    } finally {
      child.kill();
    }
  });

  it('cannot be reset for a process that is gone', () => {
    expect(resetPeakResident(2 ** 22 + 1)).toBe(false);
  });
});
