import { DefaultLogger, type LogEntry } from '@temporalio/worker';
import { redact } from '../redact';

/** A worker of one queue has, by design, no workflows or no activities: the SDK's notice of it is noise. */
const BY_DESIGN = /^No (workflows|activities) registered, not polling/;

/** The SDK's warnings and errors on stderr, one line each (redacted), less the notices a per-queue worker triggers. */
export function workerLogger(level: 'WARN' | 'ERROR' = 'WARN') {
  return new DefaultLogger(level, (entry: LogEntry) => {
    if (BY_DESIGN.test(entry.message)) return;
    const meta = entry.meta as { activityType?: string; workflowId?: string; error?: unknown } | undefined;
    const where = [meta?.workflowId, meta?.activityType].filter(Boolean).join(' ');
    const error = meta?.error instanceof Error ? `: ${meta.error.message}` : '';
    console.error(redact(`${entry.level} ${entry.message}${where ? ` (${where})` : ''}${error}`));
  });
}
