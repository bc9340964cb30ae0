import { defineSearchAttributeKey } from '@temporalio/common';

/** The search attributes runs are listed and filtered by (registered by `evalrl up`, upserted by workflows). */
export const RUN_ID = defineSearchAttributeKey('EvalrlRunId', 'KEYWORD');
export const STAGE = defineSearchAttributeKey('EvalrlStage', 'KEYWORD');
export const STEP = defineSearchAttributeKey('EvalrlStep', 'INT');
export const STATUS = defineSearchAttributeKey('EvalrlStatus', 'KEYWORD');

export const SEARCH_ATTRIBUTES = [RUN_ID, STAGE, STEP, STATUS];
