import type pg from 'pg';
import { createStackCheckActivities } from './stackCheck';

/** Activities by task queue; each worker registers the families of its queue. */
export function createActivities(pool: pg.Pool) {
  return {
    cpu: { ...createStackCheckActivities(pool) },
  };
}
