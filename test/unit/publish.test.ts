import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { publishStep } from '../../src/modelServer/publish';

/** A sampler that loads adapters as vLLM does: a name it holds is refused unless load_inplace. */
async function sampler(loaded: Map<string, string>) {
  const srv = http.createServer((req, res) => {
    let body = '';
    req.on('data', (chunk) => (body += chunk));
    req.on('end', () => {
      const { lora_name: name, lora_path: path, load_inplace: inPlace } = JSON.parse(body);
      if (req.url === '/v1/load_lora_adapter') {
        if (loaded.has(name) && !inPlace) {
          res.statusCode = 400;
          return res.end(
            JSON.stringify({ error: { message: `The lora adapter '${name}' has already been loaded.` } }),
          );
        }
        loaded.set(name, path);
      } else loaded.delete(name);
      res.end('Success');
    });
  });
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}`, close: () => srv.close() };
}

test('publishing replaces a version someone planted under its name, and a retried publication is harmless', async () => {
  const loaded = new Map([['policy@step-3', '/elsewhere/planted']]);
  const s = await sampler(loaded);
  try {
    const v = { adapter: 'policy', step: 3, checkpoint: '/checkpoints/policy/step-3/adapter/policy' };
    expect((await publishStep([s.url], undefined, v)).published).toEqual([s.url]);
    expect(loaded.get('policy@step-3')).toBe(v.checkpoint); // the run's checkpoint, not the planted one
    expect((await publishStep([s.url], undefined, v)).failed).toEqual([]);
    expect(loaded.get('policy@step-3')).toBe(v.checkpoint);
  } finally {
    s.close();
  }
});
