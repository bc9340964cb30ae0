import { ConfigError, loadConfig } from '../../src/config';

function configError(env: Record<string, string>): ConfigError {
  try {
    loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) return err;
    throw err;
  }
  throw new Error('expected a ConfigError');
}

describe('loadConfig', () => {
  it('defaults to the local stack on loopback', () => {
    const config = loadConfig({});
    expect(config.temporal).toMatchObject({
      external: false,
      address: '127.0.0.1:7233',
      namespace: 'evalrl',
    });
    expect(config.postgres.external).toBe(false);
    expect(config.postgres.url).toBe('postgres://evalrl_app@127.0.0.1:5433/evalrl'); // its password: under the data folder, after `up`
    expect(config.modelServer.url).toBe('http://127.0.0.1:8000');
    expect(config.samplingServers).toBeUndefined();
    expect(config.teacher).toBeUndefined();
  });

  it('uses external services when their variables are set', () => {
    const config = loadConfig({
      TEMPORAL_ADDRESS: 'temporal.internal:7233',
      DATABASE_URL: 'postgres://u:p@db:5432/evalrl',
      EVALRL_TEACHER_URL: 'https://judge.example/v1',
      EVALRL_TEACHER_MODEL: 'gpt-judge',
      EVALRL_SAMPLING_SERVERS: 'http://gpu-1:8000, http://gpu-2:8000',
    });
    expect(config.temporal).toMatchObject({ external: true, address: 'temporal.internal:7233' });
    expect(config.samplingServers).toEqual(['http://gpu-1:8000', 'http://gpu-2:8000']);
    expect(config.postgres).toMatchObject({ external: true, url: 'postgres://u:p@db:5432/evalrl' });
    expect(config.teacher).toEqual({
      url: 'https://judge.example/v1',
      model: 'gpt-judge',
      apiKey: undefined,
    });
  });

  it('treats empty variables as unset', () => {
    expect(loadConfig({ DATABASE_URL: '' }).postgres.external).toBe(false);
  });

  it.each([
    ['TEMPORAL_ADDRESS', 'localhost', /host:port/],
    ['DATABASE_URL', 'mysql://x@y/z', /postgres:\/\//],
    ['EVALRL_PG_PORT', '70000', /65535/],
    ['EVALRL_TEMPORAL_PORT', 'abc', /number/],
    ['EVALRL_MODEL_SERVER_URL', 'ftp://host', /http/],
    ['EVALRL_MODEL_SERVER_TOKEN', 'short', /16 characters/],
    ['EVALRL_SAMPLING_SERVERS', 'http://gpu-1:8000,gpu-2:8000', /http/],
    ['TEMPORAL_NAMESPACE', 'bad namespace!', /namespace/],
    ['EVALRL_TEACHER_TEMPERATURE', '2.5', /2/],
    ['EVALRL_TEACHER_TEMPERATURE', 'greedy', /number/],
    ['EVALRL_TEACHER_MAX_COMPLETION_TOKENS', '1.5', /int/],
    ['EVALRL_TEACHER_MAX_COMPLETION_TOKENS', '0', /1/],
  ])('refuses a malformed %s, naming it', (variable, value, reason) => {
    const err = configError({ [variable]: value });
    expect(err.variable).toBe(variable);
    expect(err.message).toMatch(new RegExp(`^${variable}: `));
    expect(err.reason).toMatch(reason);
  });

  it("leaves the teacher's temperature and token limit unset unless given", () => {
    const teacher = { EVALRL_TEACHER_URL: 'https://judge.example/v1', EVALRL_TEACHER_MODEL: 'gpt-5-mini' };
    const { temperature, maxCompletionTokens } = loadConfig(teacher).teacher!;
    expect([temperature, maxCompletionTokens]).toEqual([undefined, undefined]);
    const tuned = loadConfig({
      ...teacher,
      EVALRL_TEACHER_TEMPERATURE: '0',
      EVALRL_TEACHER_MAX_COMPLETION_TOKENS: '4096',
    });
    expect(tuned.teacher).toMatchObject({ temperature: 0, maxCompletionTokens: 4096 });
  });

  it('requires the teacher model when a teacher endpoint is set', () => {
    const err = configError({ EVALRL_TEACHER_URL: 'http://127.0.0.1:9000/v1' });
    expect(err.variable).toBe('EVALRL_TEACHER_MODEL');
  });
});
