import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseMessage } from '../../src/mail/parse';
import { readJsonl, readLines, readMbox } from '../../src/mail/sources';
import type { RawMessage } from '../../src/mail/email';

const collect = async <T>(items: AsyncIterable<T>): Promise<T[]> => {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
};

describe('bounded line reading', () => {
  let dir: string;
  beforeAll(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'evalrl-lines-'))));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('passes over a JSONL line over the limit, recording why and where, and reads on after it', async () => {
    const file = path.join(dir, 'mail.jsonl');
    const line = (id: string, body = id) =>
      JSON.stringify({ messageId: `<${id}@x>`, from: { address: 'a@b.c' }, date: '2001-01-01', body });
    fs.writeFileSync(file, [line('j1'), line('huge', 'y'.repeat(5000)), '', line('j3')].join('\r\n'));
    const messages = await collect(readJsonl(file, 'u', { maxLineBytes: 1000 }));
    expect(messages.map((m) => m.source)).toEqual([`${file}:1`, `${file}:2`, `${file}:4`]);
    expect(messages[1]).toMatchObject({ oversize: expect.any(Number) });
    const rejected = await parseMessage(messages[1]);
    expect(rejected).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/^line 2 is 50\d\d bytes, over the 1000-byte line limit/),
    });
    for (const m of [messages[0], messages[2]]) expect(await parseMessage(m)).toMatchObject({ ok: true });
  });

  it('rejects the mbox message holding a line over the limit and keeps the others', async () => {
    const file = path.join(dir, 'mail.mbox');
    const msg = (id: string, body = id) =>
      `From a@b.c Mon Jan  1 10:00:00 2001\nMessage-ID: <${id}@x>\nDate: Mon, 1 Jan 2001 10:00:00 -0600\nFrom: a@b.c\n\n${body}\n`;
    fs.writeFileSync(file, msg('m1') + msg('m2', 'z'.repeat(3000)) + msg('m3'));
    const messages: RawMessage[] = await collect(readMbox(file, 'u', { maxLineBytes: 1000 }));
    expect(messages.map((m) => m.source)).toEqual([`${file}#0`, `${file}#1`, `${file}#2`]);
    const results = await Promise.all(messages.map(parseMessage));
    expect(results.map((r) => r.ok)).toEqual([true, false, true]);
    expect(results[1]).toMatchObject({
      reason: expect.stringMatching(/^line 12 is 3000 bytes, over the 1000-byte line limit/),
    });
  });

  it('holds no more than the limit of a long line, across chunks', async () => {
    const file = path.join(dir, 'long.txt');
    fs.writeFileSync(file, `short\n${'x'.repeat(300_000)}\nafter\nlast`);
    expect(await collect(readLines(file, 'utf8', 1000))).toEqual([
      { n: 1, text: 'short' },
      { n: 2, over: 300_000 },
      { n: 3, text: 'after' },
      { n: 4, text: 'last' },
    ]);
  });
});
