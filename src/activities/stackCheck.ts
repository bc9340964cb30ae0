import type pg from 'pg';

/** Proves the activity path end to end: a CPU-queue activity writing to and reading from PostgreSQL. */
export function createStackCheckActivities(pool: pg.Pool) {
  return {
    async recordStackCheck(
      workflowId: string,
      message: string,
    ): Promise<{ workflowId: string; stored: string }> {
      await pool.query(
        'INSERT INTO stack_checks (workflow_id, message) VALUES ($1, $2) ON CONFLICT (workflow_id) DO NOTHING',
        [workflowId, message],
      );
      const { rows } = await pool.query<{ message: string }>(
        'SELECT message FROM stack_checks WHERE workflow_id = $1',
        [workflowId],
      );
      return { workflowId, stored: rows[0].message };
    },
  };
}
