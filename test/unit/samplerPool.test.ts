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
async function samplingServer(name: string, models: string[], refuse: string[] = [], port = 0) {
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
  await new Promise<void>((resolve) => srv.listen(port, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
  return { url, chats, close: () => new Promise((resolve) => srv.close(resolve)) };
}

test('the pool routes by model, balances, and takes a dead or refusing server out', async () => {
  const a = await samplingServer('a', ['base', 'p@step-1'], ['p@step-1']);
  const b = await samplingServer('b', ['base', 'p@step-1', 'p@step-2']);
  const pool = createSamplerPool([a.url, b.url], { waitForServersMs: 0 });
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

test('a server that forgot a published version (a restarted vLLM) has it loaded again, once, and is asked again', async () => {
  const refuse = ['p@step-3'];
  const restarted = await samplingServer('a', ['base'], refuse);
  const loads: string[] = [];
  const republish = async (url: string, model: string) => {
    loads.push(`${url} ${model}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
    refuse.length = 0; // loaded: the server holds it again
    return true;
  };
  const pool = createSamplerPool([restarted.url], { republish });
  const ask = async (model: string) =>
    (
      await pool.fetch(`${restarted.url}/v1/chat/completions`, {
        method: 'POST',
        body: JSON.stringify({ model, messages: [] }),
      })
    ).status;
  try {
    expect(await Promise.all([ask('p@step-3'), ask('p@step-3'), ask('p@step-3')])).toEqual([200, 200, 200]);
    expect(loads).toEqual([`${restarted.url} p@step-3`]); // one load for the three requests that met the 404
    expect(await ask('unknown')).toBe(200);
    refuse.push('q@step-1');
    const never = createSamplerPool([restarted.url], { republish: async () => false });
    const refused = await never.fetch(`${restarted.url}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify({ model: 'q@step-1', messages: [] }),
    });
    expect(refused.status).toBe(404); // nothing to load: the refusal reaches the caller
  } finally {
    await restarted.close();
  }
});

test('while every server is out, a request waits for one to come back (a sampler restarting), within its bound', async () => {
  const first = await samplingServer('a', ['base']);
  const port = new URL(first.url).port;
  const pool = createSamplerPool([first.url], { waitForServersMs: 20_000 });
  const ask = () =>
    pool.fetch(`${first.url}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify({ model: 'base', messages: [] }),
    });
  expect((await ask()).status).toBe(200);
  await first.close();
  const answered = ask();
  await new Promise((resolve) => setTimeout(resolve, 1500));
  const again = await samplingServer('a', ['base'], [], Number(port)); // restarted on its port
  try {
    expect((await answered).status).toBe(200);
    expect(again.chats).toEqual(['base']);
  } finally {
    await again.close();
  }
  const gone = createSamplerPool([first.url], { waitForServersMs: 1500 });
  await expect(
    gone.fetch(`${first.url}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify({ model: 'base' }),
    }),
  ).rejects.toThrow(/no sampling server answered/);
});
