// Unit tests of the extension's settings handling and status text (node --test, no VS Code).
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import {
  ConfigurationLike,
  EXTENSION_KEYS,
  classifyChange,
  serverCommand,
  serverSettingSpecs,
  toServerSettings,
} from '../src/settings';
import { initialStatus, statusText } from '../src/status';

const packageJson = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'package.json'), 'utf8'));
const properties: Record<string, any> = packageJson.contributes.configuration.properties;
const specs = serverSettingSpecs(packageJson);

/** A configuration as VS Code presents it: the user's values over the manifest defaults. */
function configWith(user: Record<string, unknown>): ConfigurationLike {
  return {
    get<T>(key: string): T | undefined {
      if (key in user) {
        return user[key] as T;
      }
      return properties['specfill.' + key]?.default as T | undefined;
    },
  };
}

test('every server setting comes from the manifest, extension keys do not', () => {
  assert.ok(specs.size >= 15, `only ${specs.size} server settings`);
  for (const name of ['targetModel', 'draftModel', 'draftLength', 'maxNewTokens', 'temperature', 'enable', 'trustRemoteCode']) {
    assert.ok(specs.has(name), name);
  }
  for (const key of EXTENSION_KEYS) {
    assert.ok(!specs.has(key), key);
    assert.ok(properties['specfill.' + key], `manifest declares specfill.${key}`);
  }
});

test('defaults give the server its own defaults, typed', () => {
  const sent = toServerSettings(configWith({}), specs);
  assert.deepEqual(Object.keys(sent).sort(), [...new Set([...specs.keys()].map((k) => k.split('.')[0]))].sort());
  assert.equal(sent.draftLength, 'auto');
  assert.equal(sent.targetModel, 'default');
  assert.equal(sent.trustRemoteCode, false);
  assert.equal(typeof sent.maxNewTokens, 'number');
  assert.ok(!('server.command' in sent) && !('server' in sent) && !('trace' in sent));
});

test('draftLength is text checked by the manifest pattern: auto or 1-16', () => {
  const spec = properties['specfill.draftLength'];
  assert.equal(spec.type, 'string');
  assert.ok(!('enum' in spec), 'no list of every number');
  const pattern = new RegExp(spec.pattern);
  for (const ok of ['auto', '1', '9', '10', '16']) {
    assert.ok(pattern.test(ok), ok);
  }
  for (const bad of ['0', '17', '04', '-1', '4.0', 'fast', '', ' 4']) {
    assert.ok(!pattern.test(bad), bad);
  }
  assert.match(spec.patternErrorMessage, /auto or an integer 1-16/);
  // sent as typed: the server reads the number from the text
  assert.equal(toServerSettings(configWith({ draftLength: '6' }), specs).draftLength, '6');
  assert.equal(toServerSettings(configWith({ draftLength: 'auto' }), specs).draftLength, 'auto');
});

test('the remote connection is one object for the server, one setting each in VS Code', () => {
  for (const key of ['backend', 'apiKey', 'apiKeyEnv', 'verifyTls', 'caBundle', 'connectTimeoutMs', 'readTimeoutMs']) {
    assert.ok(specs.has('remote.' + key), key);
  }
  const sent = toServerSettings(configWith({ 'remote.apiKeyEnv': 'TEAM_KEY', 'remote.readTimeoutMs': 500 }), specs);
  assert.deepEqual(sent.remote, {
    backend: 'auto', apiKey: '', apiKeyEnv: 'TEAM_KEY', verifyTls: true, caBundle: '',
    connectTimeoutMs: 3000, readTimeoutMs: 500,
  });
  assert.ok(!Object.keys(sent).some((k) => k.includes('.')), 'no dotted key on the wire');
});

test('the manifest is small and holds no server option', () => {
  const size = fs.statSync(path.join(__dirname, '..', '..', 'package.json')).size;
  assert.ok(size < 100_000, `package.json is ${size} bytes`);
  for (const option of ['kvReuse', 'debounceMs', 'maxDocumentChars', 'cudaGraphs', 'fimLayout', 'datastore']) {
    assert.ok(!properties['specfill.' + option], option);
  }
});

test('user values pass through unchanged, invalid ones too (the server reports them)', () => {
  const sent = toServerSettings(configWith({ targetModel: '/models/x', maxNewTokens: 9999, multiline: 'never', temperature: 0.2 }), specs);
  assert.equal(sent.targetModel, '/models/x');
  assert.equal(sent.maxNewTokens, 9999);
  assert.equal(sent.multiline, 'never');
  assert.equal(sent.temperature, 0.2);
  // Numeric strings are only converted where the manifest offers them as a drop-down.
  assert.equal(toServerSettings(configWith({ targetModel: '42' }), specs).targetModel, '42');
});

test('server command: default, custom, bad values', () => {
  assert.deepEqual(serverCommand(configWith({})), { command: 'specfill', args: ['serve'] });
  assert.deepEqual(serverCommand(configWith({ 'server.command': '/venv/bin/python', 'server.args': ['-m', 'lsp'] })), {
    command: '/venv/bin/python',
    args: ['-m', 'lsp'],
  });
  assert.deepEqual(serverCommand(configWith({ 'server.command': '   ', 'server.args': 'serve' })), {
    command: 'specfill',
    args: ['serve'],
  });
});

test('a setting change is pushed live; a server command change restarts', () => {
  const affects = (changed: string[]) => (section: string) =>
    changed.some((c) => c === section || c.startsWith(section + '.') || section.startsWith(c + '.'));
  assert.deepEqual(classifyChange(affects(['specfill.draftLength']), specs), { notifyServer: true, restart: false });
  assert.deepEqual(classifyChange(affects(['specfill.server.command']), specs), { notifyServer: false, restart: true });
  assert.deepEqual(classifyChange(affects(['editor.fontSize']), specs), { notifyServer: false, restart: false });
  assert.deepEqual(classifyChange(affects(['specfill.trace.server']), specs), { notifyServer: false, restart: false });
});

test('trustRemoteCode and the server command cannot be set by a workspace', () => {
  for (const key of ['specfill.trustRemoteCode', 'specfill.server.command', 'specfill.server.args']) {
    assert.equal(properties[key].scope, 'machine', key);
  }
});

test('status bar text follows loading, ready, latency and acceptance', () => {
  const s = initialStatus();
  assert.match(statusText(s).text, /loading~spin\) specfill$/);
  assert.equal(statusText({ ...s, phase: 'loading', percentage: 42.4 }).text, '$(loading~spin) specfill 42%');
  assert.equal(statusText({ ...s, phase: 'ready' }).text, '$(check) specfill');
  const ready = statusText({ ...s, phase: 'ready', lastLatencyMs: 37.2, shown: 4, accepted: 1 });
  assert.equal(ready.text, '$(check) specfill 37 ms · 25% accepted');
  assert.match(ready.tooltip, /accepted 1 of 4/);
  assert.match(statusText({ ...s, phase: 'error', message: 'could not start "x"' }).tooltip, /could not start/);
  assert.equal(statusText(s).command, 'specfill.showStats');
});

test('a server that exits says so with its code, and a click shows the log', () => {
  const s = { ...initialStatus(), phase: 'error' as const, message: 'server exited (code 2)' };
  assert.equal(statusText(s).text, '$(error) specfill error: server exited (code 2)');
  assert.match(statusText(s).tooltip, /see the log/);
  assert.equal(statusText(s).command, 'specfill.showLog');
  assert.equal(statusText({ ...s, phase: 'stopped' }).command, 'specfill.showLog');
});
