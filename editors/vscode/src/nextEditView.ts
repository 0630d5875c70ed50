// Next-edit suggestions in the editor. VS Code 1.139 shows an inline-completion item only as
// ghost text at the cursor (an item that deletes text, or edits another line, is dropped), and
// its inline-edit presentation (`isInlineEdit`) is a proposed API a packaged extension cannot
// enable. So the edit is drawn with decorations: the text it deletes struck through, the text
// it writes beside it, line by line (`insertedLines`). Tab (the keybinding
// `specfill.nextEdit.tab`, while the context key `specfill.nextEditShown` is set and no inline
// suggestion or suggest widget is visible) jumps to the edit, then applies it; Escape dismisses
// it; any change of the document drops it.
import * as vscode from 'vscode';
import { WireNextEdit, insertedLines, tabAction } from './nextEdit';

export const TAB_COMMAND = 'specfill.nextEdit.tab';
export const DISMISS_COMMAND = 'specfill.nextEdit.dismiss';
export const SHOWN_CONTEXT = 'specfill.nextEditShown';

interface Shown {
  editor: vscode.TextEditor;
  version: number;
  edit: WireNextEdit;
  range: vscode.Range;
}

export class NextEdits implements vscode.Disposable {
  private readonly deleted = vscode.window.createTextEditorDecorationType({
    textDecoration: 'line-through',
    color: new vscode.ThemeColor('editorError.foreground'),
    backgroundColor: new vscode.ThemeColor('diffEditor.removedTextBackground'),
  });
  private readonly inserted = vscode.window.createTextEditorDecorationType({});
  private shown: Shown | undefined;
  /** The request in flight, cancelled by the next one and by any change of its document. */
  private asking: { document: vscode.TextDocument; source: vscode.CancellationTokenSource } | undefined;

  constructor(private readonly log: vscode.LogOutputChannel) {}

  /** Ask with `request` (the server's answer for the document at `version`), unless `token`
   *  (VS Code's, for the inline request this follows) or a change cancels it first; show the
   *  answer in the active editor when it still shows that version. */
  async ask(
    document: vscode.TextDocument,
    token: vscode.CancellationToken,
    request: (token: vscode.CancellationToken) => Promise<WireNextEdit | undefined>,
  ): Promise<void> {
    this.cancelAsking();
    const source = new vscode.CancellationTokenSource();
    const linked = token.onCancellationRequested(() => source.cancel());
    this.asking = { document, source };
    const version = document.version;
    try {
      const edit = await request(source.token);
      const editor = vscode.window.activeTextEditor;
      if (!edit || source.token.isCancellationRequested || document.version !== version || editor?.document !== document) {
        return;
      }
      this.show(editor, version, edit);
    } finally {
      linked.dispose();
      if (this.asking?.source === source) {
        this.asking = undefined;
      }
      source.dispose();
    }
  }

  private cancelAsking(): void {
    this.asking?.source.cancel();
    this.asking = undefined;
  }

  private show(editor: vscode.TextEditor, version: number, edit: WireNextEdit): void {
    this.clear();
    const { start, end } = edit.range;
    const range = new vscode.Range(start.line, start.character, end.line, end.character);
    const validated = editor.document.validateRange(range);
    if (!validated.isEqual(range)) {
      this.log.warn(`next edit ${edit.id} lies outside the document: not shown`);
      return;
    }
    const hover = new vscode.MarkdownString().appendText('specfill next edit: Tab jumps to it, Tab again applies it, Escape dismisses it\n').appendCodeblock(edit.newText);
    editor.setDecorations(this.deleted, range.isEmpty ? [] : [{ range, hoverMessage: hover }]);
    // (Spaces as no-break spaces: the editor would collapse an indentation's.)
    const after = (text: string) => ({
      contentText: text.replace(/ /g, '\u00a0'),
      color: new vscode.ThemeColor('editorGhostText.foreground'),
      backgroundColor: new vscode.ThemeColor('diffEditor.insertedTextBackground'),
      fontStyle: 'italic',
    });
    editor.setDecorations(
      this.inserted,
      insertedLines(edit.range, edit.newText).map(({ line, atLineEnd, text }) => {
        const at = atLineEnd ? editor.document.lineAt(line).range.end : range.end;
        return { range: new vscode.Range(at, at), hoverMessage: hover, renderOptions: { after: after(text) } };
      }),
    );
    this.shown = { editor, version, edit, range };
    void vscode.commands.executeCommand('setContext', SHOWN_CONTEXT, true);
    this.log.info(`next edit ${edit.id} shown: lines ${start.line + 1}-${end.line + 1}`);
  }

  /** Take the shown edit off the screen (and its keys with it). */
  clear(): void {
    const s = this.shown;
    this.shown = undefined;
    if (s) {
      s.editor.setDecorations(this.deleted, []);
      s.editor.setDecorations(this.inserted, []);
      void vscode.commands.executeCommand('setContext', SHOWN_CONTEXT, false);
    }
  }

  /** Escape: dismiss the shown edit; and stop asking. */
  dismiss(): void {
    this.cancelAsking();
    this.clear();
  }

  /** An ordinary inline completion is shown: it takes precedence. */
  yieldTo(): void {
    this.dismiss();
  }

  /** `document` changed: what was asked or shown for its old text is gone. */
  changed(document: vscode.TextDocument): void {
    if (this.asking?.document === document) {
      this.cancelAsking();
    }
    if (this.shown?.editor.document === document) {
      this.clear();
    }
  }

  /** Another editor became active: the edit shown in the last one goes. */
  switched(editor: vscode.TextEditor | undefined): void {
    if (this.shown && this.shown.editor !== editor) {
      this.clear();
    }
  }

  /** Tab: jump to the edit's start, or apply the edit when the cursor is there (the cursor then
   *  after the text it wrote). */
  async tab(): Promise<void> {
    const s = this.shown;
    const editor = vscode.window.activeTextEditor;
    if (!s || editor !== s.editor || editor.document.version !== s.version) {
      this.clear();
      return;
    }
    const cursor = editor.selection.active;
    if (tabAction({ line: cursor.line, character: cursor.character }, s.edit) === 'jump') {
      editor.selection = new vscode.Selection(s.range.start, s.range.start);
      editor.revealRange(s.range, vscode.TextEditorRevealType.InCenterIfOutsideViewport);
      return;
    }
    this.clear();
    const document = editor.document;
    const startOffset = document.offsetAt(s.range.start);
    const applied = await editor.edit((builder) => builder.replace(s.range, s.edit.newText));
    if (!applied) {
      this.log.warn(`next edit ${s.edit.id} could not be applied`);
      return;
    }
    // The text written, as the document holds it now (its own line ends).
    const written = s.edit.newText.replace(/\r\n|\r|\n/g, document.eol === vscode.EndOfLine.CRLF ? '\r\n' : '\n');
    const end = document.positionAt(startOffset + written.length);
    editor.selection = new vscode.Selection(end, end);
    this.log.info(`next edit ${s.edit.id} applied`);
  }

  dispose(): void {
    this.dismiss();
    this.deleted.dispose();
    this.inserted.dispose();
  }
}
