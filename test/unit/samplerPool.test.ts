import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { chooseServer, createSamplerPool, type PoolServer } from '../../src/modelServer/samplerPool';

const server = (
  url: string,
  models: string[] | null,
  inFlight = 0,
  served = 0,
  downUntil = 0,
): PoolServer => ({
  url,
  models: models && new Set(models),
  inFlight,
  served,
  downUntil,
});

test('a request goes to a live holder of its model, the least loaded, then the least used', () => {
  const a = server('a', ['p@step-1'], 2);
  const b = server('b', ['p@step-1'], 1, 5);
  const c = server('c', ['p@step-1'], 1, 3);
  const d = server('d', ['q'], 0);
  const down = server('e', ['p@step-1'], 0, 0, 1000);
  expect(chooseServer([a, b, c, d, down], 'p@step-1', 500)?.url).toBe('c');
  expect(chooseServer([a, b, c, d, down], 'p@step-1', 1000)?.url).toBe('e'); // back after its time out
  expect(chooseServer([a, d, down], 'unlisted', 500)?.url).toBe('d'); // no holder: any live server
  expect(chooseServer([down], 'p@step-1', 500)).toBeUndefined();
});

/** A sampling server that lists `models` and answers chat requests with its name (404 for `refuse`). */
async function samplingServer(name: string, models: string[], refuse: string[] = []) {
  const chats: string[] = [];
  const srv = http.createServer((req, res) => {
    let body = '';
    req.on('data', (chunk) => (body += chunk));
    req.on('end', () => {
      if (req.url === '/v1/models') {
        res.end(JSON.stringify({ data: models.map((id) => ({ id })) }));
        return;
      }
      const model = JSON.parse(body).model as string;
      chats.push(model);
      res.statusCode = refuse.includes(model) ? 404 : 200;
      res.end(JSON.stringify({ server: name, model }));
    });
  });
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
  return { url, chats, close: () => new Promise((resolve) => srv.close(resolve)) };
}

test('the pool routes by model, balances, and takes a dead or refusing server out', async () => {
  const a = await samplingServer('a', ['base', 'p@step-1'], ['p@step-1']);
  const b = await samplingServer('b', ['base', 'p@step-1', 'p@step-2']);
  const pool = createSamplerPool([a.url, b.url]);
  const ask = async (model: string) => {
    const response = await pool.fetch(`${a.url}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify({ model, messages: [] }),
    });
    return { status: response.status, ...((await response.json()) as { server: string }) };
  };
  try {
    expect((await ask('p@step-2')).server).toBe('b'); // only b holds it
    const both = await Promise.all([ask('base'), ask('base')]);
    expect(both.map((r) => r.server).sort()).toEqual(['a', 'b']); // one each: least loaded
    // a lists p@step-1 but refuses it: the request goes on to b, and a no longer counts as a holder.
    expect(await ask('p@step-1')).toMatchObject({ status: 200, server: 'b' });
    expect(a.chats).toContain('p@step-1');
    expect(pool.servers[0].models?.has('p@step-1')).toBe(false);
    await a.close();
    for (let i = 0; i < 3; i++) expect((await ask('base')).server).toBe('b'); // a is gone: b answers
    expect(pool.servers[0].downUntil).toBeGreaterThan(Date.now());
    await b.close();
    await expect(ask('base')).rejects.toThrow(/no sampling server answered/);
  } finally {
    await Promise.allSettled([a.close(), b.close()]);
  }
});
