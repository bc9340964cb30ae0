import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ConfigError, loadConfig } from '../../src/config';
import { temporalConnectionOptions } from '../../src/temporalConnection';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'evalrl-temporal-config-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function write(name: string, text: string): string {
  const file = path.join(dir, name);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, text);
  return file;
}

const options = (env: Record<string, string>) => temporalConnectionOptions(loadConfig(env).temporal);

function configError(env: Record<string, string>): ConfigError {
  try {
    loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) return err;
    throw err;
  }
  throw new Error('expected a ConfigError');
}

const CLOUD = 'ns.acct.example:7233';

describe('Temporal from the standard configuration', () => {
  it('connects to the local dev server in plaintext when no address is set, whatever else is', () => {
    const config = loadConfig({ TEMPORAL_API_KEY: 'key-for-some-other-server' });
    expect(config.temporal).toMatchObject({
      external: false,
      address: '127.0.0.1:7233',
      namespace: 'evalrl',
    });
    expect(temporalConnectionOptions(config.temporal)).toEqual({ address: '127.0.0.1:7233' });
  });

  it('sends an API key over TLS, as Temporal Cloud expects', () => {
    expect(options({ TEMPORAL_ADDRESS: CLOUD, TEMPORAL_API_KEY: 'secret-key' })).toEqual({
      address: CLOUD,
      apiKey: 'secret-key',
      tls: true,
    });
  });

  it('lets TEMPORAL_TLS=false turn TLS off, and passes gRPC headers', () => {
    expect(
      options({ TEMPORAL_ADDRESS: CLOUD, TEMPORAL_TLS: 'false', TEMPORAL_GRPC_META_X_TEAM: 'rl' }),
    ).toEqual({
      address: CLOUD,
      tls: false,
      metadata: { 'x-team': 'rl' },
    });
  });

  it('reads the server CA, the client certificate and key, and the server name', () => {
    const env = {
      TEMPORAL_ADDRESS: CLOUD,
      TEMPORAL_TLS_SERVER_CA_CERT_PATH: write('ca.pem', 'CA'),
      TEMPORAL_TLS_CLIENT_CERT_PATH: write('client.pem', 'CERT'),
      TEMPORAL_TLS_CLIENT_KEY_PATH: write('client.key', 'KEY'),
      TEMPORAL_TLS_SERVER_NAME: 'temporal.internal',
    };
    const { tls } = options(env);
    expect(tls).toEqual({
      serverNameOverride: 'temporal.internal',
      serverRootCACertificate: expect.anything(),
      clientCertPair: { crt: expect.anything(), key: expect.anything() },
    });
    const pair = typeof tls === 'object' && tls ? tls : {};
    expect(Buffer.from(pair.serverRootCACertificate!).toString()).toBe('CA');
    expect(Buffer.from(pair.clientCertPair!.crt).toString()).toBe('CERT');
    expect(Buffer.from(pair.clientCertPair!.key).toString()).toBe('KEY');
  });

  it('reads a profile of the config file, which the variables override', () => {
    const file = write(
      'temporal.toml',
      ['[profile.cloud]', `address = "${CLOUD}"`, 'namespace = "ns.acct"', 'api_key = "profile-key"'].join(
        '\n',
      ),
    );
    const base = { TEMPORAL_CONFIG_FILE: file, TEMPORAL_PROFILE: 'cloud' };
    expect(loadConfig(base).temporal).toMatchObject({ external: true, address: CLOUD, namespace: 'ns.acct' });
    expect(options(base)).toMatchObject({ apiKey: 'profile-key', tls: true });
    expect(loadConfig({ ...base, TEMPORAL_NAMESPACE: 'other' }).temporal.namespace).toBe('other');
  });

  it("reads the default profile of the user's config file", () => {
    const home = path.join(dir, 'home');
    write('home/.config/temporalio/temporal.toml', `[profile.default]\naddress = "${CLOUD}"\n`);
    expect(loadConfig({ HOME: home }).temporal).toMatchObject({ external: true, address: CLOUD });
  });

  it.each([
    [
      'TEMPORAL_TLS_CLIENT_KEY_PATH',
      { TEMPORAL_TLS_CLIENT_KEY_PATH: '/nonexistent/client.key' },
      /cannot read/,
    ],
    ['TEMPORAL_TLS_SERVER_CA_CERT_PATH', { TEMPORAL_TLS_SERVER_CA_CERT_PATH: dir }, /cannot read/],
    [
      'TEMPORAL_TLS_CLIENT_KEY_PATH',
      { TEMPORAL_TLS_CLIENT_CERT_PATH: write('only.pem', 'CERT') },
      /required with/,
    ],
    ['TEMPORAL_TLS', { TEMPORAL_TLS: 'yes' }, /true or false/],
    [
      'TEMPORAL_TLS_DISABLE_HOST_VERIFICATION',
      { TEMPORAL_TLS_DISABLE_HOST_VERIFICATION: 'true' },
      /SERVER_NAME/,
    ],
    ['TEMPORAL_CONFIG_FILE', { TEMPORAL_CONFIG_FILE: '/nonexistent/temporal.toml' }, /cannot read/],
    [
      'TEMPORAL_PROFILE',
      { TEMPORAL_CONFIG_FILE: write('dev.toml', '[profile.default]\n'), TEMPORAL_PROFILE: 'prod' },
      /prod/,
    ],
  ])('stops with %s named', (variable, env, reason) => {
    const err = configError({ TEMPORAL_ADDRESS: CLOUD, ...env });
    expect(err.variable).toBe(variable);
    expect(err.reason).toMatch(reason);
  });

  it('names a broken config file without quoting it: its lines may hold a key', () => {
    const file = write('broken.toml', '[profile.default]\naddress = = 1\napi_key = "do-not-print"\n');
    const err = configError({ TEMPORAL_CONFIG_FILE: file });
    expect(err.variable).toBe('TEMPORAL_CONFIG_FILE');
    expect(err.message).toMatch(/line 2/);
    expect(err.message).not.toContain('do-not-print');
  });
});
