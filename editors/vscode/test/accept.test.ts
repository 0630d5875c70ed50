// The accept command wraps the server's item command (node --test, no VS Code).
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { ACCEPTED, acceptCommand, onAccepted } from '../src/accept';

const SERVER = { title: 'specfill: accepted', command: 'specfill.accepted', arguments: [{ id: 7, length: 12 }] };

test('an accept is counted and the server command runs with its own arguments', async () => {
  const wrapped = acceptCommand(SERVER);
  assert.equal(wrapped.command, ACCEPTED);
  let counted = 0;
  const ran: unknown[][] = [];
  await onAccepted(() => (counted += 1), async (...call) => void ran.push(call), ...(wrapped.arguments as []));
  assert.equal(counted, 1);
  assert.deepEqual(ran, [['specfill.accepted', { id: 7, length: 12 }]]);
});

test('an item without a server command is still counted', async () => {
  const wrapped = acceptCommand(undefined);
  let counted = 0;
  const ran: unknown[][] = [];
  await onAccepted(() => (counted += 1), async (...call) => void ran.push(call), ...(wrapped.arguments as []));
  assert.equal(counted, 1);
  assert.deepEqual(ran, []);
});
