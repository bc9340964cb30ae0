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

export function redact(text: string, env: NodeJS.ProcessEnv = process.env): string {
  let out = text.replace(/(\b[a-z][a-z0-9+.-]*:\/\/)[^\s/@:]+(:[^\s/@]*)?@/gi, '$1***@');
  for (const name of SECRET_VARIABLES) {
    const value = env[name];
    if (value && value.length >= 8) out = out.split(value).join('***');
  }
  return out;
}
