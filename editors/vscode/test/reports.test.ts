// User acceptance reports: what is sent when (node --test, no VS Code).
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { ACCEPTED_PART, DISMISSED, SHOWN, UserReports, suggestionId, withId } from '../src/reports';
import { acceptCommand } from '../src/accept';
import { suggestionIdentity } from '../src/shown';

const DOC = 'file:///ws/example.py';
const SERVER = { title: 'specfill: accepted', command: 'specfill.accepted', arguments: [{ id: 7, length: 12 }] };

function recorder(): { sent: [string, Record<string, unknown>][]; reports: UserReports } {
  const sent: [string, Record<string, unknown>][] = [];
  return { sent, reports: new UserReports((m, p) => sent.push([m, p])) };
}

const insert = (line: number, character: number, text: string) => ({ startLine: line, startCharacter: character, rangeLength: 0, text });

test('the id is read from the server command and from the accept command carrying it', () => {
  assert.equal(suggestionId(SERVER), 7);
  assert.equal(suggestionId(acceptCommand(SERVER)), 7);
  assert.equal(suggestionId(undefined), undefined);
  assert.equal(suggestionId({ command: 'x', arguments: [] }), undefined);
  assert.deepEqual(withId(SERVER, 3).arguments, [{ id: 3, length: 12 }]);
  assert.equal(SERVER.arguments[0].id, 7); // unchanged
});

test('shown is sent once; a different suggestion replacing it dismisses it', () => {
  const { sent, reports } = recorder();
  reports.shown(DOC, 1, 'a', 'return a + b', 1, 4);
  reports.shown(DOC, 2, 'b', 'pass', 1, 4);
  assert.deepEqual(sent, [[SHOWN, { id: 1 }], [DISMISSED, { id: 1 }], [SHOWN, { id: 2 }]]);
});

test('an empty answer, a text change elsewhere or closing the document dismisses it', () => {
  const { sent, reports } = recorder();
  reports.shown(DOC, 1, 'a', 'return a + b', 1, 4);
  reports.answered(DOC, undefined, undefined);
  reports.shown(DOC, 2, 'b', 'return a + b', 1, 4);
  reports.edited(DOC, insert(0, 0, 'x'));
  reports.shown(DOC, 3, 'c', 'return a + b', 1, 4);
  reports.edited(DOC, insert(1, 4, 'q')); // typed something else
  reports.shown(DOC, 4, 'd', 'return a + b', 1, 4);
  reports.closed(DOC);
  reports.closed(DOC); // nothing left to dismiss
  assert.deepEqual(sent.filter(([m]) => m === DISMISSED), [[DISMISSED, { id: 1 }], [DISMISSED, { id: 2 }], [DISMISSED, { id: 3 }], [DISMISSED, { id: 4 }]]);
});

test('a word or line accept is a partial accept with the length in the document so far; typing through is not', () => {
  const { sent, reports } = recorder();
  const text = 'return a + b\n    # done';
  reports.shown(DOC, 5, suggestionIdentity(1, '    ', text), text, 1, 4);
  reports.edited(DOC, insert(1, 4, 'r')); // typed through
  reports.edited(DOC, insert(1, 5, 'eturn ')); // accept word
  reports.edited(DOC, insert(1, 11, 'a + b\n')); // accept line
  assert.deepEqual(sent, [
    [SHOWN, { id: 5 }],
    [ACCEPTED_PART, { id: 5, acceptedLength: 7, full: false }],
    [ACCEPTED_PART, { id: 5, acceptedLength: 13, full: false }],
  ]);
  // The rest continues on the next line, at column 0.
  reports.edited(DOC, insert(2, 0, '    # '));
  assert.deepEqual(sent[sent.length - 1], [ACCEPTED_PART, { id: 5, acceptedLength: 19, full: false }]);
});

test('Tab inserts the rest: no partial report, the command reports it under the first shown id', () => {
  const { sent, reports } = recorder();
  reports.shown(DOC, 5, 'same', 'return a + b', 1, 4);
  reports.edited(DOC, insert(1, 4, 're')); // typed (or accepted) a bit
  reports.answered(DOC, 6, 'same'); // VS Code asked again: the same suggestion, a new id
  reports.edited(DOC, insert(1, 6, 'turn a + b')); // Tab
  assert.equal(reports.accepted(6), 5);
  assert.deepEqual(sent, [[SHOWN, { id: 5 }], [ACCEPTED_PART, { id: 5, acceptedLength: 2, full: false }]]);
  // Done: a later change does not dismiss it, and its ids are forgotten.
  reports.edited(DOC, insert(0, 0, 'x'));
  assert.equal(sent.length, 2);
  assert.equal(reports.accepted(6), 6);
});

test('accepting an alternative that was not shown reports its own id and leaves the shown one to be dismissed', () => {
  const { sent, reports } = recorder();
  reports.shown(DOC, 5, 'first', 'return a + b', 1, 4);
  assert.equal(reports.accepted(9), 9);
  reports.edited(DOC, insert(1, 4, 'pass'));
  assert.deepEqual(sent, [[SHOWN, { id: 5 }], [DISMISSED, { id: 5 }]]);
});

test('stopping dismisses what is shown in every document', () => {
  const { sent, reports } = recorder();
  reports.shown(DOC, 1, 'a', 'x = 1', 0, 0);
  reports.shown('file:///ws/other.py', 2, 'b', 'y = 2', 0, 0);
  reports.dismissAll();
  assert.deepEqual(sent.filter(([m]) => m === DISMISSED).map(([, p]) => p.id).sort(), [1, 2]);
});
