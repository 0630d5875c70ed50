// Restarting a server that exits unexpectedly: back-off, the give-up, the notice (node --test, no VS Code).
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { RESTART_DELAYS_MS, RestartPolicy, STABLE_MS, exitNotice } from '../src/restart';

test('exits in a row are started again after 1 s, 2 s and 4 s, then no more', () => {
  const policy = new RestartPolicy();
  let now = 0;
  const decisions = [];
  for (let i = 0; i < 4; i++) {
    policy.started(now);
    now += 500;
    decisions.push(policy.exited(now));
  }
  assert.deepEqual(RESTART_DELAYS_MS, [1000, 2000, 4000]);
  assert.deepEqual(decisions, [
    { restart: true, delayMs: 1000, attempt: 1, of: 3 },
    { restart: true, delayMs: 2000, attempt: 2, of: 3 },
    { restart: true, delayMs: 4000, attempt: 3, of: 3 },
    { restart: false, exits: 4 },
  ]);
});

test('a server that ran long enough, or one started by hand, starts the count again', () => {
  const policy = new RestartPolicy();
  policy.started(0);
  policy.exited(10);
  policy.started(1010);
  assert.deepEqual(policy.exited(1010 + STABLE_MS), { restart: true, delayMs: 1000, attempt: 1, of: 3 });
  policy.exited(1010 + STABLE_MS + 1);
  policy.reset();
  assert.deepEqual(policy.exited(0), { restart: true, delayMs: 1000, attempt: 1, of: 3 });
});

test('the notice says how it exited and what happens next, in one line', () => {
  assert.equal(exitNotice({ code: null, signal: 'SIGKILL' }, { restart: true, delayMs: 2000, attempt: 2, of: 3 }),
    'specfill: the server exited (signal SIGKILL); starting it again in 2 s (2 of 3)');
  const last = exitNotice({ code: 1, signal: null }, { restart: false, exits: 4 });
  assert.match(last, /^specfill: the server exited \(code 1\), 4 times in a row: not starting it again/);
  assert.match(last, /Restart Server/);
  assert.ok(!last.includes('\n'));
});
