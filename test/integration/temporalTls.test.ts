import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { Client } from '@temporalio/client';
import { NativeConnection, Runtime, Worker } from '@temporalio/worker';
import { loadConfig } from '../../src/config';
import { TASK_QUEUES } from '../../src/contract';
import { connectTemporal } from '../../src/stack/temporal';
import { portOpen, waitUntil } from '../../src/stack/processes';
import { temporalConnectionOptions } from '../../src/temporalConnection';
import { workerLogger } from '../../src/workers/logger';
import { runWorkersUntil } from '../../src/workers/start';
import { workflowCode } from '../../src/workers/workflowBundle';
import { stackCheck } from '../../src/workflows';
import { TEST_STACK_ENV } from './testStack';

jest.setTimeout(120_000);
Runtime.install({ logger: workerLogger() });

// The dev server has no TLS flags: it listens in plaintext on loopback, behind a real mTLS terminator.
const PLAIN_PORT = 57233;
const TLS_PORT = 57234;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'evalrl-tls-'));
const file = (name: string) => path.join(dir, name);
const refusals: string[] = [];
let temporal: ChildProcess;
let terminator: tls.Server;

const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
const EC_KEY = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

function makeCa(name: string) {
  openssl('req', '-x509', ...EC_KEY, '-subj', `/CN=${name}`, '-days', '1', '-keyout', `${name}.key`, '-out', `${name}.crt`,
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign'); // prettier-ignore
}

function makeLeaf(name: string, ...extensions: string[]) {
  openssl('req', '-new', ...EC_KEY, '-subj', `/CN=${name}`, '-keyout', `${name}.key`, '-out', `${name}.csr`,
    ...extensions.flatMap((ext) => ['-addext', ext])); // prettier-ignore
  openssl('x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-days', '1',
    '-copy_extensions', 'copyall', '-out', `${name}.crt`); // prettier-ignore
}

/** evalrl's configuration from Temporal's standard variables alone, for the TLS port. */
function configFrom(variables: Record<string, string>) {
  return loadConfig({
    TEMPORAL_ADDRESS: `127.0.0.1:${TLS_PORT}`,
    TEMPORAL_NAMESPACE: 'default',
    ...variables,
  });
}

const mtls = () =>
  configFrom({
    TEMPORAL_TLS_SERVER_CA_CERT_PATH: file('ca.crt'),
    TEMPORAL_TLS_CLIENT_CERT_PATH: file('client.crt'),
    TEMPORAL_TLS_CLIENT_KEY_PATH: file('client.key'),
  });

beforeAll(async () => {
  makeCa('ca');
  makeCa('other-ca');
  makeLeaf('server', 'subjectAltName=DNS:localhost,IP:127.0.0.1', 'extendedKeyUsage=serverAuth');
  makeLeaf('client', 'extendedKeyUsage=clientAuth');
  temporal = spawn(
    path.join(TEST_STACK_ENV.EVALRL_VENV, 'bin', 'temporal'),
    [
      'server',
      'start-dev',
      '--headless',
      '--ip',
      '127.0.0.1',
      '--port',
      String(PLAIN_PORT),
      '--log-level',
      'error',
    ],
    { stdio: 'ignore' },
  );
  terminator = tls.createServer(
    {
      key: fs.readFileSync(file('server.key')),
      cert: fs.readFileSync(file('server.crt')),
      ca: fs.readFileSync(file('ca.crt')),
      requestCert: true,
      rejectUnauthorized: true,
      ALPNProtocols: ['h2'],
    },
    (client) => {
      const server = net.connect(PLAIN_PORT, '127.0.0.1');
      client.pipe(server).pipe(client);
      client.on('error', () => server.destroy());
      server.on('error', () => client.destroy());
    },
  );
  terminator.on('tlsClientError', (err) => refusals.push(err.message));
  await new Promise<void>((resolve) => terminator.listen(TLS_PORT, '127.0.0.1', resolve));
  await waitUntil('Temporal dev server', () => portOpen('127.0.0.1', PLAIN_PORT), 60_000);
});

afterAll(async () => {
  terminator?.close();
  if (temporal?.exitCode === null) {
    const exited = new Promise((resolve) => temporal.once('exit', resolve));
    temporal.kill('SIGTERM');
    await exited;
  }
  fs.rmSync(dir, { recursive: true, force: true });
});

it('connects a client and a worker with the CA and a client certificate, and runs a workflow through mTLS', async () => {
  const config = mtls();
  expect(config.temporal).toMatchObject({ external: true, namespace: 'default' });
  const client = await connectTemporal(config, 10_000);
  const worker = await NativeConnection.connect(temporalConnectionOptions(config.temporal));
  try {
    for (const connection of [client, worker]) {
      const described = await connection.workflowService.describeNamespace({ namespace: 'default' });
      expect(described.namespaceInfo?.name).toBe('default');
    }
    const base = { connection: worker, namespace: config.temporal.namespace };
    const workers = await Promise.all([
      Worker.create({ ...base, taskQueue: TASK_QUEUES.workflows, ...workflowCode() }),
      Worker.create({
        ...base,
        taskQueue: TASK_QUEUES.cpu,
        activities: {
          recordStackCheck: async (workflowId: string, stored: string) => ({ workflowId, stored }),
        },
      }),
    ]);
    const workflowId = `tls-check-${Date.now()}`;
    const result = await runWorkersUntil(
      workers,
      new Client({ connection: client, namespace: 'default' }).workflow.execute(stackCheck, {
        taskQueue: TASK_QUEUES.workflows,
        workflowId,
        args: ['over mTLS'],
      }),
    );
    expect(result).toEqual({ workflowId, stored: 'over mTLS' });
  } finally {
    await client.close();
    await worker.close();
  }
});

it('refuses a server whose certificate another CA signed, saying so', async () => {
  const config = configFrom({
    TEMPORAL_TLS_SERVER_CA_CERT_PATH: file('other-ca.crt'),
    TEMPORAL_TLS_CLIENT_CERT_PATH: file('client.crt'),
    TEMPORAL_TLS_CLIENT_KEY_PATH: file('client.key'),
  });
  await expect(connectTemporal(config, 3000)).rejects.toThrow(/self-signed certificate in certificate chain/);
  await expect(NativeConnection.connect(temporalConnectionOptions(config.temporal))).rejects.toThrow(
    /UnknownIssuer/,
  );
});

it('is refused by the mTLS server without a client certificate', async () => {
  refusals.length = 0;
  const config = configFrom({ TEMPORAL_TLS_SERVER_CA_CERT_PATH: file('ca.crt') });
  await expect(connectTemporal(config, 3000)).rejects.toThrow(/certificate required/);
  await expect(NativeConnection.connect(temporalConnectionOptions(config.temporal))).rejects.toThrow();
  expect(refusals).toEqual(
    expect.arrayContaining([expect.stringMatching(/peer did not return a certificate/)]),
  );
});
