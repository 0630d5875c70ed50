// What counts as a shown suggestion (node --test, no VS Code).
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { ShownCounter, suggestionIdentity } from '../src/shown';

const DOC = 'file:///ws/example.py';

test('an answer still current when it settles counts once', () => {
  const c = new ShownCounter();
  const t = c.request(DOC);
  assert.equal(c.settle(DOC, t, suggestionIdentity(0, 'def add(a, b):', '\n    return a + b')), true);
  assert.equal(c.shown, 1);
});

test('an answer replaced by a newer request before it settles is not shown', () => {
  const c = new ShownCounter();
  const first = c.request(DOC);
  const second = c.request(DOC);
  assert.equal(c.settle(DOC, first, suggestionIdentity(0, 'def a', 'dd(')), false);
  assert.equal(c.settle(DOC, second, suggestionIdentity(0, 'def ad', 'd(')), true);
  assert.equal(c.shown, 1);
});

test('typing through a suggestion keeps it one suggestion; the next one after accepting is another', () => {
  const c = new ShownCounter();
  c.settle(DOC, c.request(DOC), suggestionIdentity(1, '    ', 'return a + b'));
  c.settle(DOC, c.request(DOC), suggestionIdentity(1, '    ret', 'urn a + b'));
  c.settle(DOC, c.request(DOC), suggestionIdentity(1, '    return', ' a + b'));
  assert.equal(c.shown, 1);
  // Accepted: the line is complete and the next request answers for the line below.
  c.settle(DOC, c.request(DOC), suggestionIdentity(2, '', '\ndef sub(a, b):'));
  assert.equal(c.shown, 2);
});

test('documents are counted apart, and a closed document starts afresh', () => {
  const c = new ShownCounter();
  const other = 'untitled:Untitled-1';
  const a = c.request(DOC);
  const b = c.request(other);
  assert.equal(c.settle(DOC, a, suggestionIdentity(0, '', 'x = 1')), true);
  assert.equal(c.settle(other, b, suggestionIdentity(0, '', 'x = 1')), true);
  c.forget(DOC);
  assert.equal(c.settle(DOC, c.request(DOC), suggestionIdentity(0, '', 'x = 1')), true);
  assert.equal(c.shown, 3);
});
