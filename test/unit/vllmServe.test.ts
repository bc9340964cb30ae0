import fs from 'node:fs';
import path from 'node:path';
import { vllmLoraRank, vllmServe, vllmServeShell } from '../../src/modelServer/vllmServe';
import { loadRunSpec } from '../../src/runSpec';

const root = path.resolve(__dirname, '../..');
const production = loadRunSpec(path.join(root, 'examples/production.yaml'));
const recipe = vllmServeShell(
  vllmServe(production, { model: '/models/Qwen3-4B', host: '0.0.0.0', port: 8000 }),
);

describe("the sampler's command line, from its one source", () => {
  it('carries every flag a run depends on, with the spec’s rank and context', () => {
    const { argv, env } = vllmServe(production, { model: '/m', host: '127.0.0.1', port: 9 });
    const flag = (name: string) => argv[argv.indexOf(name) + 1];
    expect(argv.slice(0, 3)).toEqual(['vllm', 'serve', '/m']);
    expect(flag('--served-model-name')).toBe('base');
    expect(argv).toContain('--enable-auto-tool-choice');
    expect(flag('--tool-call-parser')).toBe('hermes');
    expect(flag('--generation-config')).toBe('vllm');
    expect(argv).toContain('--enable-lora');
    expect(flag('--max-lora-rank')).toBe(String(production.lora.rank));
    expect(flag('--max-model-len')).toBe(String(production.sampling.contextTokens));
    expect(env).toEqual({ VLLM_ALLOW_RUNTIME_LORA_UPDATING: 'True' });
    expect(recipe).not.toMatch(/--api-key/); // the key comes from the environment, never the command line
  });

  it('rounds the LoRA rank up to one vLLM accepts', () => {
    expect([1, 4, 16, 17, 300, 512].map(vllmLoraRank)).toEqual([1, 8, 16, 32, 320, 512]);
    expect(() => vllmLoraRank(513)).toThrow(/lora.rank: 513/);
  });

  it('is the line the README recipe and examples/production.yaml show', () => {
    expect(fs.readFileSync(path.join(root, 'README.md'), 'utf8')).toContain(`   ${recipe}\n`);
    expect(fs.readFileSync(path.join(root, 'examples/production.yaml'), 'utf8')).toContain(
      `#     ${recipe}\n`,
    );
  });
});
