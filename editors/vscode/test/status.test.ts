// The status bar text for a remote target that fails and recovers (node --test, no VS Code).
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { SHOW_LOG, SHOW_STATS, StatusState, phaseAfterAnswer, refusedFromStatus, statusText, targetFromStatus } from '../src/status';

const ready: StatusState = { phase: 'ready', shown: 4, accepted: 1, lastLatencyMs: 35 };

test('a specfill/status error shows in the status bar, with its message in the tooltip and the log on click', () => {
  const target = targetFromStatus({
    backend: 'remote', url: 'http://gpu:8080', state: 'error', kind: 'unreachable',
    message: 'cannot reach http://gpu:8080/infill: [Errno 111] Connection refused',
  });
  assert.deepEqual(target, { kind: 'unreachable', url: 'http://gpu:8080', message: 'cannot reach http://gpu:8080/infill: [Errno 111] Connection refused' });
  const shown = statusText({ ...ready, target });
  assert.equal(shown.text, '$(warning) specfill remote error: unreachable');
  assert.match(shown.tooltip, /http:\/\/gpu:8080 fails: cannot reach .* Connection refused/);
  assert.equal(shown.command, SHOW_LOG);
  assert.equal(statusText({ ...ready, target: targetFromStatus({ state: 'error', kind: 'server_error', message: 'x' }) }).text,
    '$(warning) specfill remote error: server error');
});

test('an ok status clears it: the usual ready text again', () => {
  for (const ok of [{ backend: 'remote', url: 'http://gpu:8080', state: 'ok', kind: '', message: '' }, { backend: 'local', state: 'ok' }, undefined]) {
    assert.equal(targetFromStatus(ok), undefined);
  }
  const shown = statusText({ ...ready, target: undefined });
  assert.equal(shown.text, '$(check) specfill 35 ms · 25% accepted');
  assert.equal(shown.command, SHOW_STATS);
});

test('loading and a stopped server say so whatever the target did', () => {
  const target = targetFromStatus({ state: 'error', kind: 'auth', message: '401' });
  assert.match(statusText({ ...ready, phase: 'loading', percentage: 40, target }).text, /specfill 40%/);
  assert.match(statusText({ ...ready, phase: 'stopped', target }).text, /debug-stop/);
});

test('a document the server refuses says why, while another one is fine', () => {
  const params = { textDocument: { uri: 'file:///big.py' }, state: 'refused', kind: 'too_large',
    reason: '2500000 characters, over maxDocumentChars (2000000); no completions for it' };
  const found = refusedFromStatus(params);
  assert.equal(found?.uri, 'file:///big.py');
  const shown = statusText({ ...ready, refused: found?.refused });
  assert.equal(shown.text, '$(circle-slash) specfill: file too large');
  assert.match(shown.tooltip, /over maxDocumentChars \(2000000\)/);
  assert.deepEqual(refusedFromStatus({ textDocument: { uri: 'file:///big.py' }, state: 'ok' }), { uri: 'file:///big.py' });
  assert.equal(refusedFromStatus({ state: 'refused' }), undefined);
});

test('a language that is off, and a server that is starting again, say so', () => {
  const off = statusText({ ...ready, phase: 'disabled', disabledFor: 'markdown' });
  assert.equal(off.text, '$(circle-slash) specfill: off for markdown');
  assert.match(off.tooltip, /specfill\.enable is off for markdown/);
  const restarting = statusText({ ...ready, phase: 'restarting', message: 'specfill: the server exited (signal SIGKILL); starting it again in 1 s (1 of 3)' });
  assert.equal(restarting.text, '$(sync~spin) specfill: restarting');
  assert.match(restarting.tooltip, /signal SIGKILL/);
  assert.equal(restarting.command, SHOW_LOG);
});

test('an answer that ends after the server died leaves the restart notice in place', () => {
  for (const phase of ['restarting', 'error', 'stopped', 'starting', 'loading'] as const) {
    assert.equal(phaseAfterAnswer(phase, true), phase);
    assert.equal(phaseAfterAnswer(phase, false), phase);
  }
  assert.equal(phaseAfterAnswer('ready', true), 'ready');
  assert.equal(phaseAfterAnswer('ready', false), 'disabled');
  assert.equal(phaseAfterAnswer('disabled', true), 'ready');
});
