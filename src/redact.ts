/**
 * Error messages and log lines end up in workflow history, run status and CI logs: credentials in URLs
 * (`scheme://user:password@host`) and the values of secret variables never go there.
 */
const SECRET_VARIABLES = [
  'EVALRL_MODEL_SERVER_TOKEN',
  'EVALRL_TEACHER_API_KEY',
  'TEMPORAL_API_KEY',
  'TEMPORAL_TLS_CLIENT_KEY_DATA',
  'DATABASE_URL',
  'PGPASSWORD',
];

/** Secrets that come from files, not variables (the embedded PostgreSQL's generated passwords). */
const secretValues = new Set<string>();

/** Makes `redact` take this value out of text too (values under 8 characters are not: they would mangle text). */
export function addSecret(value: string) {
  if (value.length >= 8) secretValues.add(value);
}

export function redact(text: string, env: NodeJS.ProcessEnv = process.env): string {
  let out = text.replace(/(\b[a-z][a-z0-9+.-]*:\/\/)[^\s/@:]+(:[^\s/@]*)?@/gi, '$1***@');
  const values = [...SECRET_VARIABLES.map((name) => env[name]), ...secretValues];
  for (const value of values) {
    if (value && value.length >= 8) out = out.split(value).join('***');
  }
  return out;
}

/** How deep `redactError` follows causes, aggregated errors and details: a chain is never longer in practice. */
const MAX_DEPTH = 8;

/**
 * Redacts an error in place through its whole chain — message, stack, `cause`, an AggregateError's `errors`
 * and an ApplicationFailure's `details` (strings anywhere in them) — to a bounded depth, each error once (a
 * cycle ends). Temporal serializes all of them into history, so one unredacted link leaks the secret.
 */
export function redactError<T>(err: T, env: NodeJS.ProcessEnv = process.env): T {
  const seen = new Set<object>();
  const value = (v: unknown, depth: number): unknown => {
    if (typeof v === 'string') return redact(v, env);
    if (v === null || typeof v !== 'object' || depth > MAX_DEPTH || seen.has(v)) return v;
    if (v instanceof Error) return error(v, depth);
    seen.add(v);
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) set(v, i, value(v[i], depth + 1));
    } else if (Object.getPrototypeOf(v) === Object.prototype || Object.getPrototypeOf(v) === null) {
      for (const key of Object.keys(v)) set(v, key, value((v as Record<string, unknown>)[key], depth + 1));
    }
    return v;
  };
  const error = (e: Error, depth: number): Error => {
    seen.add(e);
    set(e, 'message', redact(e.message ?? '', env));
    if (typeof e.stack === 'string') set(e, 'stack', redact(e.stack, env));
    const fields = e as unknown as Record<string, unknown>;
    for (const key of ['cause', 'errors', 'details'])
      if (fields[key] !== undefined && fields[key] !== null) set(e, key, value(fields[key], depth + 1));
    return e;
  };
  return value(err, 0) as T;
}

/** Sets a property even where it is read-only (a frozen object stays as it is). */
function set(target: object, key: string | number, v: unknown) {
  if ((target as Record<string | number, unknown>)[key] === v) return;
  try {
    Object.defineProperty(target, key, { value: v, writable: true, configurable: true });
  } catch {
    // a non-configurable property: leave it
  }
}
