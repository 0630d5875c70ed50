// specfill for VS Code: starts `specfill serve` with vscode-languageclient (whose built-in
// inline completion feature draws the ghost text), keeps the server's settings in sync,
// and shows loading progress, latency and acceptance in the status bar. Where an inline
// completion comes back empty and the server's `nextEdit` setting is on, it asks for the next
// edit and draws it (nextEditView.ts).
import { ChildProcess, spawn } from 'node:child_process';
import * as readline from 'node:readline';
import * as vscode from 'vscode';
import {
  CloseAction,
  CloseHandlerResult,
  ErrorAction,
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  StaticFeature,
  WorkDoneProgress,
  WorkDoneProgressCreateRequest,
  DidChangeConfigurationNotification,
  InlineCompletionItem,
  InlineCompletionList,
  State,
} from 'vscode-languageclient/node';
import {
  PropertySpec,
  classifyChange,
  serverCommand,
  serverSettingSpecs,
  toServerSettings,
} from './settings';
import { SERVER_COMMANDS, SERVER_METHODS } from './serverCommands';
import {
  DOCUMENT_STATUS_NOTIFICATION,
  Refused,
  SHOW_LOG,
  SHOW_STATS,
  STATUS_NOTIFICATION,
  StatusState,
  initialStatus,
  phaseAfterAnswer,
  refusedFromStatus,
  statusText,
  targetFromStatus,
} from './status';
import { Exit, RestartPolicy, describeExit, exitNotice } from './restart';
import { SETTLE_MS, ShownCounter, suggestionIdentity } from './shown';
import { LogLevel, StderrLevels } from './serverLog';
import { ACCEPTED, acceptCommand, onAccepted } from './accept';
import { Trigger, toggleText, toggleUpdate, whatToAsk } from './control';
import { UserReports, suggestionId, withId } from './reports';
import { alternativesParams } from './selected';
import { Visits, placeOf } from './visits';
import { AskedVersions, WireNextEdit, nextEditWanted, parseNextEdit } from './nextEdit';
import { DISMISS_COMMAND, NextEdits, TAB_COMMAND } from './nextEditView';

let client: LanguageClient | undefined;
let specs: Map<string, PropertySpec>;
let status: StatusState = initialStatus();
let statusItem: vscode.StatusBarItem;
let output: vscode.LogOutputChannel;
let shownCounter = new ShownCounter();
let toggleItem: vscode.StatusBarItem;
// Reports go to the running server; none is queued for a server that is not running.
const reports = new UserReports((method, params) => {
  if (client?.isRunning()) {
    client.sendNotification(method, params).catch(() => {});
  }
});
// Where the user was (extra context for the server), sent like the reports.
const visits = new Visits((method, params) => {
  if (client?.isRunning()) {
    client.sendNotification(method, params).catch(() => {});
  }
});
const ALTERNATIVES = SERVER_METHODS.alternatives;
const NEXT_EDIT = SERVER_METHODS.nextEdit;
// The next edit shown (decorations), set up in activate(), and the versions asked about.
let nextEdits: NextEdits;
const nextEditAsked = new AskedVersions();
const TOGGLE = 'specfill.toggle';
const RESTART = 'specfill.restartServer';
// Starting the server again after it exits unexpectedly (restart.ts), and the start pending.
const restarts = new RestartPolicy();
let restartTimer: NodeJS.Timeout | undefined;
// Documents the server gives no answers, and why (its specfill/documentStatus), by URI.
const refusedDocuments = new Map<string, Refused>();

/** What the server process of a client did: the process, its exit once it has ended, and
 *  whether the client got it running. */
interface ServerProcess {
  current?: ChildProcess;
  exit?: Promise<Exit>;
  running?: boolean;
}

function config(): vscode.WorkspaceConfiguration {
  return vscode.workspace.getConfiguration('specfill');
}

function serverSettings(scope?: vscode.Uri): Record<string, unknown> {
  // `enable` is decided here for each document (it can differ per language, the server's
  // value is global), so the server is always told true.
  return { ...toServerSettings(vscode.workspace.getConfiguration('specfill', scope), specs), enable: true };
}

/** specfill.enable for a document, with its language's override; the active editor's when
 *  none is given. */
function enabledFor(document?: vscode.TextDocument): boolean {
  const doc = document ?? vscode.window.activeTextEditor?.document;
  return vscode.workspace.getConfiguration('specfill', doc).get('enable') !== false;
}

/** The URI a document has on the wire (as the server names it back). */
function wireUri(document: vscode.TextDocument): string {
  return client ? client.code2ProtocolConverter.asUri(document.uri) : document.uri.toString();
}

/** The status bar toggle and the main item's disabled state follow the active editor, and so
 *  does why the server gives it no answers. */
function renderToggle(): void {
  const doc = vscode.window.activeTextEditor?.document;
  const enabled = enabledFor(doc);
  const { text, tooltip } = toggleText(enabled, doc?.languageId);
  toggleItem.text = text;
  toggleItem.tooltip = tooltip;
  toggleItem.accessibilityInformation = { label: tooltip };
  const why = { refused: doc ? refusedDocuments.get(wireUri(doc)) : undefined, disabledFor: enabled ? undefined : doc?.languageId };
  if (!enabled && (status.phase === 'ready' || status.phase === 'starting')) {
    setStatus({ phase: 'disabled', ...why });
  } else if (enabled && status.phase === 'disabled') {
    setStatus({ phase: client?.isRunning() ? 'ready' : 'starting', ...why });
  } else {
    setStatus(why);
  }
}

/** Why the active document gets no suggestions, for "specfill: Show Stats" (undefined: it does). */
function whyNothingHere(): string | undefined {
  const doc = vscode.window.activeTextEditor?.document;
  if (!doc) {
    return undefined;
  }
  if (!enabledFor(doc)) {
    return `specfill.enable is off for ${doc.languageId}`;
  }
  return refusedDocuments.get(wireUri(doc))?.reason;
}

/** specfill.toggle: flips specfill.enable where it is set for the active editor (its
 *  language's override first), else in the user settings. */
async function toggle(): Promise<void> {
  const doc = vscode.window.activeTextEditor?.document;
  const scoped = vscode.workspace.getConfiguration('specfill', doc);
  const update = toggleUpdate(scoped.inspect<boolean>('enable'), enabledFor(doc));
  const target = {
    global: vscode.ConfigurationTarget.Global,
    workspace: vscode.ConfigurationTarget.Workspace,
    workspaceFolder: vscode.ConfigurationTarget.WorkspaceFolder,
  }[update.level];
  await scoped.update('enable', update.value, target, update.language);
}

function render(): void {
  const { text, tooltip, command } = statusText(status);
  statusItem.text = text;
  statusItem.tooltip = tooltip;
  statusItem.command = command;
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
            setStatus({ phase: enabledFor() ? 'ready' : 'disabled', percentage: undefined, message: value.message });
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

/** Writes each stderr line to the output channel at its own level (vscode-languageclient's
 *  default labels every stderr line [error]). */
function pipeStderr(input: NodeJS.ReadableStream, channel: vscode.OutputChannel): void {
  const levels = new StderrLevels();
  const log = channel as vscode.LogOutputChannel;
  readline
    .createInterface({ input, crlfDelay: Infinity, terminal: false, historySize: 0 })
    .on('line', (line: string) => {
      const level: LogLevel = levels.level(line);
      log[level](line);
    });
}

/** Starts the server process ourselves (not through vscode-languageclient's Executable), so its
 *  exit code reaches the status bar. Resolves once the process has spawned. */
function startServer(c: () => LanguageClient | undefined, processes: ServerProcess): ServerOptions {
  return () =>
    new Promise<ChildProcess>((resolve, reject) => {
      const { command, args } = serverCommand(config());
      output.info(`starting the server: ${[command, ...args].join(' ')}`);
      const proc = spawn(command, args, { stdio: ['pipe', 'pipe', 'pipe'] });
      processes.current = proc;
      processes.exit = new Promise((done) => proc.once('exit', (code, signal) => done({ code, signal })));
      proc.once('error', (err) => {
        output.error(`could not start "${command}": ${err.message}; set specfill.server.command`);
        reject(new Error(`could not start "${command}" (${(err as NodeJS.ErrnoException).code ?? err.message})`));
      });
      proc.once('spawn', () => resolve(proc));
      proc.once('exit', (code, signal) => {
        const how = code !== null ? `code ${code}` : `signal ${signal}`;
        const normal = code === 0 || (c() === undefined && signal !== null);
        output[normal ? 'info' : 'error'](`server exited (${how})`);
        // (One that got running: what happens next is afterUnexpectedExit's.)
        if (!normal && c() !== undefined && processes.current === proc && !processes.running) {
          setStatus({ phase: 'error', message: `server exited (${how})` });
        }
      });
    });
}

/** What an item inserts from the cursor on (its range may start earlier on the line, its
 *  text then repeats what is there). */
function textFromCursor(item: vscode.InlineCompletionItem, text: string, position: vscode.Position): string {
  const start = item.range?.start;
  if (start && start.line === position.line && start.character < position.character) {
    return text.slice(position.character - start.character);
  }
  return text;
}

/** specfill/alternatives at the position (continuing the suggest widget's selected item, if
 *  any), as VS Code items. A cancelled request (the user typed on) answers nothing; a failed
 *  one answers nothing and says why in the log. */
async function askAlternatives(
  c: LanguageClient,
  document: vscode.TextDocument,
  position: vscode.Position,
  context: vscode.InlineCompletionContext,
  token: vscode.CancellationToken,
): Promise<vscode.InlineCompletionList | vscode.InlineCompletionItem[] | undefined> {
  const selected = context.selectedCompletionInfo;
  const params = alternativesParams(
    c.code2ProtocolConverter.asUri(document.uri),
    c.code2ProtocolConverter.asPosition(position),
    selected ? { range: c.code2ProtocolConverter.asRange(selected.range), text: selected.text } : undefined,
  );
  try {
    const list = await c.sendRequest<InlineCompletionList | InlineCompletionItem[] | null>(ALTERNATIVES, params, token);
    return await c.protocol2CodeConverter.asInlineCompletionResult(list, token);
  } catch (err) {
    if (!token.isCancellationRequested) {
      output.warn(`${ALTERNATIVES} failed: ${err instanceof Error ? err.message : String(err)}`);
    }
    return undefined;
  }
}

/** specfill/nextEdit at the position: the edit the server suggests for the document as sent
 *  last, or undefined (nothing to suggest, cancelled, failed: a failure says why in the log). */
async function askNextEdit(
  c: LanguageClient,
  document: vscode.TextDocument,
  position: vscode.Position,
  token: vscode.CancellationToken,
): Promise<WireNextEdit | undefined> {
  const uri = c.code2ProtocolConverter.asUri(document.uri);
  const params = { textDocument: { uri }, position: c.code2ProtocolConverter.asPosition(position) };
  try {
    return parseNextEdit(await c.sendRequest<unknown>(NEXT_EDIT, params, token), uri);
  } catch (err) {
    if (!token.isCancellationRequested) {
      output.warn(`${NEXT_EDIT} failed: ${err instanceof Error ? err.message : String(err)}`);
    }
    return undefined;
  }
}

/** The server of client `c` exited while it ran (killed, crashed): one notice, and a new
 *  server after the back-off (restart.ts), or none after too many exits in a row. */
async function afterUnexpectedExit(c: LanguageClient, processes: ServerProcess): Promise<CloseHandlerResult> {
  const exit = await Promise.race([processes.exit, new Promise<undefined>((done) => setTimeout(() => done(undefined), 2000))]);
  const decision = restarts.exited(Date.now());
  const notice = exitNotice(exit, decision);
  if (c === client) {
    if (decision.restart) {
      setStatus({ phase: 'restarting', message: notice, refused: undefined });
      void vscode.window.showWarningMessage(notice);
      restartTimer = setTimeout(() => {
        restartTimer = undefined;
        if (client === c) {
          void startAgain();
        }
      }, decision.delayMs);
    } else {
      setStatus({ phase: 'error', message: `server exited (${describeExit(exit)}), not restarted` });
      void vscode.window.showErrorMessage(notice, 'Restart Server').then((pick) => {
        if (pick) {
          void vscode.commands.executeCommand(RESTART);
        }
      });
    }
  }
  // Handled: vscode-languageclient adds no pop-up of its own (the message goes to the log).
  return { action: CloseAction.DoNotRestart, handled: true, message: notice };
}

function createClient(): LanguageClient {
  const processes: ServerProcess = {};
  let wasRunning = false;
  const clientOptions: LanguageClientOptions = {
    // A server that never got running is not restarted 5 times with a pop-up each: the status
    // bar says it exited and a click shows the log. One that exits later is started again.
    initializationFailedHandler: (err) => {
      output.error(`server initialization failed: ${err instanceof Error ? err.message : String(err)}`);
      return false;
    },
    errorHandler: {
      // Writes to a server that is gone fail: the close that follows decides what happens.
      error: () => ({ action: ErrorAction.Continue, handled: true }),
      closed: () => (wasRunning ? afterUnexpectedExit(c, processes) : { action: CloseAction.DoNotRestart, handled: true }),
    },
    documentSelector: [{ scheme: 'file' }, { scheme: 'untitled' }],
    outputChannel: output,
    stdioOptions: { stdout: () => {}, stderr: pipeStderr },
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
      // The server's textDocument/completion answer is for editors without inline completion:
      // in VS Code it would repeat the ghost text as an IntelliSense item, hide the word-based
      // items, and (asked on every keystroke with quick suggestions on) supersede the inline
      // request for the same document.
      provideCompletionItem: () => undefined,
      provideInlineCompletionItems: async (document, position, context, token, next) => {
        const scoped = vscode.workspace.getConfiguration('specfill', document);
        const ask = whatToAsk(
          scoped.get('enable') !== false,
          scoped.get<Trigger>('trigger'),
          context.triggerKind === vscode.InlineCompletionTriggerKind.Invoke,
          Number(scoped.get('candidates') ?? 1),
        );
        if (ask === 'none') {
          return undefined;
        }
        const key = document.uri.toString();
        const ticket = shownCounter.request(key);
        const version = document.version;
        const started = Date.now();
        const result =
          ask === 'alternatives' ? await askAlternatives(c, document, position, context, token) : await next(document, position, context, token);
        if (token.isCancellationRequested) {
          return result;
        }
        const items = Array.isArray(result) ? result : result?.items ?? [];
        if (ask === 'alternatives') {
          // Explicit triggers are rare: each is worth a line in the log.
          output.info(`asked for alternatives (specfill/alternatives): ${items.length} different`);
        }
        const texts = items.map((item) => (typeof item.insertText === 'string' ? item.insertText : item.insertText.value));
        const offered = items.filter((_, i) => texts[i].trim() !== '');
        if (offered.length > 0) {
          nextEdits.yieldTo(); // an inline completion at the cursor takes precedence
        }
        const firstId = offered.length > 0 ? suggestionId(offered[0].command) : undefined;
        for (const item of offered) {
          item.command = acceptCommand(item.command);
        }
        if (c === client) {
          setStatus({ phase: phaseAfterAnswer(status.phase, enabledFor()), lastLatencyMs: Date.now() - started });
        }
        // VS Code shows the first item; it counts as shown once it has stayed current.
        const before = document.lineAt(position.line).text.slice(0, position.character);
        const first = offered.length > 0 ? items.indexOf(offered[0]) : -1;
        const identity = first >= 0 ? suggestionIdentity(position.line, before, texts[first]) : undefined;
        setTimeout(() => {
          if (token.isCancellationRequested || document.version !== version) {
            return;
          }
          if (identity !== undefined && shownCounter.settle(key, ticket, identity)) {
            setStatus({ shown: shownCounter.shown });
            if (firstId !== undefined) {
              reports.shown(key, firstId, identity, textFromCursor(items[first], texts[first], position), position.line, position.character);
            }
          } else if (shownCounter.isCurrent(key, ticket)) {
            reports.answered(key, firstId, identity);
          }
        }, SETTLE_MS);
        if (
          offered.length === 0 &&
          nextEditWanted(scoped.get('nextEdit')) &&
          document.version === version &&
          nextEditAsked.shouldAsk(key, version, context.triggerKind === vscode.InlineCompletionTriggerKind.Invoke)
        ) {
          // Nothing to insert here, after a change (or asked): where does the next edit go?
          // Awaited, so that VS Code's token (cancelled by the next keystroke) cancels it too.
          await nextEdits.ask(document, token, (t) => askNextEdit(c, document, position, t));
        }
        return result;
      },
    },
  };
  const current = (): LanguageClient | undefined => (client === c ? c : undefined);
  const c: LanguageClient = new LanguageClient('specfill', 'specfill', startServer(current, processes), clientOptions);
  serverProcesses.set(c, processes);
  c.registerFeature(progressFeature(c));
  c.onNotification(STATUS_NOTIFICATION, (params: unknown) => {
    if (c === client) {
      setStatus({ target: targetFromStatus(params) }); // a remote target failing, or fine again
    }
  });
  c.onNotification(DOCUMENT_STATUS_NOTIFICATION, (params: unknown) => {
    const found = refusedFromStatus(params); // a document without answers (too large), or back
    if (c !== client || !found) {
      return;
    }
    if (found.refused) {
      refusedDocuments.set(found.uri, found.refused);
      output.warn(`no suggestions for ${found.uri}: ${found.refused.reason}`);
    } else {
      refusedDocuments.delete(found.uri);
    }
    renderToggle();
  });
  c.onDidChangeState((e) => {
    if (c !== client) {
      return; // a client being replaced by a restart
    }
    if (e.newState === State.Running) {
      wasRunning = true;
      processes.running = true;
      restarts.started(Date.now());
    }
    if (e.newState === State.Stopped) {
      // An exit with an error code, or a start again on its way, is in the status bar already.
      if (status.phase !== 'error' && status.phase !== 'restarting') {
        setStatus({ phase: 'stopped' });
      }
    } else if (e.newState === State.Starting) {
      setStatus({ phase: 'starting' });
    }
  });
  return c;
}

async function startClient(): Promise<void> {
  client = createClient();
  setStatus({ phase: 'starting', percentage: undefined, message: undefined, target: undefined });
  try {
    await client.start();
    if (status.phase === 'starting' && !enabledFor()) {
      setStatus({ phase: 'disabled' });
    }
  } catch (err) {
    output.error(`the server did not start: ${err instanceof Error ? err.message : String(err)}`);
    if (status.phase !== 'error') {
      setStatus({ phase: 'error', message: err instanceof Error ? err.message : String(err) });
    }
  }
}

const serverProcesses = new WeakMap<LanguageClient, ServerProcess>();

async function stopClient(): Promise<void> {
  const c = client;
  reports.dismissAll();
  nextEdits.dismiss();
  client = undefined;
  if (c) {
    try {
      await c.stop(5000);
    } catch {
      // already stopped or never started
    }
    await c.dispose();
    // The server exits on LSP `exit`; one that does not is ended here.
    const proc = serverProcesses.get(c)?.current;
    if (proc && proc.exitCode === null && proc.signalCode === null) {
      proc.kill();
    }
  }
}

/** A new server for the documents open now, with the settings in force now. */
async function startAgain(): Promise<void> {
  await stopClient();
  status = initialStatus();
  shownCounter = new ShownCounter();
  refusedDocuments.clear();
  await startClient();
  renderToggle();
}

/** "specfill: Restart Server": start again now, and count unexpected exits from zero. */
async function restartServer(): Promise<void> {
  if (restartTimer !== undefined) {
    clearTimeout(restartTimer);
    restartTimer = undefined;
  }
  restarts.reset();
  await startAgain();
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
    // The latest model run's figures: also those of an answer that showed nothing.
    const lastCompletion = await executeServerCommand(SERVER_COMMANDS.lastCompletion);
    const activeDocument = vscode.window.activeTextEditor?.document;
    const why = whyNothingHere();
    const content = JSON.stringify(
      {
        server: stats,
        lastCompletion,
        client: {
          lastLatencyMs: status.lastLatencyMs,
          shown: status.shown,
          accepted: status.accepted,
          activeDocument: activeDocument && {
            uri: wireUri(activeDocument),
            languageId: activeDocument.languageId,
            suggestions: why ? `off: ${why}` : 'on',
          },
        },
      },
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
  render();
  statusItem.show();
  toggleItem = vscode.window.createStatusBarItem('specfill.toggle', vscode.StatusBarAlignment.Right, 99);
  toggleItem.name = 'specfill toggle';
  toggleItem.command = TOGGLE;
  renderToggle();
  toggleItem.show();
  nextEdits = new NextEdits(output);

  context.subscriptions.push(
    output,
    statusItem,
    vscode.commands.registerCommand(SHOW_STATS, showStats),
    vscode.commands.registerCommand(SHOW_LOG, () => output.show(true)),
    vscode.commands.registerCommand(RESTART, restartServer),
    vscode.commands.registerCommand('specfill.reloadModels', async () => {
      try {
        await executeServerCommand(SERVER_COMMANDS.reload);
      } catch (err) {
        void vscode.window.showErrorMessage(`specfill: ${err instanceof Error ? err.message : String(err)}`);
      }
    }),
    toggleItem,
    vscode.commands.registerCommand(TOGGLE, toggle),
    vscode.commands.registerCommand(ACCEPTED, (serverCommand?: vscode.Command) => {
      // Reported under the id the suggestion was first shown with (typing through renews it).
      const id = suggestionId(serverCommand);
      const command = id !== undefined && serverCommand ? withId(serverCommand, reports.accepted(id)) : serverCommand;
      return onAccepted(() => setStatus({ accepted: status.accepted + 1 }), vscode.commands.executeCommand, command);
    }),
    vscode.workspace.onDidCloseTextDocument((doc) => {
      shownCounter.forget(doc.uri.toString());
      nextEditAsked.forget(doc.uri.toString());
      reports.closed(doc.uri.toString());
    }),
    nextEdits,
    vscode.commands.registerCommand(TAB_COMMAND, () => nextEdits.tab()),
    vscode.commands.registerCommand(DISMISS_COMMAND, () => nextEdits.dismiss()),
    vscode.window.onDidChangeActiveTextEditor((editor) => nextEdits.switched(editor)),
    vscode.workspace.onDidChangeTextDocument((e) => {
      if (e.contentChanges.length > 0) {
        nextEdits.changed(e.document);
      }
      for (const change of e.contentChanges) {
        reports.edited(e.document.uri.toString(), {
          startLine: change.range.start.line,
          startCharacter: change.range.start.character,
          rangeLength: change.rangeLength,
          text: change.text,
        });
      }
    }),
    vscode.window.onDidChangeActiveTextEditor(() => renderToggle()),
    vscode.window.onDidChangeActiveTextEditor((editor) => visits.switched(placeOf(editor))),
    vscode.window.onDidChangeTextEditorSelection((e) => visits.moved(placeOf(e.textEditor))),
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
      }
      if (e.affectsConfiguration('specfill.enable')) {
        renderToggle();
      }
    }),
    { dispose: () => void stopClient() },
    { dispose: () => restartTimer !== undefined && clearTimeout(restartTimer) },
  );
  // Not awaited: activation finishes at once while the server starts (and loads its models).
  void startClient();
}

export async function deactivate(): Promise<void> {
  await stopClient();
}
