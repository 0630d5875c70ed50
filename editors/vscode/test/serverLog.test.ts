// The output channel level of each server stderr line (node --test, no VS Code).
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { StderrLevels } from '../src/serverLog';

test('logging lines keep their level; INFO is not an error', () => {
  const l = new StderrLevels();
  assert.equal(l.level('2026-11-29 12:00:00,123 INFO specfill.config: settings applied'), 'info');
  assert.equal(l.level('2026-11-29 12:00:00,124 DEBUG lsp.server: request 3'), 'debug');
  assert.equal(l.level('2026-11-29 12:00:00,125 WARNING engine.load: no draft, plain decoding'), 'warn');
  assert.equal(l.level('2026-11-29 12:00:00,126 ERROR lsp.server: model failed to load'), 'error');
  assert.equal(l.level('2026-11-29 12:00:00,127 CRITICAL lsp: giving up'), 'error');
  assert.equal(l.level('INFO specfill.config: an error-free line that mentions error'), 'info');
});

test('a crash is an error, its traceback body too; other lines follow the line before', () => {
  const l = new StderrLevels();
  assert.equal(l.level("specfill serve: argument --log-level: invalid choice: 'bogus'"), 'error');
  assert.equal(l.level('2026-11-29 12:00:00,000 INFO specfill: starting'), 'info');
  assert.equal(l.level('  second line of that message'), 'info');
  assert.equal(l.level('Traceback (most recent call last):'), 'error');
  assert.equal(l.level('  File "/x/lsp/__main__.py", line 3, in <module>'), 'error');
  assert.equal(l.level('ModuleNotFoundError: No module named \'torch\''), 'error');
  assert.equal(l.level('2026-11-29 12:00:01,000 INFO specfill: retrying'), 'info');
  assert.equal(l.level('usage: specfill serve [-h]'), 'info');
  assert.equal(l.level('specfill serve: error: argument --log-level: invalid choice'), 'error');
});
