// Next edits without VS Code: the setting, the server's answer checked, Tab's two steps and the
// label of the new text (node --test).
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { AskedVersions, insertedLabel, insertedLines, nextEditWanted, parseNextEdit, tabAction } from '../src/nextEdit';

const URI = 'file:///ws/example.py';
const EDIT = {
  uri: URI,
  range: { start: { line: 3, character: 4 }, end: { line: 3, character: 9 } },
  newText: 'total',
  id: '7',
};

test('next edits are asked for only while the server setting is on', () => {
  assert.equal(nextEditWanted('demo'), true);
  assert.equal(nextEditWanted('http://gpu:8080'), true);
  assert.equal(nextEditWanted('off'), false);
  assert.equal(nextEditWanted(undefined), false); // a server without the setting
  assert.equal(nextEditWanted(''), false);
});

test("the server's answer is an edit of this document, or nothing", () => {
  assert.deepEqual(parseNextEdit(EDIT, URI), EDIT);
  assert.equal(parseNextEdit(null, URI), undefined);
  assert.equal(parseNextEdit({ ...EDIT, uri: 'file:///ws/other.py' }, URI), undefined);
  assert.equal(parseNextEdit({ ...EDIT, newText: 3 }, URI), undefined);
  assert.equal(parseNextEdit({ ...EDIT, range: { start: { line: 3, character: 9 }, end: { line: 3, character: 4 } } }, URI), undefined);
  assert.equal(parseNextEdit({ ...EDIT, range: { start: { line: -1, character: 0 }, end: { line: 3, character: 4 } } }, URI), undefined);
  assert.equal(parseNextEdit({ ...EDIT, range: { start: { line: 3, character: 4 }, end: { line: 3, character: 4 } }, newText: '' }, URI), undefined);
  // An insertion and a deletion are edits.
  assert.ok(parseNextEdit({ ...EDIT, range: { start: { line: 3, character: 4 }, end: { line: 3, character: 4 } } }, URI));
  assert.ok(parseNextEdit({ ...EDIT, newText: '' }, URI));
  // An id that is a number is kept as text.
  assert.equal(parseNextEdit({ ...EDIT, id: 12 }, URI)?.id, '12');
});

test('Tab jumps to the edit first, then applies it', () => {
  const edit = parseNextEdit(EDIT, URI)!;
  assert.equal(tabAction({ line: 0, character: 4 }, edit), 'jump');
  assert.equal(tabAction({ line: 3, character: 5 }, edit), 'jump');
  assert.equal(tabAction({ line: 3, character: 4 }, edit), 'apply');
});

test('the new text is labelled on one line', () => {
  assert.equal(insertedLabel('total'), 'total');
  assert.equal(insertedLabel('a\nb\r\nc'), 'a \u23ce b \u23ce c');
});

test('the new text is drawn beside the lines it replaces, line by line', () => {
  const range = (a: number, b: number, c: number, d: number) => ({ start: { line: a, character: b }, end: { line: c, character: d } });
  // one line: after the range, as before
  assert.deepEqual(insertedLines(range(3, 4, 3, 9), 'total'), [{ line: 3, atLineEnd: false, text: 'total' }]);
  // as many lines as the range: each after its line, the last at the range's end
  assert.deepEqual(insertedLines(range(1, 8, 3, 2), 'b)\n  bar(b\r\n  baz(b'), [
    { line: 1, atLineEnd: true, text: 'b)' },
    { line: 2, atLineEnd: true, text: '  bar(b' },
    { line: 3, atLineEnd: false, text: '  baz(b' },
  ]);
  // more new lines than the range has: the rest at its end
  assert.deepEqual(insertedLines(range(1, 8, 2, 2), 'b)\n  x = 1\n  y'), [
    { line: 1, atLineEnd: true, text: 'b)' },
    { line: 2, atLineEnd: false, text: '  x = 1 \u23ce   y' },
  ]);
  // fewer: the range's other lines are struck only; a one-line range takes all, joined
  assert.deepEqual(insertedLines(range(1, 0, 4, 0), 'x = 2\n'), [{ line: 1, atLineEnd: true, text: 'x = 2' }]);
  assert.deepEqual(insertedLines(range(5, 0, 5, 0), 'a\nb\n'), [{ line: 5, atLineEnd: false, text: 'a \u23ce b \u23ce ' }]);
  assert.deepEqual(insertedLines(range(5, 0, 6, 0), ''), []);
});

test('a next edit is asked once per version of a document, and whenever the user asks', () => {
  const asked = new AskedVersions();
  assert.equal(asked.shouldAsk(URI, 3, false), true);
  assert.equal(asked.shouldAsk(URI, 3, false), false); // the cursor moved: no change
  assert.equal(asked.shouldAsk(URI, 3, true), true); // asked explicitly
  assert.equal(asked.shouldAsk('file:///ws/other.py', 3, false), true);
  assert.equal(asked.shouldAsk(URI, 4, false), true); // changed
  asked.forget(URI);
  assert.equal(asked.shouldAsk(URI, 4, false), true);
});
