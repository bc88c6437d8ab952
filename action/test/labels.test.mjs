// The post step's cleanup handles: every run's label, not only the latest.
// node --test 'action/test/*.test.mjs'
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

const lib = createRequire(import.meta.url)('../lib.js');

test('stateLabels keeps each run\'s label, the latest once', () => {
  const env = {
    STATE_label: 'vastrun-run2-x-2', // the latest run, also under its own key
    STATE_label_run1: 'vastrun-run1-x-1',
    STATE_label_run2: 'vastrun-run2-x-2',
    STATE_labelled: '', STATE_run_id: 'run2', PATH: '/bin',
  };
  assert.deepEqual(lib.stateLabels(env), ['vastrun-run1-x-1', 'vastrun-run2-x-2']);
  assert.deepEqual(lib.stateLabels({ STATE_run_id: 'run1' }), []);
});
