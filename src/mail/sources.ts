import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { MAX_MESSAGE_BYTES, type RawMessage } from './email';

export type MailFormat = 'maildir' | 'mbox' | 'jsonl';

/**
 * Enron maildir in the CMU layout, `<user>/<folder>[/<subfolder>…]/<n>.`: the user is the owner inbox.
 * PATH may be the root holding the users, or one user's folder (then `inbox` names it).
 */
export async function* readMaildir(root: string, inbox?: string): AsyncGenerator<RawMessage> {
  const users = inbox
    ? [{ user: inbox, dir: root }]
    : listDirs(root).map((user) => ({ user, dir: path.join(root, user) }));
  for (const { user, dir } of users) {
    for await (const file of walkFiles(dir)) {
      const folder = path.relative(dir, path.dirname(file)).split(path.sep).join('/');
      const { size } = await fs.promises.stat(file);
      yield size > MAX_MESSAGE_BYTES
        ? { inbox: user, folder, source: file, oversize: size }
        : { inbox: user, folder, source: file, raw: await fs.promises.readFile(file) };
    }
  }
}

/**
 * An mbox file (messages start at lines beginning `From `; `>From ` unquoted as in mboxrd). Read as latin1,
 * one char per byte, so 8-bit content reaches the MIME parser as the bytes it was (its charset decodes them).
 */
export async function* readMbox(file: string, inbox: string): AsyncGenerator<RawMessage> {
  let lines: string[] = [];
  let bytes = 0;
  let index = 0;
  const flush = (): RawMessage => {
    const origin = { inbox, folder: path.basename(file), source: `${file}#${index++}` };
    const message =
      bytes > MAX_MESSAGE_BYTES
        ? { ...origin, oversize: bytes }
        : { ...origin, raw: Buffer.from(lines.join('\n'), 'latin1') };
    lines = [];
    bytes = 0;
    return message;
  };
  for await (const line of readline.createInterface({
    input: fs.createReadStream(file, { encoding: 'latin1' }),
    crlfDelay: Infinity,
  })) {
    if (line.startsWith('From ')) {
      if (bytes > 0) yield flush();
      continue;
    }
    bytes += line.length + 1;
    if (bytes <= MAX_MESSAGE_BYTES) lines.push(/^>+From /.test(line) ? line.slice(1) : line);
  }
  if (bytes > 0) yield flush();
}

/** JSONL, one email object per line (see emailSchema); a line that is not JSON is passed on as text for the report. */
export async function* readJsonl(file: string, inbox: string): AsyncGenerator<RawMessage> {
  let lineNo = 0;
  for await (const line of readline.createInterface({
    input: fs.createReadStream(file),
    crlfDelay: Infinity,
  })) {
    lineNo++;
    if (line.trim() === '') continue;
    const origin = { inbox, folder: path.basename(file), source: `${file}:${lineNo}` };
    if (line.length > MAX_MESSAGE_BYTES) {
      yield { ...origin, oversize: Buffer.byteLength(line) };
      continue;
    }
    let json: unknown;
    try {
      json = JSON.parse(line);
    } catch {
      json = { invalidJson: line.slice(0, 80) };
    }
    yield { ...origin, json };
  }
}

export function detectFormat(target: string): MailFormat {
  if (fs.statSync(target).isDirectory()) return 'maildir';
  return target.endsWith('.jsonl') || target.endsWith('.ndjson') ? 'jsonl' : 'mbox';
}

export function readMessages(target: string, format: MailFormat, inbox?: string): AsyncGenerator<RawMessage> {
  if (format === 'maildir') return readMaildir(target, inbox);
  if (!inbox)
    throw new Error(`--inbox is required for ${format} input (${target}): name the mailbox that owns it`);
  return format === 'mbox' ? readMbox(target, inbox) : readJsonl(target, inbox);
}

function listDirs(dir: string): string[] {
  return fs
    .readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => e.name)
    .sort();
}

async function* walkFiles(dir: string): AsyncGenerator<string> {
  const entries = (await fs.promises.readdir(dir, { withFileTypes: true })).sort((a, b) =>
    a.name.localeCompare(b.name),
  );
  for (const entry of entries) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) yield* walkFiles(full);
    else if (entry.isFile()) yield full;
  }
}
