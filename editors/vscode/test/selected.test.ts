// specfill/alternatives' params carry the completion menu's selected item (node --test, no VS Code).
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { alternativesParams } from '../src/selected';

test('without a selected item the params are the document and the position', () => {
  assert.deepEqual(alternativesParams('file:///a.py', { line: 1, character: 6 }), {
    textDocument: { uri: 'file:///a.py' },
    position: { line: 1, character: 6 },
  });
});

test('a selected item goes in context.selectedCompletionInfo, as in textDocument/inlineCompletion', () => {
  const selected = { range: { start: { line: 1, character: 4 }, end: { line: 1, character: 6 } }, text: 'return' };
  assert.deepEqual(alternativesParams('file:///a.py', { line: 1, character: 6 }, selected), {
    textDocument: { uri: 'file:///a.py' },
    position: { line: 1, character: 6 },
    context: { selectedCompletionInfo: selected },
  });
});
