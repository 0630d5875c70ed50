// Visited places: what is sent when the active editor changes (node --test, no VS Code).
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { VISITED, Visits } from '../src/visits';

test('leaving an editor reports the line its cursor was last on, once', () => {
  const sent: [string, Record<string, unknown>][] = [];
  const visits = new Visits((m, p) => sent.push([m, p]));
  visits.switched({ uri: 'file:///a.py', line: 3 });
  visits.moved({ uri: 'file:///a.py', line: 40 });
  visits.moved({ uri: 'file:///a.py', line: 41 });
  assert.equal(sent.length, 0);
  visits.switched({ uri: 'file:///b.py', line: 0 });
  assert.deepEqual(sent, [[VISITED, { textDocument: { uri: 'file:///a.py' }, position: { line: 41, character: 0 } }]]);
  visits.switched({ uri: 'file:///b.py', line: 7 }); // the same document again: nothing left
  visits.switched(undefined); // the output panel, say: b.py was left at line 7
  visits.switched({ uri: 'file:///a.py', line: 41 });
  assert.deepEqual(sent.map(([, p]) => p.position), [{ line: 41, character: 0 }, { line: 7, character: 0 }]);
});
