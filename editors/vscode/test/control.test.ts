// Per-language and manual control (node --test, no VS Code).
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { toggleText, toggleUpdate, whatToAsk } from '../src/control';

test('automatic triggers ask for one suggestion; an explicit one asks for alternatives when there are several', () => {
  assert.equal(whatToAsk(true, 'automatic', false, 3), 'one');
  assert.equal(whatToAsk(true, undefined, false, 3), 'one');
  assert.equal(whatToAsk(true, 'automatic', true, 3), 'alternatives');
  assert.equal(whatToAsk(true, 'automatic', true, 1), 'one');
});

test('manual mode asks only when the user triggers', () => {
  assert.equal(whatToAsk(true, 'manual', false, 1), 'none');
  assert.equal(whatToAsk(true, 'manual', true, 1), 'one');
  assert.equal(whatToAsk(true, 'manual', true, 4), 'alternatives');
});

test('disabled (for this language) asks nothing, explicit or not', () => {
  for (const invoked of [false, true]) {
    for (const trigger of ['automatic', 'manual'] as const) {
      assert.equal(whatToAsk(false, trigger, invoked, 3), 'none');
    }
  }
});

test('the toggle flips the value in effect where it is set, language override first', () => {
  assert.deepEqual(toggleUpdate(undefined, true), { value: false, level: 'global', language: false });
  assert.deepEqual(toggleUpdate({}, true), { value: false, level: 'global', language: false });
  assert.deepEqual(toggleUpdate({ globalValue: false }, false), { value: true, level: 'global', language: false });
  assert.deepEqual(toggleUpdate({ globalValue: false, workspaceValue: true }, true), { value: false, level: 'workspace', language: false });
  assert.deepEqual(toggleUpdate({ globalValue: false, globalLanguageValue: true }, true), { value: false, level: 'global', language: true });
  assert.deepEqual(
    toggleUpdate({ workspaceFolderValue: true, workspaceLanguageValue: false }, false),
    { value: true, level: 'workspace', language: true },
  );
  assert.deepEqual(
    toggleUpdate({ globalLanguageValue: true, workspaceFolderLanguageValue: false }, false),
    { value: true, level: 'workspaceFolder', language: true },
  );
});

test('the status bar toggle says the state, the language and what a click does', () => {
  assert.deepEqual(toggleText(true, 'python'), { text: '$(eye)', tooltip: 'Inline suggestions on for python: click to turn them off' });
  assert.deepEqual(toggleText(false, undefined), { text: '$(eye-closed)', tooltip: 'Inline suggestions off: click to turn them on' });
  // Not named like the main item, which the real-VS Code suite finds by its name.
  assert.ok(!toggleText(true, 'python').tooltip.includes('specfill'));
});
