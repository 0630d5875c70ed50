// specfill for VS Code: starts `specfill serve` with vscode-languageclient (whose built-in
// inline completion feature draws the ghost text), keeps the server's settings in sync,
// and shows loading progress, latency and acceptance in the status bar.
import * as vscode from 'vscode';
import {
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  StaticFeature,
  TransportKind,
  WorkDoneProgress,
  WorkDoneProgressCreateRequest,
  DidChangeConfigurationNotification,
  State,
} from 'vscode-languageclient/node';
import {
  PropertySpec,
  classifyChange,
  serverCommand,
  serverSettingSpecs,
  toServerSettings,
} from './settings';
import { SERVER_COMMANDS } from './serverCommands';
import { StatusState, initialStatus, statusText } from './status';

const ACCEPTED = 'specfill.internal.accepted';

let client: LanguageClient | undefined;
let specs: Map<string, PropertySpec>;
let status: StatusState = initialStatus();
let statusItem: vscode.StatusBarItem;
let output: vscode.LogOutputChannel;

function config(): vscode.WorkspaceConfiguration {
  return vscode.workspace.getConfiguration('specfill');
}

function serverSettings(scope?: vscode.Uri): Record<string, unknown> {
  return toServerSettings(vscode.workspace.getConfiguration('specfill', scope), specs);
}

function render(): void {
  const { text, tooltip } = statusText(status);
  statusItem.text = text;
  statusItem.tooltip = tooltip;
}

function setStatus(changes: Partial<StatusState>): void {
  status = { ...status, ...changes };
  render();
}

/** Follows the server's work-done progress (model loading) in the status bar. Registered
 *  after the client's own progress feature, so its create handler is the one in use. */
function progressFeature(c: LanguageClient): StaticFeature {
  return {
    fillClientCapabilities(capabilities) {
      capabilities.window = { ...(capabilities.window ?? {}), workDoneProgress: true };
    },
    initialize() {
      c.onRequest(WorkDoneProgressCreateRequest.type, ({ token }) => {
        const sub = c.onProgress(WorkDoneProgress.type, token, (value) => {
          if (value.kind === 'end') {
            sub.dispose();
            setStatus({ phase: 'ready', percentage: undefined, message: value.message });
          } else {
            setStatus({
              phase: 'loading',
              percentage: value.percentage ?? status.percentage,
              message: value.message ?? (value.kind === 'begin' ? value.title : status.message),
            });
          }
        });
      });
    },
    getState() {
      return { kind: 'static' };
    },
    clear() {},
  };
}

function createClient(): LanguageClient {
  const { command, args } = serverCommand(config());
  const serverOptions: ServerOptions = { command, args, transport: TransportKind.stdio };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ scheme: 'file' }, { scheme: 'untitled' }],
    outputChannel: output,
    initializationOptions: serverSettings(),
    middleware: {
      workspace: {
        // The server pulls the `specfill` section: answer with server settings only, typed
        // as it expects (not the extension's own keys).
        configuration: async (params, token, next) => {
          const answers = await next(params, token);
          if (!Array.isArray(answers)) {
            return answers;
          }
          return params.items.map((item, i) =>
            item.section === 'specfill'
              ? serverSettings(item.scopeUri ? vscode.Uri.parse(item.scopeUri) : undefined)
              : answers[i],
          );
        },
      },
      provideInlineCompletionItems: async (document, position, context, token, next) => {
        const started = Date.now();
        const result = await next(document, position, context, token);
        if (token.isCancellationRequested) {
          return result;
        }
        const items = Array.isArray(result) ? result : result?.items ?? [];
        const shown = items.filter((item) => String(typeof item.insertText === 'string' ? item.insertText : item.insertText.value).trim() !== '');
        for (const item of shown) {
          item.command = item.command ?? { title: 'specfill: accepted', command: ACCEPTED };
        }
        setStatus({
          phase: status.phase === 'loading' ? 'loading' : config().get('enable') === false ? 'disabled' : 'ready',
          lastLatencyMs: Date.now() - started,
          shown: status.shown + (shown.length > 0 ? 1 : 0),
        });
        return result;
      },
    },
  };
  const c = new LanguageClient('specfill', 'specfill', serverOptions, clientOptions);
  c.registerFeature(progressFeature(c));
  c.onDidChangeState((e) => {
    if (c !== client) {
      return; // a client being replaced by a restart
    }
    if (e.newState === State.Stopped) {
      setStatus({ phase: 'stopped' });
    } else if (e.newState === State.Starting) {
      setStatus({ phase: 'starting' });
    }
  });
  return c;
}

async function startClient(): Promise<void> {
  client = createClient();
  setStatus({ phase: 'starting', percentage: undefined, message: undefined });
  try {
    await client.start();
    if (status.phase === 'starting' && config().get('enable') === false) {
      setStatus({ phase: 'disabled' });
    }
  } catch (err) {
    const { command } = serverCommand(config());
    setStatus({
      phase: 'error',
      message: `could not start "${command}" (${String(err)}); set specfill.server.command`,
    });
  }
}

async function stopClient(): Promise<void> {
  const c = client;
  client = undefined;
  if (c) {
    try {
      await c.stop(5000);
    } catch {
      // already stopped or never started
    }
    await c.dispose();
  }
}

async function restartServer(): Promise<void> {
  await stopClient();
  status = initialStatus();
  await startClient();
}

async function executeServerCommand(command: string): Promise<unknown> {
  if (!client || !client.isRunning()) {
    throw new Error('the specfill server is not running');
  }
  return client.sendRequest(ExecuteCommandRequest.type, { command, arguments: [] });
}

async function showStats(): Promise<void> {
  try {
    const stats = await executeServerCommand(SERVER_COMMANDS.stats);
    const content = JSON.stringify(
      { server: stats, client: { lastLatencyMs: status.lastLatencyMs, shown: status.shown, accepted: status.accepted } },
      null,
      2,
    );
    const doc = await vscode.workspace.openTextDocument({ language: 'json', content });
    await vscode.window.showTextDocument(doc, { preview: true, preserveFocus: true });
  } catch (err) {
    void vscode.window.showErrorMessage(`specfill: ${err instanceof Error ? err.message : String(err)}`);
  }
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  specs = serverSettingSpecs(context.extension.packageJSON);
  output = vscode.window.createOutputChannel('specfill', { log: true });
  statusItem = vscode.window.createStatusBarItem('specfill.status', vscode.StatusBarAlignment.Right, 100);
  statusItem.name = 'specfill';
  statusItem.command = 'specfill.showStats';
  render();
  statusItem.show();

  context.subscriptions.push(
    output,
    statusItem,
    vscode.commands.registerCommand('specfill.showStats', showStats),
    vscode.commands.registerCommand('specfill.restartServer', restartServer),
    vscode.commands.registerCommand('specfill.reloadModels', async () => {
      try {
        await executeServerCommand(SERVER_COMMANDS.reload);
      } catch (err) {
        void vscode.window.showErrorMessage(`specfill: ${err instanceof Error ? err.message : String(err)}`);
      }
    }),
    vscode.commands.registerCommand(ACCEPTED, () => setStatus({ accepted: status.accepted + 1 })),
    vscode.workspace.onDidChangeConfiguration(async (e) => {
      const change = classifyChange((section) => e.affectsConfiguration(section), specs);
      output.info(`configuration changed: ${JSON.stringify(change)}`);
      if (change.restart) {
        await restartServer();
      } else if (change.notifyServer && client?.isRunning()) {
        // Live: the server applies it to the next request (and reloads models if they changed).
        await client.sendNotification(DidChangeConfigurationNotification.type, {
          settings: { specfill: serverSettings() },
        });
        if (config().get('enable') === false) {
          setStatus({ phase: 'disabled' });
        } else if (status.phase === 'disabled') {
          setStatus({ phase: 'ready' });
        }
      }
    }),
    { dispose: () => void stopClient() },
  );
  // Not awaited: activation finishes at once while the server starts (and loads its models).
  void startClient();
}

export async function deactivate(): Promise<void> {
  await stopClient();
}
